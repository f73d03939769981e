"""The workshop smoke: the hub of workshop/ as an instructor starts it, two learners in it
(``make workshop-smoke``, after the lab smoke in .ci/run; issue 39).

Runs alone, never inside ``make test``: every test here is skipped unless
``$KAFKALAB_WORKSHOP_SMOKE`` is set, which only the make target sets. In order:

1. ``kafka/docker/engine.sh up``: an engine (no engine to be had: a skip that says what is
   missing, except on CI, where it fails).
2. ``workshop/workshop.sh up`` under a project, a free port and a secrets folder of its own: the
   lab image (``engine.sh lab-image``, or ``$KAFKALAB_LAB_IMAGE``), the hub's two images, the hub
   on 127.0.0.1 with an admin API token made at this start.
3. Two learners log in with the workshop password through the hub's login form (a wrong password
   is refused); the admin token spawns both labs at once through the REST API; each learner
   reaches their own lab through the hub and not the other's.
4. Inside each lab: no Docker socket, only the learner's notebook volume, the limits set; its
   brokers answer on its own 127.0.0.1 and refuse a connection from the other lab.
5. Notebook 03 under nbval in both labs at the same time (``docker exec``), each against its own
   cluster; a topic made in one lab is never seen in the other. ``docker stats`` samples each lab
   idle and during the run: the capacity numbers of notebooks/workshop_guide.md.
6. A learner's lab stopped and started again keeps their notebooks (their volume).
7. The instructor logs in with the admin password and opens the admin page; a learner cannot.
   The hub's image makes a self-signed certificate when asked for another interface.
8. ``workshop.sh down``: no container and no network left, only the notebook volumes, which
   ``workshop.sh clean`` removes; dockerd stopped if step 1 started it.

The seconds of each step and the samples are printed (``make workshop-smoke`` runs pytest with ``-s``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
import requests

from kafkalab import config
import test_compose_live as compose_live
from test_compose_live import ENGINE
from test_browser import _wait

ROOT = config.repo_root()
SCRIPT = ROOT / "workshop" / "workshop.sh"
#: Names DockerSpawner keeps as they are (it escapes anything but letters and digits: "learner-a" is
#: "learner-2da" in container and volume names).
LEARNERS = ("learner1", "learner2")
NOTEBOOK = "03_offset_commit"
LABEL = "org.kafkalab.workshop"
#: Seconds a lab may take from the spawn request to ready (``kafkalab up`` and the server, both labs
#: at once on a loaded 2-core machine): a timeout, not a bound any assert checks.
SPAWN_TIMEOUT_S = 900

pytestmark = compose_live.smoke_marks("KAFKALAB_WORKSHOP_SMOKE", "workshop-smoke")

TIMES: dict[str, float] = {}
#: docker stats samples per learner: {"idle": [(mem MiB, cpu %)...], "notebook 03": [...]}.
STATS: dict[str, dict[str, list[tuple[float, float]]]] = {}
_timed = functools.partial(compose_live._timed, times=TIMES, label="workshop smoke")


@dataclass
class Hub:
    env: dict[str, str]
    project: str
    port: int
    secrets: str
    base: str = ""
    api: requests.Session = field(default_factory=requests.Session)
    engine_started_here: bool = False

    def secret(self, name: str) -> str:
        with open(os.path.join(self.secrets, name)) as fh:
            return fh.read().strip()

    def container(self, user: str) -> str:
        return f"{self.project}-{user}"

    def user(self, name: str) -> dict:
        r = self.api.get(f"{self.base}/hub/api/users/{name}", timeout=30)
        r.raise_for_status()
        return r.json()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script(hub: Hub, verb: str, timeout_s: float) -> subprocess.CompletedProcess:
    return _timed(f"workshop.sh {verb}", [str(SCRIPT), verb], hub.env, timeout_s=timeout_s)


def _left(project: str) -> dict[str, list[str]]:
    """Containers (the hub's and the labs'), networks and volumes of ``project``."""
    def q(*cmd: str) -> list[str]:
        return subprocess.run(["docker", *cmd], capture_output=True, text=True, timeout=60, check=True).stdout.split()
    return {"containers": q("ps", "-aq", "--filter", f"label={LABEL}={project}")
            + q("ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"),
            "networks": q("network", "ls", "-q", "--filter", f"name=^{project}$"),
            "volumes": sorted(v for v in q("volume", "ls", "-q") if v.startswith(f"{project}-"))}


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    port = _free_port()
    project = f"kafkalab-workshop-smoke-{port}"
    secrets = tempfile.mkdtemp(prefix="kafkalab-workshop-secrets-")
    env = {**os.environ, "WORKSHOP_PROJECT": project, "WORKSHOP_PORT": str(port), "WORKSHOP_SECRETS": secrets,
           "WORKSHOP_IP": "127.0.0.1"}
    for name in ("WORKSHOP_TLS", "WORKSHOP_TLS_CERT", "WORKSHOP_TLS_KEY", "WORKSHOP_PASSWORD"):
        env.pop(name, None)
    if os.environ.get("KAFKALAB_LAB_IMAGE"):
        env["WORKSHOP_LAB_IMAGE"] = os.environ["KAFKALAB_LAB_IMAGE"]
    h = Hub(env=env, project=project, port=port, secrets=secrets)
    cp, h.engine_started_here = compose_live.engine_up(env, _timed)
    engine_ready = cp.returncode == 0
    try:
        compose_live.require_engine(cp)
        assert not any(_left(project).values()), f"project {project} exists already: not this run's"
        cp = _script(h, "up", timeout_s=3000)
        assert cp.returncode == 0, f"workshop.sh up failed:\n{cp.stdout}\n{cp.stderr[-4000:]}"
        m = re.search(r"The workshop hub: (http://127\.0\.0\.1:(\d+))/hub/login", cp.stdout)
        assert m and int(m.group(2)) == port, cp.stdout
        h.base = m.group(1)
        h.api.headers["Authorization"] = f"token {h.secret('api-token')}"
        yield h
    finally:
        if engine_ready and any(_left(project).values()):
            _script(h, "clean", timeout_s=900)
        shutil.rmtree(secrets, ignore_errors=True)
        if h.engine_started_here:
            _timed("engine stop (engine.sh down)", [str(ENGINE), "down"], env, timeout_s=120)
        print(f"workshop smoke times (s): {json.dumps(TIMES)}", file=sys.stderr)
        print(f"workshop smoke docker stats (MiB, CPU %): {json.dumps(STATS)}", file=sys.stderr)
        print(f"workshop smoke cgroup marks (CPU s since start, peak MiB): {json.dumps(CGROUP)}", file=sys.stderr)


def _login(hub: Hub, name: str, password: str) -> tuple[requests.Session, requests.Response]:
    """The hub's login form, as a browser fills it (the _xsrf cookie and field)."""
    s = requests.Session()
    s.get(f"{hub.base}/hub/login", timeout=30).raise_for_status()
    r = s.post(f"{hub.base}/hub/login", data={"username": name, "password": password, "_xsrf": s.cookies.get("_xsrf")},
               allow_redirects=False, timeout=60)
    return s, r


def _exec(hub: Hub, user: str, *cmd: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", "lab", "-w", "/opt/kafkalab", hub.container(user), *cmd],
                          capture_output=True, text=True, timeout=timeout_s)


def _inspect(name: str) -> dict:
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)[0]


def _spawn_and_wait(hub: Hub, user: str) -> float:
    """Starts ``user``'s lab through the REST API; the seconds until the hub calls it ready."""
    t0 = time.monotonic()
    r = hub.api.post(f"{hub.base}/hub/api/users/{user}/server", timeout=60)
    assert r.status_code in (201, 202), f"spawn {user}: {r.status_code} {r.text}"
    _wait(lambda: (hub.user(user)["servers"].get("") or {}).get("ready"), SPAWN_TIMEOUT_S,
          f"{user}'s lab to be ready (the hub's REST API)", 2.0)
    return round(time.monotonic() - t0, 1)


def _stop_and_wait(hub: Hub, user: str) -> None:
    r = hub.api.delete(f"{hub.base}/hub/api/users/{user}/server", timeout=60)
    assert r.status_code in (202, 204), f"stop {user}: {r.status_code} {r.text}"
    _wait(lambda: not hub.user(user)["servers"] and not _left_container(hub, user), 300,
          f"{user}'s lab to stop and its container to go", 1.0)


def _left_container(hub: Hub, user: str) -> bool:
    return bool(subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{hub.container(user)}$"],
                               capture_output=True, text=True, timeout=60).stdout.strip())


def _sample(hub: Hub, phase: str, stop: threading.Event, every_s: float = 2.0) -> None:
    """``docker stats`` of both labs every ``every_s`` until ``stop``: memory MiB and CPU % per sample."""
    names = [hub.container(u) for u in LEARNERS]
    while not stop.is_set():
        out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}} {{.CPUPerc}}", *names],
                             capture_output=True, text=True, timeout=60).stdout
        for line in out.splitlines():
            name, mem, _, _, cpu = line.split()
            value, unit = re.fullmatch(r"([\d.]+)([KMG]i?B)", mem).groups()
            mib = float(value) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "kB": 1 / 1024, "MB": 1, "GB": 1024}[unit]
            user = name.removeprefix(f"{hub.project}-")
            STATS.setdefault(user, {}).setdefault(phase, []).append((round(mib), float(cpu.rstrip("%"))))
        stop.wait(every_s)


#: Per learner, from the lab's own cgroup: CPU seconds used and peak memory (MiB) at each mark.
CGROUP: dict[str, dict[str, dict[str, float]]] = {}
#: The container's own cgroup files, v1 (cpuacct.usage in ns, memory.max_usage_in_bytes) then v2
#: (cpu.stat usage_usec, memory.peak): what docker stats reads, but cumulative and with the peak.
CGROUP_READ = (
    "if [ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]; then "
    "echo $(( $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage) / 1000 )) $(cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes); "
    "else echo $(sed -n 's/^usage_usec //p' /sys/fs/cgroup/cpu.stat) $(cat /sys/fs/cgroup/memory.peak 2>/dev/null || echo 0); fi")


def _cgroup_mark(hub: Hub, user: str, mark: str) -> None:
    """CPU seconds the lab has used since it started, and its peak memory so far, kept as ``mark``."""
    cp = _exec(hub, user, "sh", "-c", CGROUP_READ, timeout_s=60)
    usec, peak = cp.stdout.split()
    CGROUP.setdefault(user, {})[mark] = {"cpu_s": round(int(usec) / 1e6, 1), "mem_peak_mib": round(int(peak) / 2**20)}


def _summary(phase: str) -> dict[str, dict[str, float]]:
    out = {}
    for user, phases in STATS.items():
        samples = phases.get(phase, [])
        if samples:
            out[user] = {"mem_max_mib": max(m for m, _ in samples), "cpu_mean_pct": round(sum(c for _, c in samples) / len(samples)),
                         "cpu_max_pct": max(c for _, c in samples), "samples": len(samples)}
    return out


def test_the_hub_answers_on_localhost_only(hub):
    r = requests.get(f"{hub.base}/hub/api", timeout=30)
    assert r.status_code == 200 and r.json()["version"] == "6.1.1", r.text
    ports = _inspect(f"{hub.project}-hub-1")["NetworkSettings"]["Ports"]["8000/tcp"]
    assert [(p["HostIp"], int(p["HostPort"])) for p in ports] == [("127.0.0.1", hub.port)], ports


def test_two_learners_log_in_with_the_workshop_password(hub):
    password = hub.secret("learner-password")
    for user in LEARNERS:
        _, r = _login(hub, user, password)
        assert r.status_code == 302, f"{user}: {r.status_code} {r.text[:300]}"
        assert hub.user(user)["admin"] is False
    _, r = _login(hub, "intruder", password + "x")
    assert r.status_code == 403, "a wrong password is refused"
    _, r = _login(hub, "instructor", password)
    assert r.status_code == 403, "the admin logs in with the admin password only"


def test_both_labs_start_at_once_each_its_own_container_with_limits_and_no_engine(hub):
    t0 = time.monotonic()
    with ThreadPoolExecutor(len(LEARNERS)) as pool:
        seconds = dict(zip(LEARNERS, pool.map(lambda u: _spawn_and_wait(hub, u), LEARNERS)))
    for user, s in seconds.items():
        TIMES[f"lab start, both at once ({user})"] = s
    TIMES["both labs ready"] = round(time.monotonic() - t0, 1)
    for user in LEARNERS:
        _cgroup_mark(hub, user, "ready")
    print(f"workshop smoke: labs ready: {seconds}", file=sys.stderr)
    for user in LEARNERS:
        info = _inspect(hub.container(user))
        mounts = [(m["Type"], m.get("Name"), m["Destination"]) for m in info["Mounts"]]
        assert mounts == [("volume", f"{hub.project}-notebooks-{user}", "/opt/kafkalab/notebooks")], mounts
        host = info["HostConfig"]
        assert host["Memory"] == 4 * 2**30 and host["CpuQuota"] == 2 * host["CpuPeriod"], (host["Memory"], host["CpuQuota"])
        assert not host["Privileged"] and host["NetworkMode"] == hub.project and host["Init"] is True
        assert info["Config"]["Labels"][LABEL] == hub.project
        assert _exec(hub, user, "test", "-e", "/var/run/docker.sock").returncode != 0, "no Docker socket in a lab"
        ps = _exec(hub, user, "ps", "-eo", "uid=,args=").stdout.splitlines()
        assert all(line.split()[0] == "1000" for line in ps), f"everything in the lab runs as the learner: {ps}"
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(hub, "idle", stop), daemon=True)
    sampler.start()
    password = hub.secret("learner-password")
    a, _ = _login(hub, LEARNERS[0], password)
    r = a.get(f"{hub.base}/user/{LEARNERS[0]}/lab", timeout=120)
    assert r.status_code == 200 and r.url.endswith(f"/user/{LEARNERS[0]}/lab"), (r.status_code, r.url)
    assert a.get(f"{hub.base}/user/{LEARNERS[0]}/api/status", timeout=60).status_code == 200
    r = a.get(f"{hub.base}/user/{LEARNERS[1]}/api/status", timeout=60)
    assert r.status_code == 403, f"a learner cannot reach another learner's lab: {r.status_code}"
    _wait(lambda: all(len(STATS.get(u, {}).get("idle", [])) >= 5 for u in LEARNERS), 300, "five idle samples of each lab", 1.0)
    stop.set()
    sampler.join(timeout=120)
    for user in LEARNERS:
        _cgroup_mark(hub, user, "idle")
    print(f"workshop smoke: idle: {_summary('idle')}", file=sys.stderr)


def test_each_labs_brokers_listen_on_its_own_loopback_only(hub):
    a, b = LEARNERS
    ip_b = _inspect(hub.container(b))["NetworkSettings"]["Networks"][hub.project]["IPAddress"]
    probe = ("import socket, sys\n"
             "try:\n    socket.create_connection((sys.argv[1], 9092), timeout=5).close(); print('open')\n"
             "except OSError as e:\n    print(type(e).__name__)\n")
    own = _exec(hub, a, "python3", "-c", probe, "127.0.0.1")
    assert own.stdout.strip() == "open", own.stdout + own.stderr
    other = _exec(hub, a, "python3", "-c", probe, ip_b)
    assert other.stdout.strip() == "ConnectionRefusedError", \
        f"{a} reaches {b}'s broker at {ip_b}:9092: {other.stdout}{other.stderr}"


ADMIN = ("import sys\nfrom confluent_kafka.admin import AdminClient, NewTopic\n"
         "admin = AdminClient({'bootstrap.servers': '127.0.0.1:9092'})\n"
         "if len(sys.argv) > 1:\n"
         "    admin.create_topics([NewTopic(sys.argv[1], 1, 3)])[sys.argv[1]].result(60)\n"
         "print('\\n'.join(sorted(t for t in admin.list_topics(timeout=60).topics if not t.startswith('__'))))\n")


def test_notebook_03_runs_in_both_labs_at_once_each_on_its_own_cluster(hub):
    for user in LEARNERS:
        cp = _exec(hub, user, "python3", "-c", ADMIN, f"only-in-{user}")
        assert cp.returncode == 0, cp.stderr
    for user in LEARNERS:
        _cgroup_mark(hub, user, "before notebook")
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(hub, f"notebook {NOTEBOOK[:2]}", stop), daemon=True)
    sampler.start()
    t0 = time.monotonic()
    runs = {user: subprocess.Popen(["docker", "exec", "-u", "lab", "-w", "/opt/kafkalab", hub.container(user),
                                    "pytest", "--nbval-lax", "--nbval-cell-timeout=300", "-p", "no:cacheprovider",
                                    "--capture=sys", "-q", f"notebooks/{NOTEBOOK}.ipynb"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for user in LEARNERS}
    try:
        out = {user: p.communicate(timeout=1800)[0] for user, p in runs.items()}
    finally:
        for p in runs.values():
            if p.poll() is None:
                p.kill()
        stop.set()
        sampler.join(timeout=120)
    TIMES[f"notebook {NOTEBOOK} in both labs at once"] = round(time.monotonic() - t0, 1)
    for user in LEARNERS:
        _cgroup_mark(hub, user, "after notebook")
    print(f"workshop smoke: cgroup marks: {json.dumps(CGROUP)}", file=sys.stderr)
    print(f"workshop smoke: notebook {NOTEBOOK[:2]}: {_summary(f'notebook {NOTEBOOK[:2]}')}", file=sys.stderr)
    failed = []
    for user, p in runs.items():
        log = ROOT / "build" / f"workshop-smoke-{NOTEBOOK}-{user}.log"
        log.parent.mkdir(exist_ok=True)
        log.write_text(out[user])
        if p.returncode != 0:
            first = out[user].find("___ ")  # nbval's first failure section: the cell, its output, the traceback
            failed.append(f"{NOTEBOOK} failed in {user}'s lab (whole output: {log}):\n{out[user][first:first + 6000]}")
        else:
            print(f"workshop smoke: {user}: {out[user].strip().splitlines()[-1]}", file=sys.stderr)
    assert not failed, "\n\n".join(failed)
    topics = {}
    for user in LEARNERS:
        cp = _exec(hub, user, "python3", "-c", ADMIN)
        assert cp.returncode == 0, cp.stderr
        topics[user] = set(cp.stdout.split())
    a, b = LEARNERS
    assert f"only-in-{a}" in topics[a] and f"only-in-{a}" not in topics[b], topics
    assert f"only-in-{b}" in topics[b] and f"only-in-{b}" not in topics[a], topics
    assert not (topics[a] & topics[b]), f"a topic seen in both labs: {topics[a] & topics[b]}"


def test_a_learners_notebooks_survive_a_restart_of_their_lab(hub):
    user = LEARNERS[0]
    cp = _exec(hub, user, "sh", "-c", "echo kept > notebooks/mine.txt")
    assert cp.returncode == 0, cp.stderr
    t0 = time.monotonic()
    _stop_and_wait(hub, user)
    TIMES["one lab stopped (REST API)"] = round(time.monotonic() - t0, 1)
    TIMES["one lab started again"] = _spawn_and_wait(hub, user)
    assert _exec(hub, user, "cat", "notebooks/mine.txt").stdout.strip() == "kept"


def test_the_instructor_has_the_admin_page_and_a_learner_does_not(hub):
    s, r = _login(hub, "instructor", hub.secret("admin-password"))
    assert r.status_code == 302, r.status_code
    assert hub.user("instructor")["admin"] is True
    r = s.get(f"{hub.base}/hub/admin", timeout=60)
    assert r.status_code == 200, r.status_code
    learner, _ = _login(hub, LEARNERS[1], hub.secret("learner-password"))
    assert learner.get(f"{hub.base}/hub/admin", timeout=60, allow_redirects=False).status_code == 403


SELF_SIGNED = ("from cryptography import x509\nfrom traitlets.config import Config\n"
               "c = Config()\n"
               "exec(open('/etc/jupyterhub/jupyterhub_config.py').read(), {'get_config': lambda: c, '__name__': 'config'})\n"
               "cert = x509.load_pem_x509_certificate(open(c.JupyterHub.ssl_cert, 'rb').read())\n"
               "san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value\n"
               "print(c.JupyterHub.bind_url, *[str(a) for a in san.get_values_for_type(x509.IPAddress)])\n")


def test_the_hub_makes_a_self_signed_certificate_on_request_for_another_interface(hub):
    """The hub image's own configuration, as the hub reads it, for WORKSHOP_IP=192.0.2.10 (a
    documentation address: nothing is published) with WORKSHOP_TLS=self-signed."""
    image = _inspect(f"{hub.project}-hub-1")["Config"]["Image"]
    with tempfile.TemporaryDirectory() as secrets:
        for name in ("learner-password", "admin-password", "api-token"):
            shutil.copy(os.path.join(hub.secrets, name), secrets)
        cp = subprocess.run(["docker", "run", "--rm", "--user", f"{os.getuid()}:{os.getgid()}",
                             "-v", f"{secrets}:/srv/jupyterhub/secrets", "-e", "WORKSHOP_IP=192.0.2.10",
                             "-e", "WORKSHOP_TLS=self-signed", image, "python", "-c", SELF_SIGNED],
                            capture_output=True, text=True, timeout=300)
        assert cp.returncode == 0, cp.stderr[-3000:]
        assert cp.stdout.split() == ["https://:8000", "192.0.2.10"], cp.stdout
        assert oct(os.stat(os.path.join(secrets, "tls.key")).st_mode & 0o777) == "0o600"


def test_down_leaves_nothing_but_the_notebook_volumes_and_clean_removes_them(hub):
    cp = _script(hub, "down", timeout_s=900)
    assert cp.returncode == 0, cp.stderr
    left = _left(hub.project)
    assert left == {"containers": [], "networks": [],
                    "volumes": sorted(f"{hub.project}-notebooks-{u}" for u in LEARNERS)}, f"down left {left}"
    cp = _script(hub, "clean", timeout_s=900)
    assert cp.returncode == 0, cp.stderr
    assert _left(hub.project) == {"containers": [], "networks": [], "volumes": []}
