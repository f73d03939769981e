"""Cluster control: a real 3-broker Kafka cluster with a separate KRaft controller quorum.

The local backend runs each node as a JVM process (``kafka.Kafka``) from the jars that
``make jars`` fetched from Maven Central (kafka/pom.xml), with per-node config, data and
logs under ``.kafkalab/cluster/node-<id>/``. The compose backend, when chosen
(``kafkalab up --backend compose`` or ``$KAFKALAB_BACKEND``), drives the same cluster
described by docker-compose.yml in containers (the official apache/kafka image, or the stand-in
kafka/docker/Dockerfile builds where Docker Hub is out of reach); local is the default.

Every operation is a function here (this package: ``common`` holds what both backends
share, ``local`` and ``compose`` one backend each) and a ``kafkalab`` subcommand (kafkalab.cli):

=========================  ==================================================================
``up()``                   start what is not running; return once 3 brokers are registered
                           (unfenced, in the metadata) and the quorum has a leader
``down()``                 clean shutdown of every node; no process left behind
``status()``               per node: pid, alive, paused, listeners, log dir
``kill(id)``               SIGKILL (a crash: no controlled shutdown, nothing flushed)
``stop(id)``               SIGTERM and wait: controlled shutdown, leaders moved away first
``start(id)``              start one node and wait until it serves
``pause(id)``/``resume``   SIGSTOP/SIGCONT: alive (TCP accepts) but silent
``tool(name, args)``       Kafka's own CLI tools by script name, from the same jars
=========================  ==================================================================

Sources: Kafka documentation "KRaft" (Operations > KRaft), bin/kafka-run-class.sh and
bin/kafka-server-start.sh at tag 4.3.1 (JVM flags), kafka.tools.StorageTool (format).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import config
from ..errors import KafkalabError, NodeFailedToStart  # NodeFailedToStart: for callers of cluster.start
from ..waiting import wait_until

# the names of the three modules, so that ``from kafkalab import cluster; cluster.X`` reaches each
from .common import (
    BOOTSTRAP_TOOLS, JVM_PERFORMANCE_OPTS, STOP_TIMEOUT_S, TOOL_JVM_FAST, TOOL_JVM_MEASURE, TOOLS,
    UP_TIMEOUT_S, ClusterStatus, NodeStatus, _admin, balance_leaders, broker_classpath, broker_metadata,
    check_ports_free, ensure_tls_files, feature_levels, java_executable, last_log_lines, parse_group_table,
    port_accepts, port_is_free, port_owner, registered_brokers, tool, tool_command, unbalanced_leaders,
    under_replicated, wait_group_coordinator,
)
from .compose import (
    COMPOSE_MIN, COMPOSE_PROJECT, CONTAINER_DATA_DIR, CONTAINER_LIBS_DIR, CONTAINER_TLS_DIR, CONTAINER_UID,
    DOCKER_ASK_TIMEOUT_S, ENGINE_SETUP_COMMAND, IMAGE_BUILD_COMMAND, OFFICIAL_IMAGE, SUBUID_FILE,
    ComposeCluster, compose_port_variables, compose_program, compose_project, compose_version,
    compose_version_accepted, compose_writer_uid, container_uid_on_host, docker_work_dir,
    kafka_version_from_jars, local_image, own_compose, subid_start,
)
from .local import LocalCluster, PreparedCluster


#: The backends ``kafkalab up --backend`` accepts. The default is local: it is the tested path.
BACKENDS = ("local", "compose")


def _backend_file() -> Path:
    return config.cluster_dir() / "backend"


def chosen_backend(backend: str | None = None) -> str:
    """The backend to use: ``backend`` if given, else ``$KAFKALAB_BACKEND``, else the one the
    last ``up`` used (saved in the state folder), else "local". Never guessed from what is
    installed: a ``docker`` that answers does not make compose the default.

    Raises:
        KafkalabError: not one of BACKENDS.
    """
    if backend is None:
        f = _backend_file()
        backend = os.environ.get("KAFKALAB_BACKEND") or (f.read_text().strip() if f.exists() else "local")
    if backend not in BACKENDS:
        raise KafkalabError(f"unknown backend {backend!r}: choose {' or '.join(BACKENDS)}")
    return backend


def cluster(backend: str | None = None) -> LocalCluster:
    """The cluster object for ``backend`` ("local" or "compose"; None: see ``chosen_backend``)."""
    return ComposeCluster() if chosen_backend(backend) == "compose" else LocalCluster()


def _check_data_owner(c: LocalCluster) -> None:
    """Refuse to start on node data the other backend wrote and this one cannot write: the
    compose containers run as uid 1000, which is a host uid of its own on a rootful engine and
    another one under rootless Docker or userns-remap (``compose_writer_uid``); the local JVMs run
    as this user. Only on Linux engines that keep owners apart: Docker Desktop (macOS, Windows,
    and Desktop for Linux) shows bind-mounted files as the user's own on both sides.

    Raises:
        KafkalabError: a node's ``meta.properties`` belongs to another uid than this backend's
            writer; the message says how to start afresh.
    """
    if not sys.platform.startswith("linux"):
        return
    writer = compose_writer_uid(c) if isinstance(c, ComposeCluster) else os.getuid()
    if writer is None or writer == 0:
        return
    for n in c.topology.nodes:
        meta = n.data_dir / "meta.properties"
        if meta.exists() and meta.stat().st_uid != writer:
            other = "local" if c.backend == "compose" else "compose"
            raise KafkalabError(
                f"{meta} belongs to uid {meta.stat().st_uid} (the {other} backend wrote it); the {c.backend} backend "
                f"writes as uid {writer}: `kafkalab down && kafkalab wipe --yes`, then `kafkalab up --backend {c.backend}`"
            )


#: Finalized feature levels a fresh ``kafka-storage format`` of the pinned Kafka gives (measured on
#: 4.4.0: ``kafka-features describe``), that the notebooks need: share.version 2 is KIP-1191's
#: dead-letter queues (``ShareVersion.SV_2``, kafka-server-common 4.4.0). New binaries never raise
#: the levels of data an older Kafka formatted: a 4.3.1 state folder keeps share.version 1.
FORMAT_FEATURES: dict[str, int] = {"share.version": 2}
#: The release ``kafka-features upgrade --release-version`` takes for the pinned Kafka (4.4.0's
#: ``MetadataVersion.LATEST_PRODUCTION``).
RELEASE_VERSION = "4.4-IV2"


def stale_features(levels: dict[str, int]) -> str | None:
    """None when the finalized feature ``levels`` (``feature_levels()``) reach ``FORMAT_FEATURES``,
    else what to do, as one message: a state folder formatted by an older Kafka."""
    low = {k: (levels.get(k, 0), want) for k, want in FORMAT_FEATURES.items() if levels.get(k, 0) < want}
    if not low:
        return None
    found = ", ".join(f"{k} {got} (Kafka {config.KAFKA_VERSION} formats {want})" for k, (got, want) in low.items())
    return (f"the cluster's data in {config.cluster_dir()} was formatted by an older Kafka: {found}. "
            f"The cluster runs, but the notebooks were checked on a fresh format. Start afresh (the lab's "
            f"topics go): `kafkalab down && kafkalab wipe --yes && kafkalab up`; or raise the levels in "
            f"place while it runs: `kafkalab tool kafka-features upgrade --release-version {RELEASE_VERSION}` "
            f"(it also raises kraft.version to 1, which a fresh format leaves at 0), then `kafkalab up`")


def up(controllers: int | None = None, backend: str | None = None, timeout_s: float = UP_TIMEOUT_S) -> ClusterStatus:
    """Start the cluster on ``backend`` (see ``chosen_backend``; LocalCluster.up, ComposeCluster.up)
    and remember the backend for later commands.

    Raises:
        KafkalabError: another backend's cluster still runs, or its data is in the state folder
            (``kafkalab down``, ``kafkalab wipe`` first); whatever the backend's ``up`` raises; the
            data was formatted by an older Kafka whose feature levels are below ``FORMAT_FEATURES``
            (``stale_features``: the cluster is left running, the message says what to do).
    """
    name = chosen_backend(backend)
    saved = _backend_file().read_text().strip() if _backend_file().exists() else None
    if saved in BACKENDS and saved != name:
        try:
            running = cluster(saved).status()
        except KafkalabError:  # no docker: nothing of the compose backend can run
            running = None
        if running and any(n.alive for n in [*running.brokers.values(), *running.controllers.values()]):
            raise KafkalabError(f"the cluster runs on the {saved} backend: `kafkalab down` first, "
                                f"then `kafkalab up --backend {name}`")
    c = cluster(name)
    _check_data_owner(c)
    # Data formatted before this checkout's Kafka (no stamp of its version): its feature levels are
    # read once (a JVM tool, about 2 s); a fresh format has the levels by construction.
    stamp = config.cluster_dir() / "features-checked"
    formatted = any((n.data_dir / "meta.properties").exists() for n in c.topology.nodes)
    checked = stamp.exists() and stamp.read_text().strip() == config.KAFKA_VERSION
    status = c.up(controllers=controllers, timeout_s=timeout_s)
    wait_group_coordinator(c.topology.bootstrap_servers, timeout_s=timeout_s)
    balance_leaders(c.topology.bootstrap_servers, timeout_s=timeout_s)  # brokers that registered late lead nothing yet
    config.cluster_dir().mkdir(parents=True, exist_ok=True)
    _backend_file().write_text(c.backend)
    if formatted and not checked and (stale := stale_features(feature_levels())):
        raise KafkalabError(stale)
    stamp.write_text(config.KAFKA_VERSION + "\n")
    return status


def down() -> None:
    """Stop every node of the cluster; no process is left behind."""
    cluster().down()


def status() -> ClusterStatus:
    """ClusterStatus of the current backend."""
    return cluster().status()


def kill(node_id: int) -> None:
    cluster().kill(node_id)


def stop(node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Controlled shutdown of node ``node_id`` (SIGTERM; SIGKILL after ``timeout_s``)."""
    cluster().stop(node_id, timeout_s=timeout_s)


def start(node_id: int, timeout_s: float = UP_TIMEOUT_S) -> NodeStatus:
    """Start node ``node_id`` and wait until this new process serves (see LocalCluster.start)."""
    return cluster().start(node_id, timeout_s=timeout_s)


def pause(node_id: int) -> None:
    cluster().pause(node_id)


def fault_name(verb: str) -> str:
    """How the current backend carries out ``verb`` ("kill", "stop", "pause", "resume"), for a
    timeline: "SIGSTOP" on the local backend, "docker pause: cgroup freezer" on compose.

    Raises:
        KeyError: not one of those verbs.
    """
    return cluster().FAULTS[verb]


def resume(node_id: int) -> None:
    cluster().resume(node_id)


def wait_healthy(timeout_s: float = 60.0) -> None:
    """Until all 3 brokers are registered and no partition is under-replicated (ISR full).

    Raises:
        WaitTimeout: naming the brokers missing or the partitions still under-replicated.
    """
    bootstrap = config.bootstrap_servers()
    missing: list = []

    def healthy() -> bool:
        nonlocal missing
        ids = registered_brokers(bootstrap)
        if set(config.BROKER_IDS) - ids:
            missing = [f"broker {i} not registered" for i in sorted(set(config.BROKER_IDS) - ids)]
            return False
        missing = under_replicated(bootstrap)
        return not missing

    wait_until(healthy, timeout_s=timeout_s, interval_s=0.25, what="all brokers registered and every ISR full",
               on_timeout=lambda: f"still: {missing[:10]}")


def restore(timeout_s: float = 60.0) -> None:
    """Bring the cluster back to how notebooks expect it: every node running and resumed,
    all brokers registered, every ISR full, every partition led by its preferred replica
    (``balance_leaders``). Use in a ``finally`` or via ``restored()``."""
    c = cluster()
    down = []
    for n in c.topology.nodes:
        st = c._node_status(n)
        if st.paused:
            c.resume(n.node_id)
        elif not st.alive:
            down.append(n.node_id)
    c.start_many(down, timeout_s=timeout_s)  # side by side: one wait for all of them
    wait_healthy(timeout_s)
    balance_leaders(timeout_s=timeout_s)


class restored:
    """Context manager: ``with kafkalab.cluster.restored(): ...break things...`` restores the
    cluster (see ``restore``) on exit, even when the block raised."""

    def __init__(self, timeout_s: float = 60.0):
        self.timeout_s = timeout_s

    def __enter__(self) -> "restored":
        return self

    def __exit__(self, *exc) -> None:
        restore(self.timeout_s)
