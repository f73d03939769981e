"""The workshop hub as its files say it (issue 39): workshop/jupyterhub_config.py read the way
JupyterHub reads it (``get_config()`` into a traitlets Config), workshop/compose.yml, the two
Dockerfiles, the locks, workshop/workshop.sh and the Makefile targets. No engine: the hub itself
runs in tests/test_workshop_live.py (``make workshop-smoke``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from traitlets.config import Config

from compose_files import load_yaml
from kafkalab import config

ROOT = config.repo_root()
WORKSHOP = ROOT / "workshop"
HUB_CONFIG = WORKSHOP / "jupyterhub_config.py"
COMPOSE = WORKSHOP / "compose.yml"
SCRIPT = WORKSHOP / "workshop.sh"
#: The versions the issue names, on PyPI and the npm registry (checked 2026-11-29).
PINS = {"jupyterhub": "6.1.1", "dockerspawner": "14.0.0", "jupyterhub-idle-culler": "2.0.0"}
PROXY = ("configurable-http-proxy", "5.2.0")
SECRETS = {"learner-password": "learners-pw-123", "admin-password": "a" * 43, "api-token": "t" * 43}


def load_hub_config(tmp_path: Path, **env: str) -> Config:
    """jupyterhub_config.py run as ``jupyterhub -f`` runs it, with ``env`` as its environment and
    the secrets workshop.sh would write in ``tmp_path``; a refusal is the SystemExit it raises."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    for name, value in SECRETS.items():
        (secrets / name).write_text(value + "\n")
    c = Config()
    saved = dict(os.environ)
    os.environ.update({"WORKSHOP_SECRETS": str(secrets), **env})
    try:
        exec(compile(HUB_CONFIG.read_text(), str(HUB_CONFIG), "exec"), {"get_config": lambda: c, "__name__": "config"})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return c


def _locked(path: Path) -> dict[str, str]:
    return dict(line.split("==", 1) for line in path.read_text().splitlines() if "==" in line and not line.startswith("#"))


def test_the_hub_config_gives_each_learner_a_lab_container_of_their_own(tmp_path):
    c = load_hub_config(tmp_path)
    assert c.JupyterHub.spawner_class == "dockerspawner.DockerSpawner"
    spawner = c.DockerSpawner
    assert spawner.network_name == "kafkalab-workshop" and spawner.prefix == "kafkalab-workshop"
    assert spawner.remove is True, "a stopped lab's container goes"
    assert spawner.volumes == {"kafkalab-workshop-notebooks-{username}": "/opt/kafkalab/notebooks"}, \
        "each learner's notebooks: a named volume of their own"
    assert spawner.mem_limit == "4G" and spawner.cpu_limit == 2.0
    assert spawner.extra_create_kwargs["labels"] == {"org.kafkalab.workshop": "kafkalab-workshop",
                                                    "org.kafkalab.workshop.user": "{username}"}
    assert spawner.pull_policy == "never"
    assert c.Spawner.start_timeout >= 300, "kafkalab up runs before the server answers"
    c2 = load_hub_config(tmp_path, WORKSHOP_PROJECT="p", WORKSHOP_MEM_LIMIT="3G", WORKSHOP_CPU_LIMIT="1.5",
                         WORKSHOP_MAX_LEARNERS="12")
    assert (c2.DockerSpawner.mem_limit, c2.DockerSpawner.cpu_limit) == ("3G", 1.5)
    assert c2.DockerSpawner.volumes == {"p-notebooks-{username}": "/opt/kafkalab/notebooks"}
    assert c2.JupyterHub.active_server_limit == 12


def test_no_learner_container_reaches_the_docker_engine(tmp_path):
    spawner = load_hub_config(tmp_path).DockerSpawner
    text = json.dumps({k: v for k, v in spawner.items()})
    assert "docker.sock" not in text, "the learners' containers get no Docker socket"
    host = spawner.extra_host_config
    assert not host.get("privileged") and "network_mode" not in host and "pid_mode" not in host
    assert "no-new-privileges:true" in host["security_opt"] and host["init"] is True
    hub = load_yaml(COMPOSE)["services"]["hub"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in hub["volumes"], "only the hub holds the socket"
    assert list(load_yaml(COMPOSE)["services"]) == ["hub"]


def test_login_is_a_shared_workshop_password_and_one_admin(tmp_path):
    c = load_hub_config(tmp_path)
    assert c.JupyterHub.authenticator_class == "shared-password"
    assert c.SharedPasswordAuthenticator.user_password == SECRETS["learner-password"]
    assert c.SharedPasswordAuthenticator.admin_password == SECRETS["admin-password"]
    assert c.Authenticator.admin_users == {"instructor"} and c.Authenticator.allow_all is True
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert services["workshop-admin"]["api_token"] == SECRETS["api-token"]
    culler = services["idle-culler"]["command"]
    assert culler[1:3] == ["-m", "jupyterhub_idle_culler"] and "--timeout=3600" in culler
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["idle-culler"]["scopes"] == ["list:users", "read:users:activity", "read:servers", "delete:servers"]
    assert roles["admin"]["services"] == ["workshop-admin"]


def test_the_hub_serves_127_0_0_1_by_default_and_another_interface_only_over_tls(tmp_path):
    assert load_hub_config(tmp_path).JupyterHub.bind_url == "http://:8000"
    hub = load_yaml(COMPOSE)["services"]["hub"]
    assert hub["ports"] == ["${WORKSHOP_IP:-127.0.0.1}:${WORKSHOP_PORT:-8000}:8000"]
    with pytest.raises(SystemExit, match="WORKSHOP_IP=0.0.0.0 serves the hub beyond this host, which needs TLS"):
        load_hub_config(tmp_path, WORKSHOP_IP="0.0.0.0")
    (tmp_path / "secrets" / "tls.crt").write_text("cert")
    (tmp_path / "secrets" / "tls.key").write_text("key")
    c = load_hub_config(tmp_path, WORKSHOP_IP="192.0.2.10")
    assert c.JupyterHub.bind_url == "https://:8000" and c.JupyterHub.ssl_cert.endswith("/tls.crt")


@pytest.mark.subprocess
@pytest.mark.parametrize("ip", ["0.0.0.0", "192.0.2.10"])
def test_workshop_sh_refuses_another_interface_without_tls_before_starting_anything(tmp_path, ip):
    env = {**os.environ, "WORKSHOP_IP": ip, "WORKSHOP_SECRETS": str(tmp_path / "s"), "PATH": "/usr/bin:/bin"}
    for name in ("WORKSHOP_TLS", "WORKSHOP_TLS_CERT", "WORKSHOP_TLS_KEY"):
        env.pop(name, None)
    cp = subprocess.run([str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    assert f"WORKSHOP_IP={ip} serves the hub beyond this host, which needs TLS" in cp.stderr
    assert "nothing was started" in cp.stderr and not (tmp_path / "s").exists()


def test_the_versions_are_pinned_and_the_learners_hub_is_the_hubs(tmp_path):
    hub_in = {k: v for k, v in _locked(WORKSHOP / "hub.in").items()}
    assert hub_in == PINS
    hub = _locked(WORKSHOP / "hub.lock")
    assert {k: hub[k] for k in PINS} == PINS
    learner = _locked(WORKSHOP / "singleuser.lock")
    assert learner["jupyterhub"] == PINS["jupyterhub"], "jupyterhub-singleuser at the hub's version"
    lab = _locked(ROOT / "requirements.lock")
    lab = {k.split("[")[0]: v.split(";")[0].strip() for k, v in lab.items()}
    changed = {k: (lab[k], v) for k, v in learner.items() if k in lab and lab[k] != v}
    assert not changed, f"the learners' image changes no package of the lab's lock: {changed}"
    package = json.loads((WORKSHOP / "proxy" / "package.json").read_text())
    assert package["dependencies"] == {PROXY[0]: PROXY[1]}
    lock = json.loads((WORKSHOP / "proxy" / "package-lock.json").read_text())
    assert lock["packages"][f"node_modules/{PROXY[0]}"]["version"] == PROXY[1]


def test_the_images_build_on_the_official_base_and_the_lab_image():
    def froms(name: str) -> list[str]:
        return [line.split()[1] for line in (WORKSHOP / name).read_text().splitlines() if line.startswith("FROM ")]
    assert froms("hub.Dockerfile") == ["python:3.13-slim"], "the lab image's base (.devcontainer/Dockerfile)"
    assert froms("singleuser.Dockerfile") == ["${LAB_IMAGE}"]
    hub = (WORKSHOP / "hub.Dockerfile").read_text()
    assert "nodejs npm" in hub and "npm ci" in hub, "Debian's Node.js, the proxy from its lock"
    code = "\n".join(line for name in ("hub.Dockerfile", "singleuser.Dockerfile")
                     for line in (WORKSHOP / name).read_text().splitlines() if not line.startswith("#"))
    for word in ("amd64", "x86_64", "aarch64", "arm64", "curl ", "wget "):
        assert word not in code, f"no binary of one architecture is fetched: {word!r}"
    assert set((WORKSHOP / ".dockerignore").read_text().split()) >= {".secrets", "k8s"}


def test_no_password_or_token_is_in_the_repository():
    assert "/workshop/.secrets/" in (ROOT / ".gitignore").read_text().splitlines(), "the secrets stay out of git"
    tracked = [str(p.relative_to(ROOT)) for p in WORKSHOP.rglob("*") if p.is_file() and ".secrets" not in p.parts]
    for name in tracked:
        path = ROOT / name
        if path.suffix in (".lock", ".json") or not path.is_file():
            continue
        text = path.read_text()
        assert not re.search(r"(password|api_token|token)\s*[=:]\s*['\"][^'\"{$]{6,}", text, re.I), f"{name} holds a secret"


def test_stop_leaves_nothing_by_design(tmp_path):
    c = load_hub_config(tmp_path)
    assert c.JupyterHub.cleanup_servers is True, "stopping the hub stops every lab"
    assert c.DockerSpawner.remove is True
    compose = load_yaml(COMPOSE)
    assert "volumes" not in compose, "no volume of the compose project: down -v has none to leave"
    assert compose["networks"]["workshop"]["name"] == "${WORKSHOP_PROJECT:-kafkalab-workshop}"
    for name in ("hub.Dockerfile", "singleuser.Dockerfile"):
        assert "VOLUME" not in (WORKSHOP / name).read_text(), f"{name}: an anonymous volume would outlive down"
    script = SCRIPT.read_text()
    assert "LABEL=org.kafkalab.workshop\n" in script, "workshop.sh removes the labs by the label the hub gives them"
    down = script[script.index("cmd_down() {"):script.index("notebook_volumes()")]
    assert down.index("compose stop") < down.index("docker rm -f") < down.index("compose down -v --remove-orphans")
    assert "-notebooks-" in script[script.index("notebook_volumes()"):], "clean removes the notebook volumes the hub names"


def test_make_targets_and_ci_order():
    make = (ROOT / "Makefile").read_text()
    for target, recipe in (("workshop", "workshop/workshop.sh up"), ("workshop-down", "workshop/workshop.sh down"),
                           ("workshop-clean", "workshop/workshop.sh clean"),
                           ("workshop-smoke", "KAFKALAB_WORKSHOP_SMOKE=1 $(BIN)/pytest tests/test_workshop_live.py")):
        assert re.search(rf"^{target}:.*\n\t{re.escape(recipe)}", make, re.M), target
    run = (ROOT / ".ci" / "run").read_text()
    assert run.index("make lab-smoke") < run.index("make workshop-smoke"), "after the lab smoke, whose image it builds on"
    assert "CI=${CI:-true} make workshop-smoke" in run


def test_the_kubernetes_values_use_the_same_image_limits_and_login_and_say_they_were_not_run(tmp_path):
    values = load_yaml(WORKSHOP / "k8s" / "values.yaml")
    header = (WORKSHOP / "k8s" / "values.yaml").read_text().split("\n\n")[0]
    assert "NOT RUN HERE" in header and "not run here" in (WORKSHOP / "k8s" / "README.md").read_text()
    single = values["singleuser"]
    c = load_hub_config(tmp_path)
    assert single["cmd"] == "/opt/workshop/singleuser-start" and single["uid"] == 1000
    assert single["storage"]["homeMountPath"] == c.DockerSpawner.notebook_dir
    assert (single["memory"]["limit"], single["cpu"]["limit"]) == (c.DockerSpawner.mem_limit, c.DockerSpawner.cpu_limit)
    assert values["hub"]["config"]["JupyterHub"]["authenticator_class"] == c.JupyterHub.authenticator_class
    assert values["cull"]["enabled"] is True and values["proxy"]["https"]["enabled"] is True
    assert "SharedPasswordAuthenticator" not in values["hub"]["config"], "the passwords come from a secret"
    assert all("secretKeyRef" in v["valueFrom"] for v in values["hub"]["extraEnv"].values())
    start = (WORKSHOP / "singleuser-start").read_text()
    assert 'cp -a /opt/workshop/notebooks/. "$NOTEBOOKS/"' in start, "an empty volume gets the notebooks"
    assert "cp -a /opt/kafkalab/notebooks /opt/workshop/notebooks" in (WORKSHOP / "singleuser.Dockerfile").read_text()
