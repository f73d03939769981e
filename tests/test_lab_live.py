"""The lab smoke: the whole lab in a container, as a learner with only Docker runs it
(``make lab-smoke``, after the compose smoke in .ci/run; issue 36).

Runs alone, never inside ``make test``: every test here is skipped unless ``$KAFKALAB_LAB_SMOKE``
is set, which only the make target sets. In order:

1. ``kafka/docker/engine.sh up``: an engine and Compose (exit 3, no engine to be had: a skip
   that says what is missing, except on CI, where it fails).
2. ``kafka/docker/engine.sh lab-image``: the image of .devcontainer/Dockerfile, found by the hash
   of the checkout's files or built (on python:3.13-slim, or the stand-in of it made here).
3. ``docker compose --profile lab up -d lab`` under a project name and a host port of its own
   (``$KAFKALAB_LAB_PORT``, default ``DEFAULT_PORT``), then the URL the container prints, with
   the token it made: JupyterLab answers there, on 127.0.0.1 only, and refuses a request
   without the token.
4. Inside the container (``docker compose exec``): the cluster is the local backend, no process
   runs as root but the init, no Docker socket; notebooks 00, 03 and 08 pass under nbval.
5. Chromium (tests/test_browser.py's set-up) opens notebook 00 from that JupyterLab and runs
   its first code cell in the container's kernel; the notebook on the host is not changed.
6. ``docker compose --profile lab down``: no container and no network of the project left;
   dockerd stopped if step 1 started it.

The seconds of each step are printed (``make lab-smoke`` runs pytest with ``-s``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from kafkalab import cluster, config
from test_browser import LAB_SETTINGS, _kernels, _shot, _wait, browser  # noqa: F401 (browser: a fixture)
import test_compose_live as compose_live
from test_compose_live import ENGINE, _project_objects

ROOT = config.repo_root()
#: The host port the smoke publishes JupyterLab on unless ``$KAFKALAB_LAB_PORT`` says: not the
#: learner's 8888, so a lab a person runs is left alone.
DEFAULT_PORT = 18888
#: The notebooks the issue names: the tour (00), offset commits with a crash (03), replication
#: with brokers killed and restarted (08: faults are signals inside the container).
NOTEBOOKS = ("00_cluster_tour", "03_offset_commit", "08_replication")
#: Seconds the container may take from ``up`` to its URL line (``kafkalab up`` and JupyterLab on
#: a loaded 2-core machine): a timeout, not a bound any assert checks.
START_TIMEOUT_S = 600
#: The line .devcontainer/lab-start prints once the cluster is up and JupyterLab answers.
URL_LINE = re.compile(r"lab-start: open (http://127\.0\.0\.1:(\d+))/lab\?token=([0-9a-f]+)")

# the image's first build (Debian packages, the jars, the Python dependencies) takes minutes
pytestmark = compose_live.smoke_marks("KAFKALAB_LAB_SMOKE", "lab-smoke")

#: Seconds per step, printed at the end.
TIMES: dict[str, float] = {}
_timed = functools.partial(compose_live._timed, times=TIMES, label="lab smoke")


@dataclass
class Lab:
    env: dict[str, str]
    project: str
    port: int
    base: str = ""
    token: str = ""
    engine_started_here: bool = False
    compose: list[str] = field(default_factory=list)

    def compose_cmd(self, *args: str) -> list[str]:
        return [*self.compose, "-p", self.project, "--profile", "lab", *args]

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.compose_cmd(*args), capture_output=True, text=True, env=self.env,
                              timeout=timeout_s, cwd=ROOT)

    def exec(self, *cmd: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """``cmd`` in the lab container, as the learner (``lab``), in /opt/kafkalab."""
        return self.run("exec", "-T", "-u", "lab", "lab", *cmd, timeout_s=timeout_s)

    def logs(self) -> str:
        return self.run("logs", "--no-color", "lab", timeout_s=60).stdout


def _url_line(lab: Lab) -> re.Match | None:
    m = URL_LINE.search(lab.logs())
    if m is None:
        state = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={lab.project}",
                                "--filter", "status=exited"], capture_output=True, text=True, timeout=60).stdout
        assert not state.strip(), f"the lab container exited before serving:\n{lab.logs()[-4000:]}"
    return m


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    port = int(os.environ.get("KAFKALAB_LAB_PORT") or DEFAULT_PORT)
    env = {**os.environ, "KAFKALAB_LAB_PORT": str(port)}
    s = Lab(env=env, project=f"kafkalab-lab-{port}", port=port)
    cp, s.engine_started_here = compose_live.engine_up(env, _timed)
    engine_ready = cp.returncode == 0
    try:
        compose_live.require_engine(cp)
        s.compose = cluster.compose_program("docker")
        cp = _timed("lab image (engine.sh lab-image)", [str(ENGINE), "lab-image"], env, timeout_s=3000)
        assert cp.returncode == 0, f"engine.sh lab-image failed:\n{cp.stderr[-4000:]}"
        env["KAFKALAB_LAB_IMAGE"] = cp.stdout.strip().splitlines()[-1]
        assert env["KAFKALAB_LAB_IMAGE"].startswith("kafkalab/lab:"), cp.stdout
        assert not any(_project_objects(s.project).values()), f"project {s.project} exists already: not this run's"
        t0 = time.monotonic()
        cp = _timed("docker compose --profile lab up -d lab", s.compose_cmd("up", "-d", "lab"), env, timeout_s=600)
        assert cp.returncode == 0, f"docker compose up failed:\n{cp.stderr[-4000:]}"
        m = _wait(lambda: _url_line(s), START_TIMEOUT_S, "the lab container to print the URL of JupyterLab", 1.0)
        TIMES["start (up to the URL: cluster up, JupyterLab answering)"] = round(time.monotonic() - t0, 1)
        print(f"lab smoke: start: {TIMES['start (up to the URL: cluster up, JupyterLab answering)']} s", file=sys.stderr)
        s.base, s.token = m.group(1), m.group(3)
        yield s
    finally:
        if engine_ready and s.compose and any(_project_objects(s.project).values()):
            _timed("docker compose --profile lab down (cleanup)", s.compose_cmd("down"), env, timeout_s=300)
        if s.engine_started_here:
            _timed("engine stop (engine.sh down)", [str(ENGINE), "down"], env, timeout_s=120)
        print(f"lab smoke times (s): {json.dumps(TIMES)}", file=sys.stderr)


def _status(base: str, token: str | None) -> int:
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/api/status", headers=headers), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_jupyterlab_answers_on_localhost_with_the_token_it_printed(lab):
    assert lab.base == f"http://127.0.0.1:{lab.port}", f"the printed URL names the published port: {lab.base}"
    assert len(lab.token) >= 32, "the token is made at start, 24 random bytes"
    assert _status(lab.base, lab.token) == 200
    assert _status(lab.base, None) == 403, "JupyterLab refuses a request without the token"
    cp = lab.run("port", "lab", "8888", timeout_s=60)
    assert cp.returncode == 0 and cp.stdout.split() == [f"127.0.0.1:{lab.port}"], \
        f"JupyterLab is published on 127.0.0.1 only: {cp.stdout}{cp.stderr}"


def test_the_cluster_runs_inside_the_lab_container_as_the_learner(lab):
    cp = lab.exec("kafkalab", "status", "--json")
    assert cp.returncode == 0, cp.stderr
    st = json.loads(cp.stdout)
    assert st["backend"] == "local", st["backend"]
    nodes = {**st["brokers"], **st["controllers"]}
    assert len(nodes) == 4 and all(n["alive"] for n in nodes.values()), nodes
    ps = lab.exec("ps", "-eo", "uid=,args=").stdout.splitlines()
    root = [line for line in ps if line.split()[0] == "0" and "docker-init" not in line]
    assert not root, f"only the init runs as root in the lab container: {root}"
    assert any("java" in line and "-Dkafkalab.node=" in line for line in ps), ps
    assert lab.exec("test", "-e", "/var/run/docker.sock").returncode != 0, "the lab container has no Docker socket"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_passes_inside_the_lab_container(lab, notebook):
    cp = _timed(f"notebook {notebook} (nbval, in the container)",
                lab.compose_cmd("exec", "-T", "-u", "lab", "lab", "pytest", "--nbval-lax", "--nbval-cell-timeout=300",
                                "-p", "no:cacheprovider", "--capture=sys", "-q", f"notebooks/{notebook}.ipynb"),
                lab.env, timeout_s=1800)
    assert cp.returncode == 0, f"{notebook} failed in the lab container:\n{cp.stdout[-6000:]}\n{cp.stderr[-2000:]}"


def _put_setting(lab: Lab, name: str, value: dict) -> None:
    """One of test_browser's LAB_SETTINGS, through JupyterLab's settings API (into the container's
    home, never into the checkout)."""
    extension, _, plugin_name = name.removesuffix(".jupyterlab-settings").rpartition("/")
    plugin = f"{extension}:{plugin_name}"
    body = json.dumps({"raw": json.dumps(value)}).encode()
    req = urllib.request.Request(f"{lab.base}/lab/api/settings/{plugin}", data=body, method="PUT",
                                 headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 204, f"{plugin}: {r.status}"


@pytest.mark.timeout(1800)
def test_chromium_opens_a_notebook_from_the_lab_container_and_runs_a_cell(lab, browser):
    notebook = ROOT / "notebooks" / f"{NOTEBOOKS[0]}.ipynb"
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    for name, value in LAB_SETTINGS.items():  # no autosave: the test never writes notebooks/
        _put_setting(lab, name, value)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(120_000)  # ms
    page = context.new_page()
    try:
        t0 = time.monotonic()
        page.goto(f"{lab.base}/lab/tree/{notebook.name}?token={lab.token}", wait_until="load")
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        cells.first.wait_for(timeout=120_000)
        _wait(lambda: [k for k in _kernels(lab.base, lab.token) if k["execution_state"] == "idle"],
              120, "the notebook's kernel (in the container) to start and be idle")
        TIMES["browser: notebook open, kernel idle"] = round(time.monotonic() - t0, 1)
        cells.first.locator(".jp-InputArea-prompt").click()
        page.keyboard.press("Control+Enter")
        prompt = cells.first.locator(".jp-InputArea-prompt")
        _wait(lambda: re.fullmatch(r"\[\d+\]:", prompt.inner_text().strip()), 300, "the first code cell to run")
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']", has_text="Traceback")
        assert errors.count() == 0, "\n".join(errors.all_inner_texts())[-4000:]
        _shot(page, "jupyterlab/lab-container-notebook-00")
    finally:
        context.close()
        for kernel in _kernels(lab.base, lab.token):
            urllib.request.urlopen(urllib.request.Request(f"{lab.base}/api/kernels/{kernel['id']}", method="DELETE",
                                                          headers={"Authorization": f"token {lab.token}"}), timeout=30)
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before, "the test changed the notebook on the host"


def test_down_leaves_no_container_or_network(lab):
    cp = _timed("docker compose --profile lab down", lab.compose_cmd("down"), lab.env, timeout_s=300)
    assert cp.returncode == 0, cp.stderr
    left = _project_objects(lab.project)
    assert left == {"containers": [], "volumes": [], "networks": []}, f"down left {left}"
