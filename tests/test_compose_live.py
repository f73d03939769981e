"""The compose smoke: the cluster in containers, for real (``make compose-smoke``; issue 25).

Runs alone, never inside ``make test`` (two clusters side by side on 2 cores would slow both):
every test here is skipped unless ``$KAFKALAB_COMPOSE_SMOKE`` is set, which only the make target
sets. In order, on the environment's port base (``$KAFKALAB_PORT_BASE``, default 9092) and a
state folder of its own (``$KAFKALAB_STATE/compose-smoke``, so no local cluster's data is touched):

1. ``kafka/docker/engine.sh up``: a Docker engine and Compose 2.20 or newer (v5 included),
   installed where the user is root with apt (CI) and nothing installed where they answer (Docker
   Desktop). Exit status 3 (no engine can be had here: not root, no apt, dockerd does not start)
   skips every test, with its reason, for a user; on CI (``$CI`` true, as GitHub Actions and
   GitLab set it), where an engine can always be had (root + apt), it fails every test instead:
   a skip there would hide a broken setup.
2. ``kafka/docker/engine.sh image``: the stand-in Kafka image, built or found by its inputs' hash.
3. ``kafkalab up --backend compose``: containers, not JVMs on the host, serve all four nodes.
4. Every node verb on a container (kill, start, stop, pause, resume, logs, status).
5. Notebooks 06 (reads broker files through the bind mounts) and 08 (kills and restarts brokers)
   under nbval, against this cluster (``KAFKALAB_BACKEND=compose`` in their environment).
6. A second ``up`` on the data the containers wrote: the owner check expects the host uid they
   really wrote as (rootful, rootless or userns-remap engine alike).
7. ``kafkalab down``: no container, volume or network of the project left; then dockerd is
   stopped if step 1 started it.

The seconds each step took are printed (``make compose-smoke`` runs pytest with ``-s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kafkalab import cluster, config

ROOT = config.repo_root()
ENGINE = ROOT / "kafka" / "docker" / "engine.sh"
#: engine.sh's exit status when no engine can be had here (a skip for a user, a failure on CI).
NO_ENGINE = 3
#: The notebooks the smoke runs: 06 reads segment files through the bind mounts, 08 kills and
#: restarts brokers (containers).
NOTEBOOKS = ("06_segments_retention", "08_replication")
#: Seconds ``kafkalab up`` may take: four containers on a 2-core machine (a timeout, not a bound
#: of any assert).
UP_TIMEOUT_S = 240



def smoke_marks(variable: str, target: str) -> list[pytest.MarkDecorator]:
    """A smoke module's marks: a cluster test, an hour at most (an engine installed, Compose or an
    image built: minutes on 2 cores; every step has its own subprocess timeout), and skipped
    unless ``$variable`` is set, which only ``make target`` sets (never inside ``make test``)."""
    return [pytest.mark.cluster, pytest.mark.timeout(3600),
            pytest.mark.skipif(not os.environ.get(variable), reason=f"the {target.removesuffix('-smoke')} smoke "
                               f"runs alone, after make test: make {target}")]


pytestmark = smoke_marks("KAFKALAB_COMPOSE_SMOKE", "compose-smoke")

def on_ci() -> bool:
    """``$CI`` says this is a CI run (``true``, as GitHub Actions, GitLab CI and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


#: Seconds per step, printed at the end.
TIMES: dict[str, float] = {}


def _timed(step: str, cmd: list[str], env: dict[str, str], timeout_s: float, *, times: dict[str, float] = TIMES,
           label: str = "compose smoke") -> subprocess.CompletedProcess:
    """``cmd`` run in the checkout, its seconds kept in ``times[step]`` and printed after ``label``."""
    t0 = time.monotonic()
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, cwd=ROOT)
    times[step] = round(time.monotonic() - t0, 1)
    print(f"{label}: {step}: {times[step]} s (exit {cp.returncode})", file=sys.stderr)
    return cp


def engine_up(env: dict[str, str], timed=_timed) -> tuple[subprocess.CompletedProcess, bool]:
    """``engine.sh up``: its result, and whether it started dockerd (also when it failed after
    starting it), so the caller stops it at the end."""
    pid_file = cluster.docker_work_dir() / "dockerd.pid"
    had_pid_file = pid_file.exists()
    cp = timed("engine (engine.sh up)", [str(ENGINE), "up"], env, timeout_s=1800)
    return cp, pid_file.exists() and not had_pid_file


def require_engine(cp: subprocess.CompletedProcess) -> None:
    """After ``engine_up``: no engine to be had (exit ``NO_ENGINE``) skips, saying why, for a user
    and fails on CI, where one can always be had; any other failure fails."""
    if cp.returncode == NO_ENGINE:
        reason = cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else "engine.sh up exited 3"
        if on_ci():
            pytest.fail(f"no Docker engine on CI, where one can always be had (root + apt): {reason}", pytrace=False)
        pytest.skip(f"no Docker engine here: {reason}")
    assert cp.returncode == 0, f"engine.sh up failed:\n{cp.stderr}"


def _project_objects(project: str) -> dict[str, list[str]]:
    """Containers (any state), volumes and networks that carry the compose project's label."""
    label = f"label=com.docker.compose.project={project}"
    out = {}
    for kind, cmd in (("containers", ["docker", "ps", "-a", "-q", "--filter", label]),
                      ("volumes", ["docker", "volume", "ls", "-q", "--filter", label]),
                      ("networks", ["docker", "network", "ls", "-q", "--filter", label])):
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
        out[kind] = cp.stdout.split()
    return out


def _volumes() -> set[str]:
    return set(subprocess.run(["docker", "volume", "ls", "-q"], capture_output=True, text=True, timeout=60,
                              check=True).stdout.split())


class Smoke:
    def __init__(self, env: dict[str, str]):
        self.env = env
        self.project = cluster.compose_project(int(env["KAFKALAB_PORT_BASE"]))
        self.engine_started_here = False
        #: Volumes before ``up``: the image's VOLUME declarations give each container anonymous
        #: volumes that carry no compose label, so "nothing left" compares against this list.
        self.volumes_before: set[str] = set()

    def kafkalab(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        cp = subprocess.run([sys.executable, "-m", "kafkalab.cli", *args], capture_output=True, text=True,
                            env=self.env, timeout=timeout_s, cwd=ROOT)
        assert cp.returncode == 0, f"kafkalab {' '.join(args)} exited {cp.returncode}:\n{cp.stdout}\n{cp.stderr}"
        return cp

    def status(self) -> dict:
        return json.loads(self.kafkalab("status", "--json").stdout)


def _wipe_if_an_older_kafka_formatted(s: Smoke) -> None:
    """The smoke's own state folder keeps the cluster's data between runs; one an older Kafka
    formatted (``kafkalab up`` says so, ``lanes.STALE_FORMAT``) is wiped, as a lane does, so that
    the smoke starts from the format of the Kafka it tests."""
    from lanes import STALE_FORMAT

    if not (Path(s.env["KAFKALAB_STATE"]) / "cluster").exists():
        return
    cp = subprocess.run([sys.executable, "-m", "kafkalab.cli", "up", "--backend", "compose", "--timeout",
                         str(UP_TIMEOUT_S)], capture_output=True, text=True, env=s.env, timeout=UP_TIMEOUT_S + 300,
                        cwd=ROOT)
    if cp.returncode != 0 and STALE_FORMAT in cp.stderr:
        print(f"compose smoke: {s.env['KAFKALAB_STATE']} was formatted by an older Kafka; wiping it", file=sys.stderr)
        s.kafkalab("down")
        s.kafkalab("wipe", "--yes")
    elif cp.returncode == 0:
        s.kafkalab("down")  # the timed start below is the smoke's, from a stopped cluster
    else:
        raise AssertionError(f"kafkalab up --backend compose exited {cp.returncode}:\n{cp.stdout}\n{cp.stderr}")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Smoke]:
    env = {**os.environ, "KAFKALAB_BACKEND": "compose",
           "KAFKALAB_PORT_BASE": str(config.port_base()),
           "KAFKALAB_STATE": str(config.state_dir() / "compose-smoke")}
    env.pop("KAFKALAB_BOOTSTRAP", None)
    s = Smoke(env)
    cp, s.engine_started_here = engine_up(env)
    engine_ready = cp.returncode == 0
    try:
        require_engine(cp)
        cp = _timed("image (engine.sh image)", [str(ENGINE), "image"], env, timeout_s=1800)
        assert cp.returncode == 0, f"engine.sh image failed:\n{cp.stderr}"
        assert cp.stdout.strip().startswith("kafkalab/kafka:"), cp.stdout
        s.volumes_before = _volumes()
        _wipe_if_an_older_kafka_formatted(s)
        t0 = time.monotonic()
        s.kafkalab("up", "--backend", "compose", "--timeout", str(UP_TIMEOUT_S), timeout_s=UP_TIMEOUT_S + 300)
        TIMES["kafkalab up --backend compose"] = round(time.monotonic() - t0, 1)
        print(f"compose smoke: kafkalab up: {TIMES['kafkalab up --backend compose']} s", file=sys.stderr)
        yield s
    finally:
        if engine_ready and any(_project_objects(s.project).values()):
            subprocess.run([sys.executable, "-m", "kafkalab.cli", "down"], env=env, timeout=300, cwd=ROOT)
        if s.engine_started_here:
            _timed("engine stop (engine.sh down)", [str(ENGINE), "down"], env, timeout_s=120)
        print(f"compose smoke times (s): {json.dumps(TIMES)}", file=sys.stderr)


def test_containers_not_host_jvms_serve_all_four_nodes(smoke):
    st = smoke.status()
    assert st["backend"] == "compose"
    nodes = {**st["brokers"], **st["controllers"]}
    assert len(nodes) == 4 and all(n["alive"] and not n["paused"] for n in nodes.values()), nodes
    running = subprocess.run(["docker", "ps", "--filter", f"label=com.docker.compose.project={smoke.project}",
                              "--format", "{{.Label \"com.docker.compose.service\"}} {{.Image}}"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
    services = {line.split()[0]: line.split()[1] for line in running if line.strip()}
    assert set(services) == {"controller-101", "broker-1", "broker-2", "broker-3"}, services
    state = smoke.env["KAFKALAB_STATE"]
    host_jvms = [p.pid for p in psutil.process_iter(["cmdline"])
                 if any(a.startswith("-Dkafkalab.node=") for a in p.info["cmdline"] or ())
                 and any(state in a for a in p.info["cmdline"] or ())]
    assert host_jvms == [], f"no broker of this state folder runs as a JVM on the host: {host_jvms}"


def test_every_verb_acts_on_a_container(smoke):
    def alive(node_id: int) -> tuple[bool, bool]:
        st = smoke.status()
        n = {**st["brokers"], **st["controllers"]}[str(node_id)]
        return n["alive"], n["paused"]

    smoke.kafkalab("kill", "2")
    assert alive(2) == (False, False), "kill: the container exited"
    smoke.kafkalab("start", "2")
    assert alive(2) == (True, False), "start: the container runs and serves again"
    smoke.kafkalab("stop", "3")
    assert alive(3) == (False, False), "stop: the container exited after its controlled shutdown"
    smoke.kafkalab("start", "3")
    smoke.kafkalab("pause", "1")
    assert alive(1) == (True, True), "pause: frozen, not gone"
    smoke.kafkalab("resume", "1")
    assert alive(1) == (True, False)
    logs = smoke.kafkalab("logs", "1", "-n", "5").stdout
    assert "broker-1" in logs and len(logs.splitlines()) >= 1, logs
    from kafkalab import versions

    # the versions are asked of each container (its Kafka jar), never read from a log line
    with pytest.MonkeyPatch.context() as mp:
        for k in ("KAFKALAB_BACKEND", "KAFKALAB_PORT_BASE", "KAFKALAB_STATE"):
            mp.setenv(k, smoke.env[k])
        assert versions.broker_versions(cluster.status()) == {i: config.KAFKA_VERSION for i in config.BROKER_IDS}


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_passes_on_containers(smoke, notebook):
    path = ROOT / "notebooks" / f"{notebook}.ipynb"
    cp = _timed(f"notebook {notebook}", [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-cell-timeout=300",
                                           "-p", "no:cacheprovider", "--capture=sys", "-q", str(path)],
                smoke.env, timeout_s=1800)
    assert cp.returncode == 0, f"{notebook} failed on the compose backend:\n{cp.stdout[-6000:]}\n{cp.stderr[-2000:]}"


def test_a_second_up_accepts_the_data_its_own_containers_wrote(smoke):
    # the owner check of `up` (cluster._check_data_owner) against this engine's real user
    # namespace: the uid it expects is the one the containers' files have on this host
    with pytest.MonkeyPatch.context() as mp:
        for k in ("KAFKALAB_BACKEND", "KAFKALAB_PORT_BASE", "KAFKALAB_STATE"):
            mp.setenv(k, smoke.env[k])
        metas = [n.data_dir / "meta.properties" for n in config.Topology(1).nodes]
        owners = {m.stat().st_uid for m in metas}
        expected = cluster.compose_writer_uid(cluster.ComposeCluster())
    assert expected is None or owners == {expected}, (
        f"the containers wrote meta.properties as host uid(s) {owners}; the owner check expects {expected}")
    smoke.kafkalab("down")
    smoke.kafkalab("up", "--backend", "compose", "--timeout", str(UP_TIMEOUT_S), timeout_s=UP_TIMEOUT_S + 300)
    st = smoke.status()
    assert all(n["alive"] for n in {**st["brokers"], **st["controllers"]}.values()), st


def test_down_leaves_no_container_volume_or_network(smoke):
    smoke.kafkalab("down")
    left = _project_objects(smoke.project)
    left["volumes"] = sorted(set(left["volumes"]) | (_volumes() - smoke.volumes_before))  # anonymous ones too
    assert left == {"containers": [], "volumes": [], "networks": []}, f"kafkalab down left {left}"
