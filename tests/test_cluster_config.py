"""Pure checks of the cluster's configuration, tool table and error paths (no cluster needed)."""

from __future__ import annotations

import socket
import time
import zipfile

import pytest

from kafkalab import cluster, config
from kafkalab.config import Node, Topology, parse_properties
from kafkalab.errors import JarsMissing, JavaMissing, KafkalabError, PortInUse


def _classes_in_broker_jars() -> set[str]:
    names: set[str] = set()
    for jar in config.broker_jars_dir().glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            names.update(n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class"))
    return names


@pytest.mark.jvm  # reads the broker jars, which Maven fetches (make jars): not in make check
def test_every_tool_script_name_maps_to_a_class_in_the_broker_jars() -> None:
    classes = _classes_in_broker_jars()
    missing = {name: cls for name, cls in cluster.TOOLS.items() if cls not in classes}
    assert not missing, f"tool main classes not in Kafka {config.KAFKA_VERSION} jars: {missing}"
    assert "kafka.Kafka" in classes, "the broker main class is in kafka_2.13"


def test_broker_config_has_the_teaching_defaults_and_four_listeners(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKALAB_PORT_BASE", raising=False)
    topo = Topology()
    props = parse_properties(topo.render(topo.node(2)))
    assert props["process.roles"] == "broker"
    assert props["node.id"] == "2"
    assert props["listeners"] == \
        "CLIENT://127.0.0.1:9192,INTERNAL://127.0.0.1:9194,FAULT://127.0.0.1:9195,TLS://127.0.0.1:9197"
    assert "FAULT://127.0.0.1:9196" in props["advertised.listeners"], "FAULT is advertised at the proxy port"
    assert "TLS:SSL" in props["listener.security.protocol.map"], "the TLS listener speaks TLS"
    assert props["listener.name.tls.ssl.keystore.location"].endswith("tls/broker.p12")
    assert props["inter.broker.listener.name"] == "INTERNAL"
    assert props["min.insync.replicas"] == "2"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["controller.quorum.voters"] == "101@127.0.0.1:9093"


def test_controllers_are_a_separate_quorum_and_apply_topic_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKALAB_PORT_BASE", raising=False)
    topo = Topology(controllers=3)
    props = parse_properties(topo.render(topo.node(103)))
    assert props["process.roles"] == "controller"
    assert props["controller.quorum.voters"] == "101@127.0.0.1:9093,102@127.0.0.1:9193,103@127.0.0.1:9293"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert [n.node_id for n in topo.nodes] == [101, 102, 103, 1, 2, 3], "controllers start first"


def test_only_one_or_three_controllers() -> None:
    with pytest.raises(ValueError, match="1 or 3"):
        Topology(controllers=2)


def test_ports_do_not_collide() -> None:
    ports = [p for n in Topology(controllers=3).nodes for p in n.ports.values()]
    ports += [b.fault_proxy_port for b in Topology().brokers]
    assert len(ports) == len(set(ports))


def test_unknown_node_id_names_the_known_ones() -> None:
    with pytest.raises(KafkalabError, match=r"no node 7 .*101, 1, 2, 3"):
        cluster.LocalCluster(Topology())._node(7)


@pytest.mark.socket
def test_port_in_use_names_the_port_the_listener_and_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setattr(Node, "ports", property(lambda self: {"CLIENT": port}))
        with pytest.raises(PortInUse) as e:
            cluster.check_ports_free(Node(1, "broker"))
    msg = str(e.value)
    assert f"port {port} (CLIENT listener of broker-1)" in msg
    assert "python" in msg.lower(), f"the owner process is named: {msg}"


def test_java_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(JavaMissing, match="Java 17"):
        cluster.java_executable()


def test_port_base_moves_every_port_for_a_second_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAB_PORT_BASE", "19092")
    topo = Topology()
    assert topo.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292"
    assert topo.quorum_voters == "101@127.0.0.1:19093"
    assert topo.node(3).fault_proxy_port == 19296


def test_missing_jars_point_at_make_jars(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("KAFKALAB_JARS", str(tmp_path))
    with pytest.raises(JarsMissing, match="make jars"):
        cluster.broker_classpath()


@pytest.mark.jvm
def test_tool_adds_this_clusters_bootstrap_server_unless_given() -> None:
    cmd = cluster.tool_command("kafka-topics", ["--list"])
    assert cmd[-3:] == ["--bootstrap-server", config.bootstrap_servers(), "--list"]
    cmd = cluster.tool_command("kafka-topics.sh", ["--bootstrap-server", "x:1", "--list"])
    assert cmd.count("--bootstrap-server") == 1
    assert "--bootstrap-server" not in cluster.tool_command("kafka-dump-log", ["--files", "x.log"])


def test_unknown_tool_lists_the_known_ones() -> None:
    with pytest.raises(KafkalabError, match="kafka-topics"):
        cluster.tool_command("kafka-nope", [])


def test_a_node_that_dies_while_starting_is_reported_with_its_last_log_lines(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    node = Node(2, "broker")
    node.dir.mkdir(parents=True)
    (node.dir / "pid").write_text("999999999")  # no such process: it "exited"
    (node.dir / "stdout.log").write_text("starting\nERROR Exiting Kafka due to fatal exception (kafka.Kafka$)\n")
    t0 = time.monotonic()
    with pytest.raises(cluster.NodeFailedToStart) as e:
        cluster.LocalCluster(Topology())._wait_serving([node], timeout_s=30)
    assert time.monotonic() - t0 < 5, "a dead process fails the wait at once, not at its timeout"
    assert "broker-2 exited while starting" in str(e.value)
    assert "Exiting Kafka due to fatal exception" in str(e.value)


def test_feature_levels_reads_kafka_features_describe() -> None:
    text = ("Feature: eligible.leader.replicas.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
            "FinalizedVersionLevel: 1\tEpoch: 5\n"
            "Feature: share.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1\tEpoch: 5\n"
            "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.3-IV0\t"
            "FinalizedVersionLevel: 29\tEpoch: 5\n")
    assert cluster.feature_levels(text) == {"eligible.leader.replicas.version": 1, "share.version": 1,
                                            "metadata.version": 29}


def test_stale_features_say_what_to_do_on_data_an_older_kafka_formatted() -> None:
    """A 4.3.1 state folder keeps share.version 1 under 4.4.0 binaries (measured: kafkalab up on
    it serves, with metadata.version 4.3-IV0 and share.version 1); a fresh 4.4.0 format has 2."""
    assert cluster.stale_features({"share.version": 2, "metadata.version": 4}) is None
    msg = cluster.stale_features({"share.version": 1})
    assert msg and f"share.version 1 (Kafka {config.KAFKA_VERSION} formats 2)" in msg
    assert "kafkalab down && kafkalab wipe --yes && kafkalab up" in msg
    assert f"kafka-features upgrade --release-version {cluster.RELEASE_VERSION}" in msg
    assert "share.version 0" in cluster.stale_features({})
