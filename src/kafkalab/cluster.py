"""Cluster control: a real 3-broker Kafka cluster with a separate KRaft controller quorum.

The local backend runs each node as a JVM process (``kafka.Kafka``) from the jars that
``make jars`` fetched from Maven Central (kafka/pom.xml), with per-node config, data and
logs under ``.kafkalab/cluster/node-<id>/``. The compose backend, when chosen
(``kafkalab up --backend compose`` or ``$KAFKALAB_BACKEND``), drives the same cluster
described by docker-compose.yml in containers (the official apache/kafka image, or the stand-in
kafka/docker/Dockerfile builds where Docker Hub is out of reach); local is the default.

Every operation is a function here and a ``kafkalab`` subcommand (kafkalab.cli):

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

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import psutil

from . import cds, config, protocol
from .config import KAFKA_VERSION, Node, Topology
from .errors import (
    JAVA_INSTALL,
    DockerUnavailable,
    ImageMissing,
    JarsMissing,
    JavaMissing,
    KafkalabError,
    NodeFailedToStart,
    PortInUse,
    UnknownNode,
)
from .waiting import wait_until

#: JVM flags of the lab's controllers and brokers (both backends: docker-compose.yml sets the same
#: as KAFKA_JVM_PERFORMANCE_OPTS): the C1 compiler only and the serial collector, for a cluster of
#: four JVMs on a laptop whose notebooks kill and restart brokers. Measured on a 2-core machine
#: (benchmarks/README.md, "Broker JVM flags"): against Kafka's flags (bin/kafka-run-class.sh: G1,
#: MaxGCPauseMillis=20, InitiatingHeapOccupancyPercent=35, ExplicitGCInvokesConcurrent),
#: `kafkalab up` took 16.2 instead of 28.4 CPU-seconds (11.3 instead of 15.9 s), and notebooks 08
#: and 00 run together 82 instead of 119 CPU-seconds of the whole machine. The price is peak speed: C2's
#: code is faster once warm, so notebook 10's records/s are a C1 broker's. Its claims compare
#: settings measured in one run, so they hold under either. Kafka's semantics do not depend
#: on the JIT or the collector.
JVM_PERFORMANCE_OPTS = [
    "-server",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Djava.awt.headless=true",
]

#: Script name (as in Kafka's bin/) -> main class, Kafka 4.3. Checked against the jars by
#: tests/test_cluster_config.py.
TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-replica-verification": "org.apache.kafka.tools.ReplicaVerificationTool",
    "kafka-jmx": "org.apache.kafka.tools.JmxTool",
}

#: Tools that take ``--bootstrap-server``; kafkalab adds this cluster's when none is given.
BOOTSTRAP_TOOLS = {
    "kafka-topics", "kafka-consumer-groups", "kafka-share-groups", "kafka-groups",
    "kafka-producer-perf-test", "kafka-consumer-perf-test", "kafka-get-offsets",
    "kafka-metadata-quorum", "kafka-transactions", "kafka-configs", "kafka-console-producer",
    "kafka-console-consumer", "kafka-console-share-consumer", "kafka-leader-election",
    "kafka-reassign-partitions", "kafka-features", "kafka-cluster", "kafka-broker-api-versions",
    "kafka-delete-records", "kafka-log-dirs", "kafka-acls", "kafka-verifiable-producer",
    "kafka-verifiable-consumer",
}

UP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_MARK = "-Dkafkalab.node="


# ----------------------------------------------------------------------------- status types


@dataclass
class NodeStatus:
    """One node as ``status()`` sees it. ``alive``: the process exists and is not a zombie;
    ``paused``: stopped by SIGSTOP (alive but silent)."""

    node_id: int
    role: str
    pid: int | None
    alive: bool
    paused: bool
    listeners: dict[str, str]
    log_dir: str
    data_dir: str


@dataclass
class ClusterStatus:
    """What ``kafkalab status --json`` prints. ``quorum_leader``: node id of the active
    controller, read from the controllers' ``quorum-state`` files (None if unknown)."""

    backend: str
    kafka_version: str
    bootstrap_servers: str
    brokers: dict[int, NodeStatus] = field(default_factory=dict)
    controllers: dict[int, NodeStatus] = field(default_factory=dict)
    quorum_leader: int | None = None

    @property
    def all_alive(self) -> bool:
        return all(n.alive and not n.paused for n in [*self.brokers.values(), *self.controllers.values()])

    def to_json(self) -> dict:
        d = asdict(self)
        d["brokers"] = {str(k): v for k, v in d["brokers"].items()}
        d["controllers"] = {str(k): v for k, v in d["controllers"].items()}
        return d


# ----------------------------------------------------------------------------- checks


def java_executable() -> str:
    """Path of ``java`` (``$JAVA_HOME/bin/java`` first), checked to be version 17 or later.

    Raises:
        JavaMissing: no java, or one older than 17 (Kafka 4 brokers need Java 17+).
    """
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if not candidate:
        raise JavaMissing(
            "Java is missing: no `java` on PATH and no $JAVA_HOME/bin/java. Kafka 4 needs Java 17 or later "
            f"({JAVA_INSTALL}; conda: see environment.yml)."
        )
    try:
        out = subprocess.run([candidate, "-version"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaMissing(f"`{candidate} -version` failed: {e}") from e
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0_..." style
        major = int(m.group(2))
    if major < 17:
        raise JavaMissing(f"{candidate} is Java {major or '?'}; Kafka {KAFKA_VERSION} needs Java 17 or later "
                          f"({JAVA_INSTALL}).\n{out.strip()}")
    return candidate


def broker_classpath() -> str:
    """Classpath of the broker jars, as a JVM wildcard entry.

    Raises:
        JarsMissing: ``make jars`` has not run (it needs Maven, ``mvn``).
    """
    jars = config.broker_jars_dir()
    if not (jars / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        hint = "" if shutil.which("mvn") else " Maven is missing too: install it (Debian: apt install maven)."
        raise JarsMissing(
            f"Kafka {KAFKA_VERSION} jars are not in {jars}. Run `make jars` (Maven fetches them from Maven Central once)." + hint
        )
    return str(jars / "*")


def port_owner(port: int) -> str:
    """Who listens on 127.0.0.1:``port``: ``"pid 123 (java: cmdline...)"`` or a fallback text."""
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                try:
                    p = psutil.Process(c.pid)
                    cmd = " ".join(p.cmdline())
                    return f"pid {c.pid} ({p.name()}: {cmd[:160]})"
                except psutil.Error:
                    return f"pid {c.pid}"
    except psutil.Error:
        pass
    return "a process kafkalab cannot identify (try: ss -ltnp)"


def port_is_free(port: int) -> bool:
    """True if 127.0.0.1:``port`` can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def check_ports_free(node: Node) -> None:
    """Raise PortInUse naming the port, the listener and the process holding it."""
    for listener, port in node.ports.items():
        if not port_is_free(port):
            raise PortInUse(
                f"port {port} ({listener} listener of {node.name}) is taken by {port_owner(port)}. "
                "Stop that process, or if it is an old kafkalab node: kafkalab down."
            )


def port_accepts(port: int, timeout_s: float = 0.5) -> bool:
    """True if a TCP connection to 127.0.0.1:``port`` succeeds."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def last_log_lines(node: Node, n: int = 25) -> str:
    """The last ``n`` lines of the node's stdout.log and logs/server.log, for error messages."""
    parts = []
    for path in (node.dir / "stdout.log", node.log_dir / "server.log"):
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()[-n:]
            parts.append(f"--- last {len(lines)} lines of {path}:\n" + "\n".join(lines))
    return "\n".join(parts) or f"(no logs in {node.dir})"


# ----------------------------------------------------------------------------- admin helpers


def _admin(bootstrap: str, timeout_ms: int = 3000):
    from confluent_kafka.admin import AdminClient

    return AdminClient({
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": timeout_ms,
        "socket.connection.setup.timeout.ms": timeout_ms,
        "reconnect.backoff.max.ms": 500,
        "log_level": 0,  # the errors we care about are raised, not logged
    })


def registered_brokers(bootstrap: str | None = None, timeout_s: float = 2.0) -> set[int]:
    """Ids of the brokers in the cluster metadata (registered and unfenced), or an empty set
    if no broker answered within ``timeout_s``."""
    from confluent_kafka import KafkaException

    try:
        md = _admin(bootstrap or config.bootstrap_servers()).list_topics(timeout=timeout_s)
    except KafkaException:
        return set()
    return set(md.brokers)


_correlation_ids = itertools.count(1)


def broker_metadata(host: str, port: int, topics: list[str], timeout_s: float = 5.0) -> protocol.MetadataAnswer:
    """One broker's own Metadata answer: a Metadata v4 request sent to that broker alone
    (``host:port``, any of its listeners), for ``topics`` (``[]``: brokers only), never
    auto-creating.

    Why not the AdminClient: librdkafka sends a metadata request to whichever broker it
    likes, and KRaft brokers apply a new topic (or a deletion) from the metadata log each at
    its own pace, so one broker's answer says nothing about the others'. A consumer whose
    first metadata came from a broker that had not yet applied its topic sat in "wait-metadata"
    (or was assigned nothing by a group leader in the same state) for over 45 s on this
    machine under load, until librdkafka's next periodic refresh
    (``topic.metadata.refresh.interval.ms``, 300000 in librdkafka 2.16).

    Returns:
        ``protocol.MetadataAnswer``: the brokers as advertised on that listener, and topic ->
        ``protocol.TopicMetadata`` (error_code 3: the broker does not know it).

    Raises:
        OSError: the broker is unreachable or did not answer within ``timeout_s`` seconds.
        ProtocolError: a malformed answer.
    """
    corr = next(_correlation_ids) & 0x7FFFFFFF
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(protocol.encode_metadata_request(list(topics), corr))
        reader = protocol.FrameReader()
        while True:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"{host}:{port} closed the connection before answering Metadata")
            frames = reader.feed(chunk)
            if frames:
                answer = protocol.parse_metadata_response(frames[0])
                if answer.correlation_id != corr:
                    raise protocol.ProtocolError(
                        f"{host}:{port} answered correlation id {answer.correlation_id}, not {corr}")
                return answer


def wait_group_coordinator(bootstrap: str | None = None, timeout_s: float = UP_TIMEOUT_S) -> float:
    """Until ``__consumer_offsets`` exists and each of its partitions has a leader and a full
    ISR, so every group has a coordinator; returns the seconds it took.

    A new cluster creates ``__consumer_offsets`` on the first FindCoordinator request for a
    group (``offsets.topic.num.partitions`` partitions, Kafka docs, Broker Configs). The lookup
    here goes through a plain consumer's group handle (``committed()``), never through an
    AdminClient. A cluster that returns from ``up`` with every group's coordinator in place
    spares the first experiment a wait, and spares an AdminClient group request the window
    in which librdkafka 2.16.0 can abort the process (``workloads.ADMIN_GROUP_OPTIONS`` is
    the rule that closes it for good; it was first seen as the SIGABRT of a fresh-clone
    ``make test`` on 2026-11-25).

    Raises:
        WaitTimeout: ``__consumer_offsets`` not created and led within ``timeout_s``.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    bootstrap = bootstrap or config.bootstrap_servers()
    t0 = time.monotonic()
    state = "not created yet"

    def ready() -> bool:
        nonlocal state
        md = _admin(bootstrap).list_topics("__consumer_offsets", timeout=5)
        tm = md.topics.get("__consumer_offsets")
        if tm is not None and tm.error is None and tm.partitions:
            waiting = [p.id for p in tm.partitions.values() if p.leader < 0 or len(p.isrs) < len(p.replicas)]
            if not waiting:
                return True
            state = f"partitions without a leader or a full ISR: {sorted(waiting)}"
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkalab-coordinator-probe",
                          "log_level": 0})
        try:
            probe.committed([TopicPartition("__consumer_offsets", 0)], timeout=2)  # FindCoordinator
        except KafkaException:
            pass  # COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR while it is being created
        finally:
            probe.close()
        return False

    wait_until(ready, timeout_s=timeout_s, interval_s=0.25,
               what="__consumer_offsets to exist with a leader and a full ISR on every partition",
               on_timeout=lambda: state)
    return time.monotonic() - t0


def under_replicated(bootstrap: str | None = None, timeout_s: float = 5.0) -> list[tuple[str, int]]:
    """(topic, partition) pairs whose ISR is smaller than their replica set, internal topics included."""
    md = _admin(bootstrap or config.bootstrap_servers()).list_topics(timeout=timeout_s)
    return sorted(
        (t, p.id)
        for t, tm in md.topics.items()
        for p in tm.partitions.values()
        if len(p.isrs) < len(p.replicas) or p.leader < 0
    )


def unbalanced_leaders(bootstrap: str | None = None, timeout_s: float = 5.0) -> list[tuple[str, int]]:
    """(topic, partition) pairs led by a broker other than their *preferred replica* (the first
    of their replica list), internal topics included: what a broker restart leaves behind."""
    md = _admin(bootstrap or config.bootstrap_servers()).list_topics(timeout=timeout_s)
    return sorted((t, p.id) for t, tm in md.topics.items() for p in tm.partitions.values()
                  if p.replicas and p.leader != p.replicas[0])


def balance_leaders(bootstrap: str | None = None, timeout_s: float = 30.0) -> list[tuple[str, int]]:
    """Elect the preferred replica leader of every partition that is led by another broker, and
    wait until each is (partitions whose preferred replica is not in the ISR are left alone).

    A broker that restarts comes back as a follower of everything it led; the controller moves
    leadership back on its own only at its next imbalance check (``auto.leader.rebalance.enable``,
    every ``leader.imbalance.check.interval.seconds``, 300 s by default; Kafka docs, Broker
    Configs), so a group or transaction coordinator would move minutes later, in the middle of
    whatever runs then. Doing it at once leaves the cluster as it was before the restart.
    Same request as ``kafka-leader-election --election-type preferred`` (KIP-460).

    Returns:
        The partitions whose leader was moved (empty: all were balanced).

    Raises:
        WaitTimeout: a partition still not led by its preferred replica after ``timeout_s``.
    """
    from confluent_kafka import ElectionType, TopicPartition

    bootstrap = bootstrap or config.bootstrap_servers()
    admin = _admin(bootstrap)  # kept until the future is done: a collected client ends its requests (_DESTROY)
    md = admin.list_topics(timeout=min(timeout_s, 10.0))
    movable = sorted((t, p.id) for t, tm in md.topics.items() for p in tm.partitions.values()
                     if p.replicas and p.leader != p.replicas[0] and p.replicas[0] in p.isrs)
    if not movable:
        return []
    # no timeout keywords: confluent-kafka 2.16.1's elect_leaders raises SystemError when given any
    fut = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, p) for t, p in movable])
    fut.result(timeout=timeout_s + 5)  # per-partition errors (e.g. ELECTION_NOT_NEEDED) show in the wait below
    still: list = []

    def balanced() -> bool:
        nonlocal still
        still = [tp for tp in unbalanced_leaders(bootstrap) if tp in movable]
        return not still

    wait_until(balanced, timeout_s=timeout_s, interval_s=0.2, what="every partition led by its preferred replica",
               on_timeout=lambda: f"still: {still[:10]}")
    return movable


def parse_group_table(text: str) -> list[dict[str, str]]:
    """The rows of a ``kafka-consumer-groups`` / ``kafka-share-groups --describe`` table:
    whitespace-separated columns under a header line that starts with ``GROUP``, as dicts
    keyed by the header's words; blank lines, notes and rows of another width skipped."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = cells
            continue
        if header and len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def feature_levels(text: str | None = None) -> dict[str, int]:
    """Finalized feature levels from ``kafka-features describe`` (run now if ``text`` is None):
    e.g. ``{"metadata.version": 29, "eligible.leader.replicas.version": 1, "share.version": 1}``.
    KIP-966 ELR is on when ``eligible.leader.replicas.version`` >= 1 (the default for clusters
    formatted by 4.1+); KIP-932 share groups when ``share.version`` >= 1."""
    if text is None:
        text = tool("kafka-features", "describe").stdout
    out = {}
    for line in text.splitlines():
        m = re.search(r"Feature:\s*(\S+).*FinalizedVersionLevel:\s*(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def _wait_gone(p: psutil.Process, timeout_s: float, ports: Sequence[int] = ()) -> bool:
    """True once ``p`` has exited and ``ports`` can be bound again, within ``timeout_s``.

    A zombie counts as exited: a node started by another process (a test, a notebook) stays
    a zombie until that parent reaps it, and ``psutil.Process.wait`` would wait for the
    reaping. But a JVM's main thread turns zombie while its other threads still close their
    sockets, hence the ports."""
    deadline = time.monotonic() + timeout_s
    exited = False
    while time.monotonic() < deadline:
        if not exited:
            try:
                exited = p.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                exited = True
        if not exited:
            try:
                p.wait(timeout=0.05)  # reaps it when it is our child
                exited = True
            except psutil.TimeoutExpired:
                continue
        if all(port_is_free(port) for port in ports):
            return True
        time.sleep(0.05)  # the kernel closes the sockets; nothing to wait on but the port
    return False


# ----------------------------------------------------------------------------- local backend


class LocalCluster:
    """The cluster as local JVM processes. Stateless: every call reads pids from the
    per-node ``pid`` files and checks the process's command line, so a new Python process
    (CLI, notebook, test) sees the same cluster."""

    backend = "local"
    #: What each fault verb does to a node, in the words a timeline shows (``fault_name``).
    FAULTS = {"kill": "SIGKILL", "stop": "SIGTERM", "pause": "SIGSTOP", "resume": "SIGCONT"}

    def __init__(self, topology: Topology | None = None):
        self.topology = topology or self._saved_topology() or Topology()
        self._log_marks: dict[int, int] = {}

    # --- persistence of the chosen topology
    @staticmethod
    def _topology_file() -> Path:
        return config.cluster_dir() / "topology.json"

    @classmethod
    def _saved_topology(cls) -> Topology | None:
        f = cls._topology_file()
        if f.exists():
            return Topology(**json.loads(f.read_text()))
        return None

    # --- processes
    def process(self, node: Node) -> psutil.Process | None:
        """The node's live process, or None. Checks the command line carries the node's
        marker and this state folder, so a recycled pid is never mistaken for a broker."""
        pid_file = node.dir / "pid"
        if not pid_file.exists():
            return None
        try:
            p = psutil.Process(int(pid_file.read_text().strip()))
            cmd = p.cmdline()
            if f"{_MARK}{node.node_id}" in cmd and str(node.config_path) in cmd and p.status() != psutil.STATUS_ZOMBIE:
                return p
        except (ValueError, psutil.Error):
            pass
        return None

    def _node_status(self, node: Node) -> NodeStatus:
        p = self.process(node)
        paused = False
        if p is not None:
            try:
                paused = p.status() == psutil.STATUS_STOPPED
            except psutil.Error:
                p = None
        return NodeStatus(
            node_id=node.node_id,
            role=node.role,
            pid=p.pid if p else None,
            alive=p is not None,
            paused=paused,
            listeners=node.listeners(),
            log_dir=str(node.log_dir),
            data_dir=str(node.data_dir),
        )

    def _live_controllers(self) -> list[Node]:
        return [n for n in self.topology.controller_nodes if self.process(n) is not None]

    def quorum_leader(self) -> int | None:
        """Active controller id from ``__cluster_metadata-0/quorum-state`` of live controllers
        (the file KRaft writes on every election; KIP-595)."""
        return self._leader_of(self._live_controllers())

    @staticmethod
    def _leader_of(controllers: Sequence[Node]) -> int | None:
        """The leader the ``quorum-state`` files of ``controllers`` name at the highest epoch."""
        best: tuple[int, int] | None = None  # (epoch, leader)
        for node in controllers:
            f = node.data_dir / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[0]):
                best = (epoch, leader)
        return best[1] if best else None

    def status(self) -> ClusterStatus:
        """Every node's process state; cheap (no network)."""
        return ClusterStatus(
            backend=self.backend,
            kafka_version=KAFKA_VERSION,
            bootstrap_servers=self.topology.bootstrap_servers,
            brokers={n.node_id: self._node_status(n) for n in self.topology.brokers},
            controllers={n.node_id: self._node_status(n) for n in self.topology.controller_nodes},
            quorum_leader=self.quorum_leader(),
        )

    def _jvm_command(self, node: Node, java: str, classpath: str, main: str, args: Sequence[str], heap_mb: int) -> list[str]:
        return [
            java,
            f"-Xms{heap_mb}m",
            f"-Xmx{heap_mb}m",
            *JVM_PERFORMANCE_OPTS,
            *(cds.use_flags("node", java, classpath) or [cds.RECORD_FLAG]),
            f"-Dkafka.logs.dir={node.log_dir}",
            f"-Dlog4j2.configurationFile={config.config_templates_dir() / 'log4j2.properties'}",
            f"{_MARK}{node.node_id}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _prepare(self, node: Node) -> None:
        node.log_dir.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)
        if node.role == "broker":
            ensure_tls_files()
        text = self.topology.render(node)
        if not node.config_path.exists() or node.config_path.read_text() != text:
            node.config_path.write_text(text)

    def _format_all(self, nodes: list[Node], java: str, classpath: str) -> None:
        """``kafka-storage format`` each node that has no meta.properties, in parallel."""
        todo = [n for n in nodes if not (n.data_dir / "meta.properties").exists()]
        if not todo:
            return
        procs = []
        for n in todo:
            cmd = [java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   f"-Dlog4j2.configurationFile={config.config_templates_dir() / 'tools-log4j2.properties'}",
                   "-cp", classpath, TOOLS["kafka-storage"],
                   "format", "--ignore-formatted", "-t", config.CLUSTER_ID, "-c", str(n.config_path)]
            procs.append((n, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        for n, p in procs:
            out, _ = p.communicate(timeout=120)
            if p.returncode != 0:
                raise NodeFailedToStart(f"formatting the storage of {n.name} failed (exit {p.returncode}):\n{out}")

    def _spawn(self, node: Node, java: str, classpath: str) -> psutil.Process:
        check_ports_free(node)
        server_log = node.log_dir / "server.log"
        # where this incarnation's log starts: readiness is read from what it writes
        self._log_marks[node.node_id] = server_log.stat().st_size if server_log.exists() else 0
        cmd = self._jvm_command(node, java, classpath, "kafka.Kafka", [str(node.config_path)], node.heap_mb)
        with open(node.dir / "stdout.log", "ab") as out:
            out.write(f"\n=== kafkalab start {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n".encode())
            out.flush()
            # new session: Ctrl-C in a terminal or notebook does not reach the brokers;
            # kafkalab down stops them.
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=node.dir)
        (node.dir / "pid").write_text(str(popen.pid))
        proc = psutil.Process(popen.pid)

        def args_readable() -> bool:
            try:
                return popen.poll() is not None or f"{_MARK}{node.node_id}" in proc.cmdline()
            except psutil.Error:
                return True  # gone already: _wait_serving reports it with its log
        # Popen returns once the exec has begun; the kernel sets the new command line a moment
        # later (load_elf_binary), and until then /proc/<pid>/cmdline reads empty, so process()
        # would call a starting node dead (seen on a loaded machine: "broker-3 exited while
        # starting" while it started). Wait for it.
        wait_until(args_readable, timeout_s=10, interval_s=0.01, what=f"{node.name}'s command line in /proc/{popen.pid}")
        return proc

    def _wait_serving(self, nodes: list[Node], timeout_s: float) -> None:
        """Until every controller port accepts, a quorum leader is known, and every broker in
        ``nodes`` is registered in the metadata. Fails fast if a process dies."""
        brokers = {n.node_id for n in nodes if n.role == "broker"}

        def dead_node_error() -> None:
            for n in nodes:
                if self.process(n) is None:
                    raise NodeFailedToStart(f"{n.name} exited while starting.\n{last_log_lines(n)}")

        def started_since_spawn(n: Node) -> bool:
            # A killed broker stays registered until the controller fences it, so the
            # metadata alone would call a restarting broker ready too early.
            mark = self._log_marks.get(n.node_id)
            if mark is None:
                return True
            try:
                with open(n.log_dir / "server.log", "rb") as f:
                    f.seek(mark)
                    return b"Kafka Server started" in f.read()
            except OSError:
                return False

        def ready() -> bool:
            dead_node_error()
            if not all(started_since_spawn(n) for n in nodes):
                return False
            if any(not port_accepts(n.controller_port) for n in self.topology.controller_nodes):
                return False
            if self.quorum_leader() is None:
                return False
            if brokers:
                return brokers <= registered_brokers(self.topology.bootstrap_servers, timeout_s=1.0)
            return True

        names = ", ".join(n.name for n in nodes)
        wait_until(ready, timeout_s=timeout_s, interval_s=0.25,
                   what=f"{names} to serve (controller ports open, quorum leader elected, brokers registered)",
                   on_timeout=lambda: "\n".join(last_log_lines(n, 10) for n in nodes))

    def up(self, controllers: int | None = None, timeout_s: float = UP_TIMEOUT_S) -> ClusterStatus:
        """Start every node that is not running (idempotent) and wait until the cluster serves.

        Args:
            controllers: 1 or 3 KRaft controllers; None keeps the saved choice (default 1).
            timeout_s: how long to wait for all nodes to serve.

        Returns:
            ClusterStatus once 3 brokers are registered and the quorum has a leader.

        Raises:
            JavaMissing, JarsMissing, PortInUse, NodeFailedToStart, WaitTimeout;
            KafkalabError if the cluster runs with a different number of controllers.
        """
        if controllers is not None and controllers != self.topology.controllers:
            if any(self.process(n) for n in self.topology.nodes):
                raise KafkalabError(
                    f"the cluster runs with {self.topology.controllers} controller(s); "
                    f"`kafkalab down` first, then `kafkalab up --controllers {controllers}`"
                )
            if self._saved_topology() is not None:
                # a quorum's voter set is fixed at format time: start from fresh storage
                shutil.rmtree(config.cluster_dir(), ignore_errors=True)
            self.topology = Topology(controllers=controllers)
        java_executable()  # JavaMissing before anything is written
        broker_classpath()  # JarsMissing likewise
        config.cluster_dir().mkdir(parents=True, exist_ok=True)
        self._topology_file().write_text(json.dumps(self.topology.to_json()))
        self.start_many([n.node_id for n in self.topology.nodes], timeout_s)
        return self.status()

    def down(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop every node: brokers first (controlled shutdown needs the controllers), then
        controllers. A node that does not exit within ``timeout_s`` is killed. Leaves no process."""
        brokers = [n for n in self.topology.brokers if self.process(n)]
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(lambda n: self._stop(n, timeout_s), brokers))
        for n in self.topology.controller_nodes:
            if self.process(n):
                self._stop(n, timeout_s)

    def _stop(self, node: Node, timeout_s: float) -> None:
        p = self.process(node)
        if p is None:
            return
        try:
            if p.status() == psutil.STATUS_STOPPED:
                p.resume()  # a paused JVM cannot handle SIGTERM
            p.terminate()
            if not _wait_gone(p, timeout_s, node.ports.values()):
                p.kill()
                if not _wait_gone(p, 10, node.ports.values()):
                    raise KafkalabError(f"{node.name} (pid {p.pid}) survived SIGKILL for 10 s")
        except psutil.NoSuchProcess:
            pass

    def _node(self, node_id: int) -> Node:
        try:
            return self.topology.node(int(node_id))
        except KeyError as e:
            raise UnknownNode(str(e.args[0])) from None

    def _live(self, node_id: int) -> tuple[Node, psutil.Process]:
        node = self._node(node_id)
        p = self.process(node)
        if p is None:
            raise KafkalabError(f"{node.name} is not running (see `kafkalab status`)")
        return node, p

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id``: a crash, no controlled shutdown. Returns once it is gone."""
        node, p = self._live(node_id)
        p.kill()
        if not _wait_gone(p, 10, node.ports.values()):
            raise KafkalabError(f"{node.name} (pid {p.pid}) survived SIGKILL for 10 s")

    def stop(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM node ``node_id`` and wait for its controlled shutdown (SIGKILL after ``timeout_s``)."""
        node, _ = self._live(node_id)
        self._stop(node, timeout_s)

    def start(self, node_id: int, timeout_s: float = UP_TIMEOUT_S) -> NodeStatus:
        """Start node ``node_id`` if it is down and wait until it serves (a broker: registered)."""
        node = self._node(node_id)
        p = self.process(node)
        if p is not None:
            if p.status() == psutil.STATUS_STOPPED:
                p.resume()
        else:
            java, classpath = java_executable(), broker_classpath()
            self._prepare(node)
            check_ports_free(node)
            self._format_all([node], java, classpath)
            self._spawn(node, java, classpath)
        self._wait_serving([node], timeout_s)
        return self._node_status(node)

    def start_many(self, node_ids: list[int], timeout_s: float = UP_TIMEOUT_S) -> None:
        """``start`` for several nodes side by side: every one that is down is spawned (a paused
        one resumed) before the one wait until all of them serve, so two restarts cost about
        one (``up`` starts the whole cluster this way). Raises as ``start`` (PortInUse,
        NodeFailedToStart, WaitTimeout)."""
        nodes = [self._node(i) for i in node_ids]
        down = []
        for node in nodes:
            p = self.process(node)
            if p is None:
                down.append(node)
            elif p.status() == psutil.STATUS_STOPPED:
                p.resume()
        if down:
            java, classpath = java_executable(), broker_classpath()
            for node in down:
                self._prepare(node)
                check_ports_free(node)
            self._format_all(down, java, classpath)
            spawned = {node.node_id: self._spawn(node, java, classpath) for node in down}
        if nodes:
            self._wait_serving(nodes, timeout_s)
        if down and not cds.use_flags("node", java, classpath):
            # the first start in this state folder: the class archive of the next starts
            # (kafkalab.cds), from a broker that serves
            broker = next((n for n in down if n.role == "broker"), None)
            if broker is not None:
                cds.dump_running(spawned[broker.node_id].pid, "node", java, classpath)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: its sockets stay open, it answers nothing, sends no heartbeat."""
        node, p = self._live(node_id)
        p.suspend()
        # the signal is delivered asynchronously: return once the kernel shows it stopped
        wait_until(lambda: p.status() == psutil.STATUS_STOPPED, timeout_s=10, interval_s=0.02,
                   what=f"{node.name} (pid {p.pid}) to stop on SIGSTOP")

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node; returns once it runs again."""
        node, p = self._live(node_id)
        p.resume()
        wait_until(lambda: p.status() != psutil.STATUS_STOPPED, timeout_s=10, interval_s=0.02,
                   what=f"{node.name} (pid {p.pid}) to run again on SIGCONT")

    def logs(self, node_id: int, lines: int = 40) -> str:
        """The node's last log lines."""
        return last_log_lines(self._node(node_id), lines)

    def wipe(self) -> None:
        """Delete all node data and logs (the cluster must be down)."""
        if any(self.process(n) for n in self.topology.nodes):
            raise KafkalabError("the cluster is running; `kafkalab down` first")
        shutil.rmtree(config.cluster_dir(), ignore_errors=True)


# ----------------------------------------------------------------------------- compose backend

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


class PreparedCluster(LocalCluster):
    """The local backend's processes, started from ``server.properties`` files prepared
    elsewhere instead of rendered from kafka/config: each node's file must already be at
    ``Node.config_path``. Storage is formatted as by LocalCluster (``kafka-storage format``)
    unless it already is. tests/test_compose_image.py boots the files the apache/kafka image's
    ``KafkaDockerWrapper`` renders from docker-compose.yml this way.
    """

    backend = "local (prepared properties)"

    def _prepare(self, node: Node) -> None:
        if not node.config_path.exists():
            raise NodeFailedToStart(f"{node.name} has no {node.config_path}: a PreparedCluster starts from given files")
        node.log_dir.mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------- choosing a backend

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


def up(controllers: int | None = None, backend: str | None = None, timeout_s: float = UP_TIMEOUT_S) -> ClusterStatus:
    """Start the cluster on ``backend`` (see ``chosen_backend``; LocalCluster.up, ComposeCluster.up)
    and remember the backend for later commands.

    Raises:
        KafkalabError: another backend's cluster still runs, or its data is in the state folder
            (``kafkalab down``, ``kafkalab wipe`` first); whatever the backend's ``up`` raises.
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
    status = c.up(controllers=controllers, timeout_s=timeout_s)
    wait_group_coordinator(c.topology.bootstrap_servers, timeout_s=timeout_s)
    balance_leaders(c.topology.bootstrap_servers, timeout_s=timeout_s)  # brokers that registered late lead nothing yet
    config.cluster_dir().mkdir(parents=True, exist_ok=True)
    _backend_file().write_text(c.backend)
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


# ----------------------------------------------------------------------------- the TLS listener


def ensure_tls_files() -> tuple[Path, Path]:
    """The TLS listener's self-signed certificate for 127.0.0.1, made once with the JDK's
    ``keytool`` in ``config.tls_dir()``: ``(keystore, certificate)``, a PKCS12 keystore for
    the brokers (``listener.name.tls.ssl.keystore.location``) and the certificate in PEM for
    librdkafka's ``ssl.ca.location`` (``config.tls_client_conf()``). Valid for 10 years.

    Raises:
        JavaMissing: no keytool beside the java executable or on PATH.
        KafkalabError: keytool failed (its message is quoted).
    """
    folder = config.tls_dir()
    store, pem = folder / config.TLS_KEYSTORE, folder / config.TLS_CERTIFICATE
    if store.exists() and pem.exists():
        return store, pem
    keytool = Path(java_executable()).with_name("keytool")
    if not keytool.exists():
        found = shutil.which("keytool")
        if not found:
            raise JavaMissing(f"keytool is missing: it comes with the JDK ({JAVA_INSTALL})")
        keytool = Path(found)
    folder.mkdir(parents=True, exist_ok=True)
    store.unlink(missing_ok=True)
    pw = config.TLS_PASSWORD
    for args in (["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
                  "-dname", "CN=127.0.0.1, O=kafkalab", "-ext", "SAN=IP:127.0.0.1,DNS:localhost",
                  "-keystore", str(store), "-storetype", "PKCS12", "-storepass", pw, "-keypass", pw],
                 ["-exportcert", "-rfc", "-alias", "broker", "-keystore", str(store), "-storepass", pw,
                  "-file", str(pem)]):
        cp = subprocess.run([str(keytool), *args], capture_output=True, text=True, timeout=120)
        if cp.returncode != 0:
            raise KafkalabError(f"keytool {args[0]} failed: {cp.stderr.strip() or cp.stdout.strip()}")
    return store, pem


# ----------------------------------------------------------------------------- Kafka's CLI tools


#: JVM options of a tool run: quick start-up (C1 only, serial GC) for the admin tools, which
#: run for a second; the full JIT and G1 for a measurement (a perf tool run with C1 only would
#: measure the missing compiler, not Kafka).
TOOL_JVM_FAST = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
TOOL_JVM_MEASURE = ["-Xmx512m"]


def tool_command(name: str, args: Sequence[str], measure: bool = False) -> list[str]:
    """The java command line for Kafka tool ``name`` (script name without .sh) with ``args``.

    Adds ``--bootstrap-server`` for this cluster if the tool takes one and none is given.
    ``measure``: the JVM options of ``TOOL_JVM_MEASURE`` instead of ``TOOL_JVM_FAST``.

    Raises:
        KafkalabError: unknown tool name (the message lists the known ones).
    """
    name = name.removesuffix(".sh")
    if name not in TOOLS:
        raise KafkalabError(f"unknown Kafka tool {name!r}; known: {', '.join(sorted(TOOLS))}")
    args = list(args)
    if name in BOOTSTRAP_TOOLS and not any(a.startswith(("--bootstrap-server", "--bootstrap-controller", "--broker-list")) for a in args):
        if "-h" not in args and "--help" not in args and "--version" not in args:
            args = ["--bootstrap-server", config.bootstrap_servers(), *args]
    java, classpath = java_executable(), broker_classpath()
    return [
        java, *(TOOL_JVM_MEASURE if measure else [*TOOL_JVM_FAST, *cds.use_flags("tool", java, classpath)]),
        f"-Dlog4j2.configurationFile={config.config_templates_dir() / 'tools-log4j2.properties'}",
        "-cp", classpath, TOOLS[name], *args,
    ]


def tool(name: str, *args: str, timeout_s: float = 120.0, check: bool = True,
         measure: bool = False) -> subprocess.CompletedProcess:
    """Run Kafka's command-line tool ``name`` (e.g. ``"kafka-topics"``, ``"--list"``) and capture it.
    ``measure``: a JVM set up for measuring (``tool_command``).

    Returns:
        CompletedProcess with text ``stdout``/``stderr``.

    Raises:
        KafkalabError: unknown tool, or (``check``) a non-zero exit, with its stderr.
    """
    cmd = tool_command(name, args, measure)
    dump, tmp = ([], None) if measure else cds.exit_dump_flags("tool", cmd[0], broker_classpath())
    cp = subprocess.run([cmd[0], *dump, *cmd[1:]], capture_output=True, text=True, timeout=timeout_s)
    if tmp is not None:
        if cp.returncode == 0:
            cds.adopt(tmp, "tool", cmd[0], broker_classpath())
        tmp.unlink(missing_ok=True)
    if check and cp.returncode != 0:
        raise KafkalabError(f"{name} {' '.join(args)} exited {cp.returncode}:\n{cp.stderr.strip() or cp.stdout.strip()}")
    return cp
