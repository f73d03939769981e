"""docker-compose.yml as the apache/kafka image configures it, with the image's own code.

No Docker engine is needed (tests/test_compose_live.py, ``make compose-smoke``, runs the file in
containers): for every service of docker-compose.yml (and of the
three-controllers override) the image's configuration step, ``kafka.docker.KafkaDockerWrapper
setup`` from the broker jar (kafka_2.13 4.3.1), runs as a small JVM with that service's
environment, prepared as the image's ``configureDefaults`` and ``configure`` scripts prepare it
(tests/compose_files.py). What it renders must equal what the local backend renders for the
same node, but for the differences named in ``DIFFERENCES``.

Then the rendered files of the one-controller cluster boot: container host names replaced by
127.0.0.1, ports moved to a port base of their own, nothing else changed, on the storage the
wrapper formatted, started by the local backend's process machinery (``PreparedCluster``).
The smoke test runs on it: every broker registered, a topic with RF 3 and a full ISR, a
produce/consume round trip, a Spark read. It is stopped with no process left.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from compose_files import (
    image_environment, listeners, nodes_with_services, published, run_wrappers,
)
from kafkalab import cluster, config, spark as kspark
from kafkalab.config import Node, Topology, parse_properties
from kafkalab.waiting import wait_until

#: Every test here runs the image's wrapper (small JVMs); the last one boots a second cluster.
pytestmark = pytest.mark.jvm

TOPOLOGIES = pytest.mark.parametrize("controllers", [1, 3], ids=["1-controller", "3-controllers"])

#: The port base and the state folder (under pytest's temp folder) of the booted cluster.
BOOT_PORT_BASE = 25092
#: Seconds the booted cluster may take to serve: four more JVMs on a machine that already runs
#: the main cluster (a timeout, not a measurement).
BOOT_TIMEOUT_S = 240.0
#: The port base docker-compose.yml is written for (config's default).
COMPOSE_PORT_BASE = 9092

#: Every property whose rendered value differs from the local backend's, and why. The image
#: adds nothing of its own: Kafka 4.3.1's wrapper keeps KAFKA_HEAP_OPTS, KAFKA_OPTS and the
#: other JVM variables out of server.properties.
DIFFERENCES = {
    "listeners": "bound on every container interface (no host): Docker delivers the published ports and "
                 "the compose network's traffic on the container's own interface, not its loopback; "
                 "local nodes bind 127.0.0.1 only",
    "advertised.listeners": "INTERNAL is advertised at the container host name broker-N, which the other "
                            "brokers resolve on the compose network (local: 127.0.0.1); CLIENT and FAULT are "
                            "the same 127.0.0.1 addresses on both backends",
    "controller.quorum.voters": "the controllers at their container host names controller-10N "
                                "(local: 127.0.0.1), same ids and ports",
    "log.dirs": "the image's data volume /var/lib/kafka/data, bind-mounted from the node's local data "
                "folder .kafkalab/cluster/node-N/data (here a test folder stands in for the mount)",
    "listener.name.tls.ssl.keystore.location": "the keystore in /etc/kafka/kafkalab-tls, bind-mounted from "
                                               ".kafkalab/tls (here a test folder stands in for the mount)",
}
#: Differences of brokers only (controllers have no TLS listener).
BROKER_ONLY = {"advertised.listeners", "listener.name.tls.ssl.keystore.location"}
#: Differences that are folders standing in for a mount, not derived values.
MOUNTED = {"log.dirs", "listener.name.tls.ssl.keystore.location"}


def container_value(key: str, local_value: str, node: Node) -> str:
    """The value the compose node should have for ``key``, derived from the local one."""
    if key == "listeners":
        return local_value.replace("://127.0.0.1:", "://:")
    if key == "advertised.listeners":
        return local_value.replace("INTERNAL://127.0.0.1:", f"INTERNAL://{node.name}:")
    if key == "controller.quorum.voters":
        return re.sub(r"(\d+)@127\.0\.0\.1:", lambda m: f"{m[1]}@controller-{m[1]}:", local_value)
    raise KeyError(key)


def boot_value(key: str, value: str, hosts: set[str]) -> str:
    """``value`` with the container host names replaced by 127.0.0.1 and the ports of
    listeners and voters moved from the compose port base to BOOT_PORT_BASE."""
    if key not in ("listeners", "advertised.listeners", "controller.quorum.voters"):
        return value
    for host in hosts:
        value = re.sub(rf"(?<=[/@]){re.escape(host)}(?=:)", "127.0.0.1", value)
    return re.sub(r":(\d+)(?=,|$)", lambda m: f":{int(m[1]) - COMPOSE_PORT_BASE + BOOT_PORT_BASE}", value)


# ----------------------------------------------------------------------------- rendering


class Rendered:
    """What the wrapper wrote for each (controllers, node id): ``props`` and the ``dir`` it
    wrote to. The one-controller cluster's storage is formatted where the booted cluster
    keeps its data (``boot_state``)."""

    def __init__(self, root: Path):
        self.root = root
        self.boot_state = root / "boot-state"
        self.dirs: dict[tuple[int, int], Path] = {}
        self.seconds = 0.0

    def props(self, controllers: int, node_id: int) -> dict[str, str]:
        return parse_properties((self.dirs[controllers, node_id] / "server.properties").read_text())


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rendered]:
    out = Rendered(tmp_path_factory.mktemp("compose-image"))
    jobs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKALAB_STATE", str(out.boot_state))
        for controllers in (1, 3):
            for node, service in nodes_with_services(controllers):
                final = out.root / f"{controllers}-controllers" / node.name / "config"
                data = node.data_dir if controllers == 1 else final.parent / "data"
                env = image_environment(service["environment"])
                assert env["KAFKA_LOG_DIRS"] == cluster.CONTAINER_DATA_DIR
                env["KAFKA_LOG_DIRS"] = str(data)  # the folder that stands in for the container's volume
                if node.role == "broker":  # and the keystore's folder, as `kafkalab up` makes it
                    store = f"{cluster.CONTAINER_TLS_DIR}/{config.TLS_KEYSTORE}"
                    assert env["KAFKA_LISTENER_NAME_TLS_SSL_KEYSTORE_LOCATION"] == store
                    env["KAFKA_LISTENER_NAME_TLS_SSL_KEYSTORE_LOCATION"] = str(cluster.ensure_tls_files()[0])
                jobs.append((env, final))
                out.dirs[controllers, node.node_id] = final
    t0 = time.monotonic()
    run_wrappers(jobs, out.root / "wrapper-classes.jsa")
    out.seconds = time.monotonic() - t0
    yield out


@TOPOLOGIES
def test_the_image_renders_the_local_properties_but_for_the_named_differences(rendered, controllers):
    for node, _ in nodes_with_services(controllers):
        image = rendered.props(controllers, node.node_id)
        local = parse_properties(Topology(controllers).render(node))
        differing = {k for k in image.keys() | local.keys() if image.get(k) != local.get(k)}
        expected = set(DIFFERENCES) - (BROKER_ONLY if node.role == "controller" else set())
        assert differing == expected, (
            f"{node.name}: the image's server.properties and the local one differ in {sorted(differing)}, "
            f"not exactly in the named differences {sorted(expected)}: "
            f"{ {k: (image.get(k), local.get(k)) for k in differing ^ expected} }"
        )
        for key in expected - MOUNTED:
            assert image[key] == container_value(key, local[key], node), (
                f"{node.name} {key}: the image renders {image[key]!r}, expected the local {local[key]!r} "
                f"with only {DIFFERENCES[key]}"
            )


def test_the_wrapper_formats_the_storage_with_the_cluster_id(rendered):
    for node, _ in nodes_with_services(1):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KAFKALAB_STATE", str(rendered.boot_state))
            meta = parse_properties((node.data_dir / "meta.properties").read_text())
        assert meta["cluster.id"] == config.CLUSTER_ID and meta["node.id"] == str(node.node_id), (
            f"{node.name}: the wrapper should format its storage with CLUSTER_ID {config.CLUSTER_ID}, not {meta}"
        )


def test_the_fault_listener_path_reaches_the_proxy_on_the_host(rendered):
    # host client -> 127.0.0.1:b+4 (fault proxy on the host, advertised) -> 127.0.0.1:b+3
    # (published host port) -> container port b+3 (the FAULT listener the broker binds)
    for node, service in nodes_with_services(1):
        if node.role != "broker":
            continue
        props = rendered.props(1, node.node_id)
        bound_host, bound_port = listeners(props["listeners"])["FAULT"]
        advertised = listeners(props["advertised.listeners"])["FAULT"]
        fault_publish = [(ip, h, c) for ip, h, c in published(service) if c == bound_port]
        assert bound_host == "" and bound_port == node.ports["FAULT"], (
            f"{node.name} should bind FAULT on every container interface at {node.ports['FAULT']}"
        )
        assert fault_publish == [("127.0.0.1", node.ports["FAULT"], node.ports["FAULT"])], (
            f"{node.name}: container port {bound_port} should be published on 127.0.0.1:{node.ports['FAULT']}, "
            "where the fault proxy (kafkalab.faults) connects"
        )
        assert advertised == ("127.0.0.1", node.fault_proxy_port), (
            f"{node.name} should advertise FAULT at the proxy, 127.0.0.1:{node.fault_proxy_port}, not {advertised}"
        )


# ----------------------------------------------------------------------------- booting


def _java_processes_under(folder: Path) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(folder) in a for a in p.info["cmdline"] or ()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.spark
def test_the_image_rendered_configuration_boots_a_working_cluster(rendered, spark, monkeypatch):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    monkeypatch.setenv("KAFKALAB_STATE", str(rendered.boot_state))
    monkeypatch.setenv("KAFKALAB_PORT_BASE", str(BOOT_PORT_BASE))
    monkeypatch.delenv("KAFKALAB_BOOTSTRAP", raising=False)
    topology = Topology(1)
    hosts = {n.name for n in topology.nodes}
    for node in topology.nodes:
        image = rendered.props(1, node.node_id)
        booted = {k: boot_value(k, v, hosts) for k, v in image.items()}
        assert booted["log.dirs"] == str(node.data_dir), "the wrapper formatted the storage the cluster boots on"
        node.config_path.write_text("".join(f"{k}={v}\n" for k, v in booted.items()))
    c = cluster.PreparedCluster(topology)
    bootstrap = topology.bootstrap_servers
    t0 = time.monotonic()
    try:
        st = c.up(timeout_s=BOOT_TIMEOUT_S)
        assert cluster.registered_brokers(bootstrap) == set(config.BROKER_IDS), "every broker registered"
        assert st.quorum_leader == 101

        topic = f"boot-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(timeout=30)

        def isr_full() -> bool:
            tm = admin.list_topics(topic, timeout=5).topics[topic]
            return len(tm.partitions) == 3 and all(len(p.isrs) == 3 and p.leader >= 0 for p in tm.partitions.values())

        wait_until(isr_full, timeout_s=30, what=f"{topic}: 3 partitions, each with a leader and 3 replicas in sync")

        sent = {f"k{i}".encode(): f"v{i}".encode() for i in range(30)}
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for k, v in sent.items():
            producer.produce(topic, key=k, value=v)
        assert producer.flush(30) == 0, "every record acknowledged by acks=all"

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got: dict[bytes, bytes] = {}
        try:
            def read_all() -> bool:
                m = consumer.poll(0.5)
                if m is not None and m.error() is None:
                    got[m.key()] = m.value()
                return len(got) == len(sent)

            wait_until(read_all, timeout_s=60, interval_s=0, what=f"the {len(sent)} records read back")
        finally:
            consumer.close()
        assert got == sent, "the round trip returns what was produced"

        rows = kspark.read_topic(spark, topic, bootstrap_servers=bootstrap).selectExpr(
            "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
        assert {r.k.encode(): r.v.encode() for r in rows} == sent and len(rows) == len(sent), (
            "Spark reads exactly the produced records from the booted cluster"
        )
        del admin, producer
    finally:
        c.down()
        print(f"wrapper renders: {rendered.seconds:.1f} s; boot, smoke test and down: {time.monotonic() - t0:.1f} s")
    assert all(c.process(n) is None for n in topology.nodes)
    assert _java_processes_under(rendered.boot_state) == [], "no process of the booted cluster is left"
