"""The cluster's shape: node ids, roles, ports, versions, and where files live.

One source of truth for the local backend (rendered ``server.properties``), the
docker-compose file (checked against it by ``tests/test_compose.py``) and every client
default in the package.

Port plan, for broker ``n`` in 1..3 and ``b = 9092 + 100 * (n - 1)``:

========  ==========  ============================================================
port      listener    use
========  ==========  ============================================================
b         CLIENT      applications (bootstrap ``127.0.0.1:9092,...:9192,...:9292``)
b + 2     INTERNAL    replication between brokers
b + 3     FAULT       bound by the broker, advertised as b + 4
b + 4     (proxy)     where the fault proxy listens and forwards to b + 3
b + 5     TLS         applications over TLS (a self-signed certificate for 127.0.0.1,
                      ``tls_dir()``): what changes when the broker cannot use sendfile
b + 6     (JMX)       the broker JVM's JMX remote port (local backend): the broker's
                      metrics, read by Kafka's ``JmxTool`` (``kafkalab.metrics``)
========  ==========  ============================================================

Controllers have node ids 101, 102, 103 and listen (CONTROLLER) on 9093, 9193, 9293.
``$KAFKALAB_PORT_BASE`` (default 9092) shifts every port: a second cluster can run beside
the first with ``KAFKALAB_PORT_BASE=19092 KAFKALAB_STATE=/some/other/folder``.
"""

from __future__ import annotations

import os
import string
from dataclasses import asdict, dataclass
from pathlib import Path

#: Apache Kafka version of the broker jars (kafka/pom.xml) and the compose image.
KAFKA_VERSION = "4.4.0"
#: PySpark version (pyproject.toml).
SPARK_VERSION = "4.3.0"

#: Cluster id shared by every node's storage (``kafka-storage format -t``); any 22-char base64 uuid.
CLUSTER_ID = "a2Fma2FsYWItY2x1c3Rlcg"

BROKER_IDS: tuple[int, ...] = (1, 2, 3)
CONTROLLER_IDS_ALL: tuple[int, ...] = (101, 102, 103)

#: Heap per JVM, MiB. 3 brokers + 1-3 controllers + a Spark driver fit in 24 GiB many times
#: over; small heaps keep start-up and GC quick on 2 cores.
BROKER_HEAP_MB = 512
CONTROLLER_HEAP_MB = 256


def repo_root() -> Path:
    """The project folder (holds ``kafka/``, ``notebooks/``), or ``$KAFKALAB_HOME``."""
    env = os.environ.get("KAFKALAB_HOME")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    """Gitignored folder for jars, node data and logs (``.kafkalab/``), or ``$KAFKALAB_STATE``."""
    env = os.environ.get("KAFKALAB_STATE")
    return Path(env).resolve() if env else repo_root() / ".kafkalab"


def jars_dir() -> Path:
    """Where ``make jars`` put the jars (``<project>/.kafkalab/jars``), or ``$KAFKALAB_JARS``.
    Independent of ``$KAFKALAB_STATE``, so a second cluster shares the fetched jars."""
    env = os.environ.get("KAFKALAB_JARS")
    return Path(env).resolve() if env else repo_root() / ".kafkalab" / "jars"


def broker_jars_dir() -> Path:
    """Where ``make jars`` put the broker's runtime classpath (kafka/pom.xml)."""
    return jars_dir() / "broker"


def spark_jars_dir() -> Path:
    """Where ``make jars`` put the Spark Kafka connector jars (kafka/spark-connector.pom.xml)."""
    return jars_dir() / "spark"


def log4j2_stderr(header: str, level: str, pattern: str, extra: str = "") -> str:
    """The text of a log4j2 properties file: the root logger at ``level`` (``error``, ``info``
    ...) on one console appender writing to stderr with layout ``pattern``; ``extra`` lines
    are appended as they are. Source: Apache Log4j 2 manual, Configuration with Properties."""
    return (f"# {header}\n"
            f"rootLogger.level = {level}\n"
            "rootLogger.appenderRef.stderr.ref = console\n"
            "appender.console.type = Console\n"
            "appender.console.name = console\n"
            "appender.console.target = SYSTEM_ERR\n"
            "appender.console.layout.type = PatternLayout\n"
            f"appender.console.layout.pattern = {pattern}\n"
            + extra)


def write_state_file(relative: str, text: str) -> Path:
    """Write ``text`` to ``state_dir()/relative`` unless the file already holds exactly it
    (atomic replace, so concurrent processes never read half a file); returns the path."""
    path = state_dir() / relative
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def port_base() -> int:
    """CLIENT port of broker 1 (default 9092); every other port follows from it (see the
    module docstring). ``$KAFKALAB_PORT_BASE`` moves the whole cluster, e.g. 19092 for a
    second cluster beside the first (with its own ``$KAFKALAB_STATE``)."""
    return int(os.environ.get("KAFKALAB_PORT_BASE", "9092"))


def cluster_dir() -> Path:
    """Per-node folders ``node-<id>/`` with ``data/``, ``logs/``, ``stdout.log`` and ``pid``."""
    return state_dir() / "cluster"


def config_templates_dir() -> Path:
    return repo_root() / "kafka" / "config"


@dataclass(frozen=True)
class Node:
    """One Kafka process: a broker (``process.roles=broker``) or a KRaft controller."""

    node_id: int
    role: str  # "broker" or "controller"

    @property
    def base_port(self) -> int:
        index = (self.node_id - 1) if self.role == "broker" else (self.node_id - 101)
        return port_base() + 100 * index

    @property
    def ports(self) -> dict[str, int]:
        """Listener name -> port this process binds (the proxy port is not bound by Kafka), and
        ``JMX``: a broker JVM's JMX remote port (no Kafka listener; the local backend binds it)."""
        if self.role == "controller":
            return {"CONTROLLER": self.base_port + 1}
        return {
            "CLIENT": self.base_port,
            "INTERNAL": self.base_port + 2,
            "FAULT": self.base_port + 3,
            "TLS": self.base_port + 5,
            "JMX": self.jmx_port,
        }

    @property
    def jmx_port(self) -> int:
        """A broker JVM's JMX remote port (RMI registry and server on one port, 127.0.0.1 only,
        no authentication: a lab on one machine), where ``kafkalab.metrics`` reads the broker's
        metrics (Kafka documentation, Operations > Monitoring)."""
        return self.base_port + 6

    @property
    def client_port(self) -> int:
        return self.base_port

    @property
    def fault_proxy_port(self) -> int:
        """Port advertised for the FAULT listener, where kafkalab.faults listens."""
        return self.base_port + 4

    @property
    def controller_port(self) -> int:
        return self.base_port + 1

    @property
    def name(self) -> str:
        return f"{self.role}-{self.node_id}"

    @property
    def dir(self) -> Path:
        return cluster_dir() / f"node-{self.node_id}"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def heap_mb(self) -> int:
        return BROKER_HEAP_MB if self.role == "broker" else CONTROLLER_HEAP_MB

    def listeners(self) -> dict[str, str]:
        """Advertised listener name -> ``host:port`` (FAULT shows the proxy port)."""
        if self.role == "controller":
            return {"CONTROLLER": f"127.0.0.1:{self.controller_port}"}
        return {
            "CLIENT": f"127.0.0.1:{self.client_port}",
            "INTERNAL": f"127.0.0.1:{self.base_port + 2}",
            "FAULT": f"127.0.0.1:{self.fault_proxy_port}",
            "TLS": f"127.0.0.1:{self.base_port + 5}",
        }


@dataclass(frozen=True)
class Topology:
    """3 brokers and 1 or 3 controllers. ``Topology.load()`` reads what ``up`` chose."""

    controllers: int = 1

    def __post_init__(self) -> None:
        if self.controllers not in (1, 3):
            raise ValueError(f"controllers must be 1 or 3, not {self.controllers!r}")

    @property
    def brokers(self) -> list[Node]:
        return [Node(i, "broker") for i in BROKER_IDS]

    @property
    def controller_nodes(self) -> list[Node]:
        return [Node(i, "controller") for i in CONTROLLER_IDS_ALL[: self.controllers]]

    @property
    def nodes(self) -> list[Node]:
        """Controllers first: that is the order to start them in."""
        return self.controller_nodes + self.brokers

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        known = ", ".join(str(n.node_id) for n in self.nodes)
        raise KeyError(f"no node {node_id} in this cluster (node ids: {known})")

    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.controller_nodes)

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292`` (the CLIENT listeners)."""
        return ",".join(f"127.0.0.1:{b.client_port}" for b in self.brokers)

    @property
    def tls_bootstrap_servers(self) -> str:
        """The TLS listeners (``127.0.0.1:9097,...``): clients with ``tls_client_conf()``."""
        return ",".join(f"127.0.0.1:{b.ports['TLS']}" for b in self.brokers)

    @property
    def fault_bootstrap_servers(self) -> str:
        """The FAULT listeners as advertised (proxy ports): clients here go through the proxy."""
        return ",".join(f"127.0.0.1:{b.fault_proxy_port}" for b in self.brokers)

    def render(self, node: Node) -> str:
        """``server.properties`` text for ``node`` from ``kafka/config/<role>.properties``."""
        template = (config_templates_dir() / f"{node.role}.properties").read_text()
        values = {
            "node_id": node.node_id,
            "quorum_voters": self.quorum_voters,
            "data_dir": node.data_dir,
            "controller_port": node.controller_port,
        }
        if node.role == "broker":
            values.update(
                client_port=node.client_port,
                internal_port=node.ports["INTERNAL"],
                fault_bind_port=node.ports["FAULT"],
                fault_proxy_port=node.fault_proxy_port,
                tls_port=node.ports["TLS"],
                tls_keystore=tls_dir() / TLS_KEYSTORE,
                tls_password=TLS_PASSWORD,
            )
        return string.Template(template).substitute(values)

    def to_json(self) -> dict:
        return asdict(self)


#: The TLS listener's keystore (PKCS12) and certificate (PEM) in ``tls_dir()``, made by
#: ``cluster.ensure_tls_files`` with the JDK's keytool; the password is a teaching value.
TLS_KEYSTORE = "broker.p12"
TLS_CERTIFICATE = "ca.pem"
TLS_PASSWORD = "kafkalab"


def tls_dir() -> Path:
    """Folder of the lab's self-signed certificate, shared by every broker: ``<state>/tls``."""
    return state_dir() / "tls"


def tls_client_conf() -> dict[str, str]:
    """librdkafka settings for a client of the TLS listeners (the lab's certificate trusted)."""
    return {"bootstrap.servers": Topology().tls_bootstrap_servers, "security.protocol": "SSL",
            "ssl.ca.location": str(tls_dir() / TLS_CERTIFICATE)}


def bootstrap_servers() -> str:
    """Bootstrap servers of the default cluster (``$KAFKALAB_BOOTSTRAP`` overrides)."""
    return os.environ.get("KAFKALAB_BOOTSTRAP", Topology().bootstrap_servers)


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text (no line continuations) -> dict; comments dropped."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out
