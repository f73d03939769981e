"""The compose backend: the same cluster described by docker-compose.yml, in containers (the
official apache/kafka image, or the stand-in kafka/docker/Dockerfile builds where Docker Hub is out
of reach), and who owns the files its containers write on the host.

Sources: Docker Compose CLI reference; subuid(5); Docker documentation, "Isolate containers with a
user namespace" and "Rootless mode".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import psutil

from .. import config
from ..config import KAFKA_VERSION, Node, Topology
from ..errors import DockerUnavailable, ImageMissing, KafkalabError, NodeFailedToStart
from ..waiting import wait_until
from .common import STOP_TIMEOUT_S, UP_TIMEOUT_S, ClusterStatus, NodeStatus, broker_metadata, ensure_tls_files
from .local import LocalCluster

#: Where the apache/kafka image keeps a node's data: its declared volume, ``KAFKA_LOG_DIRS`` in
#: docker-compose.yml. Each service bind-mounts its node's host folder ``Node.data_dir`` there.
CONTAINER_DATA_DIR = "/var/lib/kafka/data"
#: Where docker-compose.yml mounts ``config.tls_dir()`` (read-only) in every broker container.
CONTAINER_TLS_DIR = "/etc/kafka/kafkalab-tls"
#: The image runs Kafka as ``appuser``, uid 1000 (apache/kafka docker/jvm/Dockerfile: ``USER appuser``).
CONTAINER_UID = 1000
#: Where the image keeps Kafka's jars (apache/kafka docker/jvm/Dockerfile, and kafka/docker/Dockerfile).
CONTAINER_LIBS_DIR = "/opt/kafka/libs"
#: The official image docker-compose.yml runs when ``KAFKALAB_IMAGE`` is unset.
OFFICIAL_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
#: The compose project of the default port base (docker-compose.yml's ``name:``).
COMPOSE_PROJECT = "kafkalab"
#: The oldest ``docker compose`` the backend accepts (MAJOR, MINOR); any later major too: Docker
#: has shipped Compose v5 since 2025-12. kafka/docker/engine.sh's COMPOSE_MIN says the same.
COMPOSE_MIN = (2, 20)
#: The command that installs the engine and Compose where it can, and the one that builds the image.
ENGINE_SETUP_COMMAND = "make compose-setup"
IMAGE_BUILD_COMMAND = "make compose-image"
#: Seconds a ``docker`` call that only asks (info, version, image inspect) may take: the bad
#: states (no engine, no accepted Compose, no image) are reported within 5 s.
DOCKER_ASK_TIMEOUT_S = 4.0


def docker_work_dir() -> Path:
    """Folder of kafka/docker/engine.sh's machine-wide files (the dockerd it started, the tag of
    the image it built): ``$KAFKALAB_DOCKER_WORK``, else ``.kafkalab/docker`` in the repository,
    independent of ``$KAFKALAB_STATE`` (like the jars: two clusters share one image)."""
    env = os.environ.get("KAFKALAB_DOCKER_WORK")
    return Path(env) if env else config.repo_root() / ".kafkalab" / "docker"


def own_compose() -> Path:
    """Where kafka/docker/engine.sh puts the Compose it builds when a ``docker compose`` the user
    has is in the way (too old, or not one kafkalab built): ``cli-plugins/docker-compose`` in
    ``docker_work_dir()``. The backend runs it as a standalone ``docker-compose``
    (``compose_program``), so the user's own ``docker compose`` is never replaced."""
    return docker_work_dir() / "cli-plugins" / "docker-compose"


def compose_program(docker: str) -> list[str]:
    """The Compose command the backend runs: kafkalab's own build (``own_compose``) when
    engine.sh made one, else ``docker compose`` (``docker`` is the docker command's path)."""
    own = own_compose()
    if own.is_file() and os.access(own, os.X_OK):
        return [str(own)]
    return [docker, "compose"]


def local_image() -> str | None:
    """The tag of the Kafka image kafka/docker/engine.sh built here (``make compose-image``, for
    machines without Docker Hub), from the stamp it writes, or None when it built none."""
    stamp = docker_work_dir() / "image"
    try:
        tag = stamp.read_text().strip()
    except OSError:
        return None
    return tag or None


def compose_project(port_base: int) -> str:
    """The compose project name for a cluster on ``port_base``: ``kafkalab`` (docker-compose.yml's
    default) for 9092, ``kafkalab-<base>`` otherwise, so that two clusters' containers and
    networks never share names."""
    return COMPOSE_PROJECT if port_base == 9092 else f"{COMPOSE_PROJECT}-{port_base}"


def compose_port_variables(topology: Topology) -> dict[str, str]:
    """docker-compose.yml's host-port variables for ``topology``'s brokers:
    ``KAFKALAB_BROKER_<n>_CLIENT_PORT`` (published and advertised), ``_FAULT_PORT`` (published:
    the proxy's upstream), ``_PROXY_PORT`` (advertised: where kafkalab.faults listens) and
    ``_TLS_PORT`` (published and advertised), from ``Node.ports`` at the current port base."""
    out = {}
    for b in topology.brokers:
        prefix = f"KAFKALAB_BROKER_{b.node_id}"
        out[f"{prefix}_CLIENT_PORT"] = str(b.client_port)
        out[f"{prefix}_FAULT_PORT"] = str(b.ports["FAULT"])
        out[f"{prefix}_PROXY_PORT"] = str(b.fault_proxy_port)
        out[f"{prefix}_TLS_PORT"] = str(b.ports["TLS"])
    return out


#: The Kafka core jar of a release, in the image's libs folder: ``kafka_<scala>-<version>.jar``.
_CORE_JAR = re.compile(r"^kafka_2\.\d+-(\d[^\s/]*?)\.jar$")


def kafka_version_from_jars(names: Sequence[str]) -> str:
    """The Kafka version of a libs folder's file listing: the version of its core jar
    ``kafka_2.13-<version>.jar`` (not -test, -sources, -javadoc).

    Raises:
        KafkalabError: no such jar, or two versions of it.
    """
    found = {m[1] for n in names if (m := _CORE_JAR.match(n.strip()))
             and not m[1].endswith(("-test", "-sources", "-javadoc"))}
    if len(found) != 1:
        raise KafkalabError(f"expected one kafka_2.13-<version>.jar in {CONTAINER_LIBS_DIR}, found {sorted(found) or 'none'}")
    return found.pop()


def compose_version(output: str) -> tuple[int, int] | None:
    """(MAJOR, MINOR) of ``docker compose version --short`` output: ``2.20.0``, ``v2.40.3``,
    ``5.7.1``, ``5.0.0-desktop.1`` (Docker Desktop's builds); None when it is not a version (no
    plugin: the docker CLI's usage text)."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?", output.strip())
    return (int(m[1]), int(m[2])) if m else None


def compose_version_accepted(output: str) -> bool:
    """``docker compose version --short`` output names COMPOSE_MIN or newer (v5 included)."""
    v = compose_version(output)
    return v is not None and v >= COMPOSE_MIN


class ComposeCluster(LocalCluster):
    """The same cluster from docker-compose.yml (apache/kafka image, or the stand-in built here by
    kafka/docker/engine.sh). Nodes are compose services ``controller-<id>`` and ``broker-<id>``;
    ``kill``, ``stop``, ``start``, ``pause``, ``resume`` and ``logs`` are ``docker compose kill -s
    SIGKILL``, ``stop``, ``start``, ``pause`` (cgroup freezer: alive, sockets open, silent),
    ``unpause`` and ``logs``.

    Each node's data folder is bind-mounted from the host path the local backend uses
    (``.kafkalab/cluster/node-<id>/data``), so the readers of broker files (kafkalab.segments,
    ``kafka-dump-log``, the producer-state reader) read the same paths live on both backends.
    The image runs as uid 1000 and cannot run as the host user: at every start it writes its
    configuration into ``/opt/kafka/config``, which belongs to uid 1000 (``configure`` checks it
    is writable; the wrapper writes there). So the folders are made writable for uid 1000
    instead, and ``wipe`` deletes their contents from inside a container.

    The ports follow ``$KAFKALAB_PORT_BASE`` (``compose_environment``): two compose clusters,
    each with its own port base and state folder, run side by side as two compose projects.
    Readiness is asked of Kafka, never read from a log line: a broker serves when it answers a
    Metadata request on its own CLIENT port and lists itself (registered and unfenced); a
    controller when its ``quorum-state`` file, rewritten by the new process, names a leader.

    Checked without an engine by tests/test_compose.py (a stand-in ``docker`` command) and
    tests/test_compose_image.py (the image's own configuration code); run for real by
    tests/test_compose_live.py (``make compose-smoke``).
    """

    backend = "compose"
    #: ``docker compose kill -s SIGKILL`` and ``stop`` signal the JVM as on the local backend;
    #: ``pause`` freezes the container's cgroup instead of sending SIGSTOP (Docker documentation,
    #: "docker container pause"): same effect on Kafka (alive, sockets open, silent).
    FAULTS = {"kill": "SIGKILL", "stop": "SIGTERM", "pause": "docker pause: cgroup freezer",
              "resume": "docker unpause"}

    def compose_files(self) -> list[Path]:
        """docker-compose.yml, plus the three-controllers override for a 3-controller topology
        (it adds controllers 102 and 103 and changes the voters of every node at once)."""
        files = [config.repo_root() / "docker-compose.yml"]
        if self.topology.controllers == 3:
            files.append(config.repo_root() / "docker-compose.three-controllers.yml")
        return files

    @staticmethod
    def docker() -> str:
        """The ``docker`` command's path.

        Raises:
            DockerUnavailable: no ``docker`` on PATH (the message says how to get one).
        """
        docker = shutil.which("docker")
        if not docker:
            raise DockerUnavailable(
                "the compose backend needs the `docker` command and a Docker engine: Docker Desktop, or on "
                f"Debian as root `{ENGINE_SETUP_COMMAND}` (installs docker.io and Compose); or use the local "
                "backend (`kafkalab up --backend local`)")
        return docker

    def compose_command(self, *args: str) -> list[str]:
        """``docker compose -f ... ARGS`` (or kafkalab's own Compose, ``compose_program``): the
        command line ``_compose`` runs.

        Raises:
            DockerUnavailable: no ``docker`` command on PATH.
        """
        files = [a for f in self.compose_files() for a in ("-f", str(f))]
        return [*compose_program(self.docker()), *files, *args]

    @staticmethod
    def compose_environment() -> dict[str, str]:
        """The environment ``docker compose`` runs with: this one plus the variables
        docker-compose.yml reads: ``KAFKALAB_STATE`` (the folder it bind-mounts the nodes' data
        from, ``config.state_dir()``), ``KAFKALAB_PROJECT`` (``compose_project``), the brokers'
        host ports (``compose_port_variables``) at ``config.port_base()``, and
        ``KAFKALAB_IMAGE``: the stand-in built here (``local_image``) unless already set; else
        the file's default, the official image."""
        env = {**os.environ, "KAFKALAB_STATE": str(config.state_dir()),
               "KAFKALAB_PROJECT": compose_project(config.port_base()), **compose_port_variables(Topology())}
        if not env.get("KAFKALAB_IMAGE") and (built := local_image()):
            env["KAFKALAB_IMAGE"] = built
        return env

    def image(self) -> str:
        """The image the nodes run (``KAFKALAB_IMAGE`` of ``compose_environment``, else the official one)."""
        return self.compose_environment().get("KAFKALAB_IMAGE") or OFFICIAL_IMAGE

    def _docker(self, *args: str, timeout_s: float = DOCKER_ASK_TIMEOUT_S) -> subprocess.CompletedProcess | None:
        """``docker ARGS``, or None when it did not return within ``timeout_s`` (an engine that hangs)."""
        try:
            return subprocess.run([self.docker(), *args], capture_output=True, text=True, timeout=timeout_s,
                                  env=self.compose_environment())
        except subprocess.TimeoutExpired:
            return None

    def check_engine(self) -> None:
        """That the compose backend can run here: a Docker engine answers and Compose
        (``compose_program``) is COMPOSE_MIN (2.20) or newer, v5 included. Asks ``docker info``
        and ``docker compose version --short`` (within ``DOCKER_ASK_TIMEOUT_S`` each).

        Raises:
            DockerUnavailable: no docker command, no engine (the message names how to start one),
                Compose older than 2.20, or Compose v1 only (which rejects docker-compose.yml's
                top-level ``name:``).
        """
        info = self._docker("info", "--format", "{{.ServerVersion}}")
        if info is None or info.returncode != 0 or not info.stdout.strip():
            why = "did not answer" if info is None else (info.stderr.strip().splitlines() or ["no answer"])[-1]
            raise DockerUnavailable(
                f"no Docker engine answers (`docker info`: {why}). Start it: Docker Desktop, or "
                f"`sudo systemctl start docker`, or as root `{ENGINE_SETUP_COMMAND}` (installs and starts dockerd)")
        program = compose_program(self.docker())
        try:
            version = subprocess.run([*program, "version", "--short"], capture_output=True, text=True,
                                     timeout=DOCKER_ASK_TIMEOUT_S, env=self.compose_environment())
        except subprocess.TimeoutExpired:
            version = None
        answer = version.stdout.strip() if version is not None and version.returncode == 0 else ""
        if not compose_version_accepted(answer):
            minimum = ".".join(map(str, COMPOSE_MIN))
            v1 = shutil.which("docker-compose")
            version_found = compose_version(answer)
            if version_found and version_found[0] >= 2:
                found = f"Compose {answer} (`{' '.join(program)}`)"
            elif version_found or v1:
                found = f"only Compose v1 (`{v1 or ' '.join(program)}`)"
            else:
                found = "no `docker compose` plugin"
            raise DockerUnavailable(
                f"the compose backend needs Compose {minimum} or newer (`docker compose`; v5 too), found {found}: "
                "Compose v1 rejects docker-compose.yml's top-level `name:`. Install Docker's docker-compose-plugin "
                f"package, or `{ENGINE_SETUP_COMMAND}` (builds the current Compose from its Go module, without "
                "replacing a plugin you have)")

    def check_image(self) -> None:
        """That the nodes' image is on the engine (``docker image inspect``); the official image is
        pulled once if it is not.

        Raises:
            ImageMissing: the stand-in named by the stamp is gone (``make compose-image`` builds it),
                or the official image cannot be pulled (no registry: build the stand-in).
        """
        image = self.image()
        found = self._docker("image", "inspect", "--format", "{{.Id}}", image)
        if found is not None and found.returncode == 0:
            return
        if image != OFFICIAL_IMAGE:
            raise ImageMissing(f"the Kafka image {image} is not on this Docker engine: `{IMAGE_BUILD_COMMAND}` "
                               "builds it (kafka/docker/Dockerfile), or unset KAFKALAB_IMAGE for the official one")
        pulled = self._docker("pull", "-q", image, timeout_s=600)
        if pulled is None or pulled.returncode != 0:
            why = "timed out" if pulled is None else pulled.stderr.strip()[-300:]
            raise ImageMissing(f"the Kafka image {image} is not here and cannot be pulled ({why}): "
                               f"`docker pull {image}` where Docker Hub is reachable, or `{IMAGE_BUILD_COMMAND}` "
                               "builds a stand-in here (kafka/docker/Dockerfile)")

    def _compose(self, *args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess:
        cp = subprocess.run(self.compose_command(*args), capture_output=True, text=True, timeout=timeout_s,
                            env=self.compose_environment())
        if check and cp.returncode != 0:
            raise KafkalabError(f"docker compose {' '.join(args)} failed:\n{cp.stderr.strip()}")
        return cp

    def _service(self, node: Node) -> str:
        return node.name

    def project(self) -> str:
        """This cluster's compose project (``compose_project`` of the port base)."""
        return compose_project(config.port_base())

    def _states(self) -> dict[str, dict]:
        """Service -> ``{"Service", "State"}`` of the project's containers, in any state: one
        ``docker ps`` filtered by compose's project label (a fifth of ``docker compose ps``'s
        time: it reads no compose file; status() is called in loops, e.g. per partition read)."""
        fmt = '{"Service":"{{.Label "com.docker.compose.service"}}","State":"{{.State}}","ID":"{{.ID}}"}'
        cp = self._docker("ps", "--all", "--no-trunc", "--filter", f"label=com.docker.compose.project={self.project()}",
                          "--format", fmt, timeout_s=60)
        out: dict[str, dict] = {}
        for line in (cp.stdout if cp is not None and cp.returncode == 0 else "").splitlines():
            if line.strip().startswith("{"):
                d = json.loads(line)
                out[d.get("Service", "")] = d
        return out

    def status(self) -> ClusterStatus:
        """Every node's container state, from one ``docker ps`` (``_states``); the quorum leader
        from the running controllers' bind-mounted ``quorum-state`` files."""
        states = self._states()
        pids = self.host_pids(states)

        def node_status(n: Node) -> NodeStatus:
            st = self._status_of(n, states.get(self._service(n), {}).get("State", ""))
            st.pid = pids.get(self._service(n))
            return st

        running = [n for n in self.topology.controller_nodes
                   if states.get(self._service(n), {}).get("State") == "running"]
        return ClusterStatus(
            backend=self.backend,
            kafka_version=KAFKA_VERSION,
            bootstrap_servers=self.topology.bootstrap_servers,
            brokers={n.node_id: node_status(n) for n in self.topology.brokers},
            controllers={n.node_id: node_status(n) for n in self.topology.controller_nodes},
            quorum_leader=self._leader_of(running),
        )

    def _state(self, node: Node) -> str:
        """``running``, ``paused``, ``exited``... or "" when the container does not exist."""
        return self._states().get(self._service(node), {}).get("State", "")

    def host_pids(self, states: dict[str, dict]) -> dict[str, int]:
        """Service -> the host pid of its running container's Kafka JVM, where this machine runs
        the engine (Linux: the container's first process, ``.State.Pid``, is the JVM, which the
        image's start scripts ``exec``; kafka.Kafka on its command line); empty elsewhere (Docker
        Desktop runs containers in a VM). Lets the notebooks that read ``/proc/<pid>`` or trace
        a broker's system calls (10) do so on both backends."""
        ids = [d["ID"] for d in states.values() if d.get("State") in ("running", "paused") and d.get("ID")]
        if not ids or not sys.platform.startswith("linux"):
            return {}
        cp = self._docker("inspect", "--format", '{{index .Config.Labels "com.docker.compose.service"}} {{.State.Pid}}',
                          *ids, timeout_s=60)
        out = {}
        for line in (cp.stdout if cp is not None and cp.returncode == 0 else "").splitlines():
            service, _, pid = line.strip().rpartition(" ")
            try:
                if "kafka.Kafka" in psutil.Process(int(pid)).cmdline():
                    out[service] = int(pid)
            except (ValueError, psutil.Error):
                pass
        return out

    def _node_status(self, node: Node) -> NodeStatus:
        return self._status_of(node, self._state(node))

    def _status_of(self, node: Node, state: str) -> NodeStatus:
        return NodeStatus(node.node_id, node.role, None, state in ("running", "paused"), state == "paused",
                          node.listeners(), f"docker compose logs {self._service(node)}", str(node.data_dir))

    def process(self, node: Node):  # noqa: D401 - no host pid for containers
        return None

    def _live_controllers(self) -> list[Node]:
        """Controllers whose container runs: LocalCluster.quorum_leader reads their
        ``quorum-state`` files in the bind-mounted data folders."""
        states = self._states()
        return [n for n in self.topology.controller_nodes if states.get(self._service(n), {}).get("State") == "running"]

    def _prepare_data_dirs(self) -> None:
        """Create each node's data folder and let the container's uid 1000 write in it; make
        the TLS listener's keystore (mounted into every broker container)."""
        for d in ensure_tls_files():
            d.chmod(0o644)
        for n in self.topology.nodes:
            n.data_dir.mkdir(parents=True, exist_ok=True)
            if n.data_dir.stat().st_uid == os.getuid():
                n.data_dir.chmod(0o777)

    def broker_serves(self, node: Node) -> bool:
        """Node ``node`` (a broker) answers a Metadata request on its own CLIENT port and lists
        itself: this process serves, and the controller has it registered and unfenced. (A killed
        broker stays in the other brokers' metadata until it is fenced, so asking the cluster
        would call a restarting one ready too early; its own port answers only once the new
        process opened its listeners, after it caught up with the metadata log.)"""
        try:
            return node.node_id in broker_metadata("127.0.0.1", node.client_port, [], timeout_s=2.0).brokers
        except (OSError, ValueError):
            return False

    def controller_serves(self, node: Node, since: float) -> bool:
        """Controller ``node`` wrote its ``quorum-state`` file (KIP-595: on every election and
        every leader it learns) at or after ``since`` (seconds since the epoch), naming a leader."""
        f = node.data_dir / "__cluster_metadata-0" / "quorum-state"
        try:
            if f.stat().st_mtime < since:
                return False
            return json.loads(f.read_text()).get("leaderId", -1) >= 0
        except (OSError, ValueError):
            return False

    def up(self, controllers: int | None = None, timeout_s: float = UP_TIMEOUT_S) -> ClusterStatus:
        """``docker compose up -d --wait`` and wait until 3 brokers serve (``broker_serves``)
        and the quorum has a leader.

        Raises:
            DockerUnavailable, ImageMissing: see ``check_engine``, ``check_image`` (within 5 s,
                before anything starts); KafkalabError: docker compose failed; WaitTimeout.
        """
        self.check_engine()
        if controllers is not None and controllers != self.topology.controllers:
            if any(self._state(n) in ("running", "paused") for n in self.topology.nodes):
                raise KafkalabError(
                    f"the cluster runs with {self.topology.controllers} controller(s); "
                    f"`kafkalab down` first, then `kafkalab up --backend compose --controllers {controllers}`"
                )
            if self._saved_topology() is not None:
                self.check_image()  # wipe runs a container of the image
                self.wipe()  # a quorum's voter set is fixed at format time: start from fresh storage
            self.topology = Topology(controllers=controllers)
        self.check_image()
        config.cluster_dir().mkdir(parents=True, exist_ok=True)
        self._topology_file().write_text(json.dumps(self.topology.to_json()))
        self._prepare_data_dirs()
        self._compose("up", "-d", "--wait", timeout_s=timeout_s + 120)
        self._wait_serving_nodes(self.topology.nodes, since=0.0, timeout_s=timeout_s)
        return self.status()

    def _wait_serving_nodes(self, nodes: Sequence[Node], since: float, timeout_s: float) -> None:
        """Until every broker of ``nodes`` serves (``broker_serves``), every controller of
        ``nodes`` rewrote its quorum-state after ``since`` and the quorum has a leader; fails
        at once, with its last log lines, when a node's container exits."""
        def ready() -> bool:
            states = self._states()
            for n in nodes:
                state = states.get(self._service(n), {}).get("State", "")
                if state not in ("running", "paused", "restarting", "created", ""):
                    raise NodeFailedToStart(f"{n.name}'s container {state} while starting:\n{self.logs(n.node_id, 25)}")
            if any(not self.controller_serves(n, since) for n in nodes if n.role == "controller"):
                return False
            if self.quorum_leader() is None:
                return False
            return all(self.broker_serves(n) for n in nodes if n.role == "broker")

        names = ", ".join(n.name for n in nodes)
        wait_until(ready, timeout_s=timeout_s, interval_s=0.5,
                   what=f"{names} to serve (quorum leader elected, each broker answering Metadata with itself listed)",
                   on_timeout=lambda: "\n".join(self.logs(n.node_id, 10) for n in nodes))

    def down(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """``docker compose down -v``: containers, the project's network and the containers'
        anonymous volumes go; the data in the bind-mounted folders stays, as with the local
        backend (``wipe`` deletes it). A paused container is unpaused first (SIGTERM needs it)."""
        states = self._states()
        volumes = self._anonymous_volumes(states)
        paused = [s for s, d in states.items() if d.get("State") == "paused"]
        if paused:
            self._compose("unpause", *paused, check=False)
        self._compose("down", "-v", "--remove-orphans", "--timeout", str(int(timeout_s)), timeout_s=timeout_s * 2 + 120)
        if volumes:  # those `down -v` left: compose carried them over when it recreated a container
            self._docker("volume", "rm", *volumes, timeout_s=60)

    def _anonymous_volumes(self, states: dict[str, dict]) -> list[str]:
        """The volumes the project's containers mount: the image's VOLUME declarations
        (``/etc/kafka/secrets``, ``/mnt/shared/config``; the data folder is a bind mount), as
        docker-compose.yml declares no named volume. ``docker compose down -v`` removes them,
        except those of a container compose recreated (a new image), which it keeps by name
        (seen with Compose v2.40.3 on Debian's Docker 20.10): ``down`` removes what is left."""
        ids = [d["ID"] for d in states.values() if d.get("ID")]
        if not ids:
            return []
        cp = self._docker("inspect", "--format", '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}',
                          *ids, timeout_s=60)
        return sorted(set(cp.stdout.split())) if cp is not None and cp.returncode == 0 else []

    def wipe(self) -> None:
        """Delete every node's data (the cluster must be down): from inside a throw-away container
        of each service, because the files belong to the container's uid 1000."""
        if any(self._state(n) in ("running", "paused") for n in self.topology.nodes):
            raise KafkalabError("the cluster is running; `kafkalab down` first")
        ran = False
        for n in self.topology.nodes:
            if n.data_dir.exists():
                self._compose("run", "--rm", "--no-deps", "--entrypoint", "sh", self._service(n), "-c",
                              f"rm -rf {CONTAINER_DATA_DIR}/* {CONTAINER_DATA_DIR}/.[!.]*")
                ran = True
        if ran:  # `run` made the project's network: it goes too, as after `down`
            self._compose("down", "-v", "--remove-orphans", check=False)
        shutil.rmtree(config.cluster_dir(), ignore_errors=True)

    def _wait_state(self, node: Node, done, what: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
        wait_until(lambda: done(self._state(node)), timeout_s=timeout_s, interval_s=0.25,
                   what=f"{node.name} {what}")

    def kill(self, node_id: int) -> None:
        """``docker compose kill -s SIGKILL``: a crash; returns once the container has exited.
        A paused container is killed too (the kernel delivers SIGKILL to a frozen cgroup)."""
        node = self._node(node_id)
        self._compose("kill", "-s", "SIGKILL", self._service(node))
        self._wait_state(node, lambda s: s not in ("running", "paused"), "to exit on SIGKILL")

    def stop(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """``docker compose stop --timeout``: SIGTERM, SIGKILL after ``timeout_s`` (as the local
        backend). A paused container is unpaused first: a frozen JVM cannot handle SIGTERM."""
        node = self._node(node_id)
        if self._state(node) == "paused":
            self._compose("unpause", self._service(node))
        self._compose("stop", "--timeout", str(int(timeout_s)), self._service(node), timeout_s=timeout_s + 60)

    def start_many(self, node_ids: list[int], timeout_s: float = UP_TIMEOUT_S) -> None:
        """``start`` for several nodes side by side: one ``docker compose start`` of every one
        that is down (``unpause`` of every paused one), then one wait until all of them serve."""
        nodes = [self._node(i) for i in node_ids]
        if not nodes:
            return
        states = self._states()
        paused = [self._service(n) for n in nodes if states.get(self._service(n), {}).get("State") == "paused"]
        down = [self._service(n) for n in nodes
                if states.get(self._service(n), {}).get("State") not in ("running", "paused")]
        since = time.time() - 1.0  # file times have the kernel's clock; a second of slack for its granularity
        if paused:
            self._compose("unpause", *paused)
        if down:
            self._compose("start", *down, timeout_s=timeout_s + 60)
        started = [n for n in nodes if self._service(n) in down]
        self._wait_serving_nodes(nodes, since=since if started else 0.0, timeout_s=timeout_s)

    def start(self, node_id: int, timeout_s: float = UP_TIMEOUT_S) -> NodeStatus:
        """``docker compose start`` (``unpause`` if paused) and wait until the node serves: a
        broker answers Metadata on its own port listing itself (``broker_serves``), a controller
        rewrote its quorum-state (``controller_serves``)."""
        self.start_many([node_id], timeout_s=timeout_s)
        return self._node_status(self._node(node_id))

    def pause(self, node_id: int) -> None:
        """``docker compose pause``: the container's processes are frozen (cgroup freezer)."""
        self._compose("pause", self._service(self._node(node_id)))

    def resume(self, node_id: int) -> None:
        """``docker compose unpause``."""
        self._compose("unpause", self._service(self._node(node_id)))

    def logs(self, node_id: int, lines: int = 40) -> str:
        """``docker compose logs --no-color --tail LINES``."""
        return self._compose("logs", "--no-color", "--tail", str(lines), self._service(self._node(node_id)),
                             check=False).stdout

    def kafka_version(self, node_id: int) -> str:
        """The Kafka version node ``node_id``'s running container has: its core jar in
        ``CONTAINER_LIBS_DIR`` (``kafka_version_from_jars``), read with ``docker compose exec``.

        Raises:
            KafkalabError: the container does not run, or its libs folder has no single core jar.
        """
        node = self._node(node_id)
        cp = self._compose("exec", "-T", self._service(node), "ls", "-1", CONTAINER_LIBS_DIR, check=False)
        if cp.returncode != 0:
            raise KafkalabError(f"{node.name}: cannot list {CONTAINER_LIBS_DIR} in its container: {cp.stderr.strip()}")
        return kafka_version_from_jars(cp.stdout.splitlines())


#: The subordinate uids of users (subuid(5)): the user namespaces of rootless Docker and userns-remap.
SUBUID_FILE = Path("/etc/subuid")


def subid_start(subuid: str, user: str, uid: int) -> int | None:
    """The first subordinate uid of ``user`` (name, or its ``uid``) in ``/etc/subuid``'s text
    (``name:start:count`` lines; subuid(5)), or None when it has none."""
    for line in subuid.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[0] in (user, str(uid)) and parts[1].isdigit():
            return int(parts[1])
    return None


def container_uid_on_host(info: dict, uid: int = CONTAINER_UID, subuid: str = "", user: str = "",
                          host_uid: int | None = None) -> int | None:
    """The host uid that owns the files a container process of uid ``uid`` writes into a bind
    mount, given the engine's ``docker info`` (as JSON: ``SecurityOptions``, ``OperatingSystem``):

    - Docker Desktop (``OperatingSystem`` "Docker Desktop", also Desktop for Linux): None. Its
      file sharing from the VM shows bind-mounted files as the user's own on both sides, so an
      owner tells nothing about which backend wrote them (and both can write them).
    - rootless Docker (``name=rootless`` in ``SecurityOptions``): the user namespace of rootlesskit
      maps container uid 0 to the user (``host_uid``) and uid n >= 1 to the user's subordinate uid
      ``start + n - 1`` (``subuid``: /etc/subuid's text; Docker docs, "Run the Docker daemon as a
      non-root user"); None when the user has no subordinate uids.
    - ``--userns-remap`` (``name=userns``): uid n maps to ``start + n`` of the remap user, by default
      ``dockremap`` (Docker docs, "Isolate containers with a user namespace").
    - otherwise (rootful, no user namespace): ``uid`` itself.
    """
    if "docker desktop" in str(info.get("OperatingSystem", "")).lower():
        return None
    options = " ".join(map(str, info.get("SecurityOptions") or []))
    if "name=rootless" in options:
        if uid == 0:
            return host_uid
        start = subid_start(subuid, user, host_uid if host_uid is not None else -1)
        return None if start is None else start + uid - 1
    if "name=userns" in options:
        start = subid_start(subuid, "dockremap", -1)
        return None if start is None else start + uid
    return uid


def compose_writer_uid(c: "ComposeCluster") -> int | None:
    """The host uid the compose containers (uid ``CONTAINER_UID``) write as here
    (``container_uid_on_host`` of this engine's ``docker info``, /etc/subuid and this user), or
    None when it cannot be told (Docker Desktop, no engine answering: ``up`` reports that)."""
    answer = c._docker("info", "--format", "{{json .}}")
    try:
        info = json.loads(answer.stdout) if answer is not None and answer.returncode == 0 else None
    except ValueError:
        info = {}  # an engine that answers, but not JSON: a plain rootful engine
    if not isinstance(info, dict):
        return None
    try:
        subuid = SUBUID_FILE.read_text()
    except OSError:
        subuid = ""
    try:
        import pwd

        user = pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        user = ""
    return container_uid_on_host(info, CONTAINER_UID, subuid, user, os.getuid())
