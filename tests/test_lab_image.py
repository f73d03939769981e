"""The lab in containers, as the files say it (issue 36): docker-compose.yml's ``lab`` service,
.devcontainer/Dockerfile, .devcontainer/devcontainer.json, .devcontainer/lab-start. Pure file
reading, no engine: the containers themselves run in tests/test_lab_live.py (``make lab-smoke``).
"""

from __future__ import annotations

import json
import re

from compose_files import COMPOSE, compose_services, load_yaml, published
from kafkalab import config

ROOT = config.repo_root()
DEVCONTAINER = ROOT / ".devcontainer"
DOCKERFILE = DEVCONTAINER / "Dockerfile"
#: The official image a learner's Docker pulls (Docker Hub's python, Debian 13 based).
OFFICIAL_BASE = "python:3.13-slim"
#: Where the image keeps the checkout; the compose service mounts notebooks/ over its copy.
IMAGE_CHECKOUT = "/opt/kafkalab"


def _lab() -> dict:
    return load_yaml(COMPOSE)["services"]["lab"]


def _dockerfile_lines() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_lab_is_a_profile_so_plain_compose_up_starts_the_cluster_alone():
    assert _lab()["profiles"] == ["lab"]
    assert "lab" not in compose_services(1), "docker compose up (no profile) starts the nodes only"
    assert "lab" in compose_services(1, profiles=("lab",))


def test_every_published_port_of_every_service_is_on_localhost_only():
    for profiles in ((), ("lab",)):
        for name, service in compose_services(1, profiles=profiles).items():
            for host_ip, host_port, _ in published(service):
                assert host_ip == "127.0.0.1", f"{name} publishes {host_port} on {host_ip or 'every interface'}"
    assert published(compose_services(1, profiles=("lab",))["lab"]) == [("127.0.0.1", 8888, 8888)], \
        "JupyterLab on http://127.0.0.1:8888 (KAFKALAB_LAB_PORT moves the host port)"


def test_the_lab_mounts_the_checkouts_notebooks_and_no_docker_socket():
    lab = _lab()
    assert lab["volumes"] == [f"./notebooks:{IMAGE_CHECKOUT}/notebooks"], lab["volumes"]
    text = COMPOSE.read_text()
    assert "docker.sock" not in text, "no service reaches the Docker engine"
    assert not lab.get("privileged") and "network_mode" not in lab and "pid" not in lab


def test_the_lab_image_is_built_from_the_devcontainer_dockerfile():
    lab = _lab()
    assert lab["build"] == {"context": ".", "dockerfile": ".devcontainer/Dockerfile"}
    assert lab["image"] == "${KAFKALAB_LAB_IMAGE:-kafkalab/lab:latest}"
    dc = json.loads((DEVCONTAINER / "devcontainer.json").read_text())
    assert dc["build"] == {"dockerfile": "Dockerfile", "context": ".."}, "the same Dockerfile and context"


def test_the_dockerfile_starts_from_the_official_python_image():
    froms = [line.split()[1:] for line in _dockerfile_lines() if line.upper().startswith("FROM ")]
    assert froms == [[OFFICIAL_BASE]], f"one stage, FROM {OFFICIAL_BASE}: {froms}"
    engine = (ROOT / "kafka" / "docker" / "engine.sh").read_text()
    assert f"LAB_BASE_IMAGE={OFFICIAL_BASE}\n" in engine, "engine.sh's stand-in carries the official name"


def test_the_dockerfile_fetches_no_binary_of_one_architecture():
    text = "\n".join(_dockerfile_lines())
    for word in ("amd64", "x86_64", "aarch64", "arm64", "curl ", "wget ", "--platform"):
        assert word not in text, f"the lab image is multi-arch by construction: {word!r} in the Dockerfile"
    assert "openjdk-21-jdk-headless" in text, "a JDK (javac), from Debian's packages"


def test_the_dockerfile_fetches_the_jars_as_make_jars_does():
    make = (ROOT / "Makefile").read_text()
    mvn = re.search(r"^MVN := (.+)$", make, re.M).group(1)
    lines = "\n".join(_dockerfile_lines())
    for pom in re.findall(r"\$\(MVN\) -f (\S+) package", make):
        assert f"{mvn} -f {pom} package" in lines, f"the Dockerfile runs {mvn} -f {pom} package, as make jars"


def test_no_token_or_password_is_written_in_the_lab_files():
    texts = {p.name: p.read_text() for p in (DOCKERFILE, DEVCONTAINER / "devcontainer.json", DEVCONTAINER / "lab-start")}
    texts["lab service"] = json.dumps(_lab())
    for name, text in texts.items():
        assert not re.search(r"token=[0-9a-f]{8,}|token=['\"]{2}|password", text, re.I), f"{name} holds a token or password"
    start = texts["lab-start"]
    assert "secrets.token_hex" in start and '--IdentityProvider.token="$token"' in start, "a token made at each start"
    assert "--allow-root" not in start and "setpriv --reuid=lab" in start, "JupyterLab runs as the learner, not root"


def test_the_devcontainer_is_sized_for_codespaces_and_forwards_jupyterlab():
    dc = json.loads((DEVCONTAINER / "devcontainer.json").read_text())
    assert dc["forwardPorts"] == [8888]
    assert dc["hostRequirements"] == {"cpus": 2, "memory": "8gb"}
    assert dc["remoteUser"] == "lab", "the learner's user, not root"


def test_the_build_context_leaves_out_what_git_ignores():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".kafkalab", "build"} <= ignored, ignored


def test_ci_runs_the_lab_smoke_after_the_compose_smoke():
    run = (ROOT / ".ci" / "run").read_text()
    assert "make lab-smoke" in run and run.index("make compose-smoke") < run.index("make lab-smoke"), \
        ".ci/run runs the lab smoke after the compose smoke, never beside it"
    assert "CI=${CI:-true} make lab-smoke" in run, "on CI no engine fails the lab smoke"
