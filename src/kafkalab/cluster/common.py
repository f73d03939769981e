"""What both backends share: the status types, the checks before a start (java, jars, ports),
the questions asked of the running brokers (registration, metadata, coordinators, ISRs, leaders,
feature levels), the TLS listener's certificate, and Kafka's command-line tools run from the jars.

Sources: Kafka protocol Metadata and DescribeCluster; bin/kafka-run-class.sh at tag 4.3.1.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import psutil

from .. import cds, config, protocol
from ..config import KAFKA_VERSION, Node
from ..errors import JAVA_INSTALL, JarsMissing, JavaMissing, KafkalabError, PortInUse
from ..waiting import wait_until

#: JVM flags of the lab's controllers and brokers (both backends: docker-compose.yml sets the same
#: as KAFKA_JVM_PERFORMANCE_OPTS): the C1 compiler only and the serial collector, for a cluster of
#: four JVMs on a laptop whose notebooks kill and restart brokers. Measured on a 2-core machine
#: (benchmarks/README.md, "Broker JVM flags"): against Kafka's flags (bin/kafka-run-class.sh: G1,
#: MaxGCPauseMillis=20, InitiatingHeapOccupancyPercent=35, ExplicitGCInvokesConcurrent),
#: `kafkalab up` took 16.2 instead of 28.4 CPU-seconds (11.3 instead of 15.9 s), and notebooks 08
#: and 00 run together 82 instead of 119 CPU-seconds of the whole machine. The price is peak
#: speed: C2's code is faster once warm, so notebook 10's records/s are a C1 broker's. Its claims
#: compare settings measured in one run, so they hold under either. Kafka's semantics do not
#: depend on the JIT or the collector.
JVM_PERFORMANCE_OPTS = [
    "-server",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Djava.awt.headless=true",
]

#: Script name (as in Kafka's bin/) -> main class, Kafka 4.4. Checked against the jars by
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
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",  # kafka.admin.ConfigCommand (core) up to 4.3
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

def jmx_flags(port: int) -> list[str]:
    """The JVM flags that open a broker's JMX remote port (``Node.jmx_port``), as
    ``bin/kafka-run-class.sh`` does with ``JMX_PORT`` (its ``KAFKA_JMX_OPTS``: no authentication,
    no TLS), bound to 127.0.0.1 only, with the RMI server on the same port so one port is enough.
    Kafka's ``JmxTool`` reads it at ``service:jmx:rmi:///jndi/rmi://127.0.0.1:PORT/jmxrmi``.

    The JDK's agent also starts its *local* connector (for ``jcmd`` and attach-based tools) on an
    ephemeral port bound to every interface; its socket factory
    (``sun.management.jmxremote.LocalRMIServerSocketFactory``) closes each connection from an
    address that is not this host's. Measured here: one such ``*:<ephemeral>`` listener per broker,
    none without these flags."""
    return [
        "-Dcom.sun.management.jmxremote",
        f"-Dcom.sun.management.jmxremote.port={port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={port}",
        "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1",
        "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcom.sun.management.jmxremote.ssl=false",
        "-Dcom.sun.management.jmxremote.local.only=true",
    ]


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
    if tmp is not None and cp.returncode == 0:
        cds.adopt(tmp, "tool", cmd[0], broker_classpath())  # moves it into place or deletes it
    elif tmp is not None:
        tmp.unlink(missing_ok=True)
    if check and cp.returncode != 0:
        raise KafkalabError(f"{name} {' '.join(args)} exited {cp.returncode}:\n{cp.stderr.strip() or cp.stdout.strip()}")
    return cp
