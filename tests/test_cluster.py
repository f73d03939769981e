"""The live local cluster: idempotent up, status, faults by signal, Kafka's own tools.

These tests break the cluster on purpose and restore it (all brokers up, ISR full) before
they finish, even when they fail.
"""

from __future__ import annotations

import pytest

import psutil

from kafkalab import admin, cds, cluster, config, protocol, runscope
from kafkalab.cluster import registered_brokers
from kafkalab.waiting import wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def local() -> cluster.LocalCluster:
    c = cluster.cluster()
    if c.backend != "local":
        pytest.skip("fault tests drive the local backend")
    runscope.require_whole_cluster()
    yield c
    cluster.restore()


@pytest.fixture
def topic() -> str:
    name = f"test-{runscope.run_id()}"
    admin.create_topics({name: 3})
    yield name
    admin.delete_topics([name])


def test_up_is_idempotent_and_keeps_the_running_processes(local: cluster.LocalCluster) -> None:
    before = {i: n.pid for i, n in local.status().brokers.items()}
    st = local.up()
    assert {i: n.pid for i, n in st.brokers.items()} == before
    assert st.quorum_leader == 101, "the only controller leads the metadata quorum"
    assert registered_brokers() == {1, 2, 3}


def test_up_returns_once_every_group_has_a_coordinator(local: cluster.LocalCluster) -> None:
    """``up`` waits for ``__consumer_offsets`` (created by the first FindCoordinator), so no
    AdminClient group request runs while the coordinator is unavailable: librdkafka 2.16.0
    aborts the process then (``cluster.wait_group_coordinator``)."""
    cluster.up()
    tm = cluster._admin(config.bootstrap_servers()).list_topics("__consumer_offsets", timeout=5).topics["__consumer_offsets"]
    assert tm.error is None and len(tm.partitions) == 10, "offsets.topic.num.partitions=10 (kafka/config/broker.properties)"
    assert all(p.leader >= 0 and len(p.isrs) == len(p.replicas) == 3 for p in tm.partitions.values())


def test_status_json_lists_brokers_and_controllers(local: cluster.LocalCluster) -> None:
    d = local.status().to_json()
    assert set(d["brokers"]) == {"1", "2", "3"} and set(d["controllers"]) == {"101"}
    b1 = d["brokers"]["1"]
    base = config.port_base()
    assert b1["alive"] and b1["pid"] and b1["listeners"]["CLIENT"] == f"127.0.0.1:{base}"
    assert d["bootstrap_servers"] == f"127.0.0.1:{base},127.0.0.1:{base + 100},127.0.0.1:{base + 200}"
    assert d["kafka_version"] == config.KAFKA_VERSION


def test_killed_broker_is_fenced_and_comes_back_with_start(local: cluster.LocalCluster, topic: str) -> None:
    try:
        local.kill(3)
        assert not local.status().brokers[3].alive
        wait_until(lambda: 3 not in registered_brokers(), timeout_s=40,
                   what="the controller to fence killed broker 3 (broker.session.timeout.ms=6000)")
        local.start(3)
        assert 3 in registered_brokers()
    finally:
        cluster.restore()
    assert not [p for p in cluster.under_replicated() if p[0] == topic]


def test_start_right_after_a_kill_waits_for_the_new_process(local: cluster.LocalCluster) -> None:
    log_path = local.topology.node(3).log_dir / "server.log"
    try:
        old_pid = local.status().brokers[3].pid
        local.kill(3)
        mark = log_path.stat().st_size
        st = local.start(3)  # broker 3 is still registered (not fenced yet) at this point
        assert st.alive and st.pid != old_pid
        with open(log_path, "rb") as f:
            f.seek(mark)
            assert b"Kafka Server started" in f.read(), "start returned only once the new process had started"
        assert 3 in registered_brokers()
        archive = cds.use_flags("node", cluster.java_executable(), cluster.broker_classpath())
        assert archive, "the cluster's first start left a class archive (kafkalab.cds, jcmd VM.cds dynamic_dump)"
        assert archive[0] in psutil.Process(st.pid).cmdline(), "a restarted broker maps it"
    finally:
        cluster.restore()


def test_paused_broker_is_alive_but_drops_out_of_the_isr(local: cluster.LocalCluster, topic: str) -> None:
    try:
        local.pause(2)
        st = local.status().brokers[2]
        assert st.alive and st.paused, "SIGSTOP keeps the process: alive but silent"
        wait_until(lambda: 2 not in registered_brokers(), timeout_s=40,
                   what="the controller to fence paused broker 2 (no heartbeats)")
        local.resume(2)
        assert not local.status().brokers[2].paused
    finally:
        cluster.restore()


def test_stopped_broker_shuts_down_cleanly_and_restarts(local: cluster.LocalCluster) -> None:
    log_path = local.topology.node(1).log_dir / "server.log"
    mark = log_path.stat().st_size
    try:
        local.stop(1)
        assert not local.status().brokers[1].alive
        with open(log_path, "rb") as f:
            f.seek(mark)
            written_while_stopping = f.read().decode(errors="replace")
        assert "[BrokerServer id=1] shut down completed" in written_while_stopping, \
            "SIGTERM runs the controlled shutdown to its end"
        local.start(1)
    finally:
        cluster.restore()
    assert registered_brokers() == {1, 2, 3}


def test_kafka_topics_tool_sees_a_topic_created_with_confluent_kafka(local: cluster.LocalCluster, topic: str) -> None:
    out = cluster.tool("kafka-topics", "--describe", "--topic", topic).stdout
    assert f"Topic: {topic}" in out and "ReplicationFactor: 3" in out
    assert out.count("Isr:") == 3
    archive = cds.use_flags("tool", cluster.java_executable(), cluster.broker_classpath())
    assert archive, "a tool run leaves a class archive for the next ones (kafkalab.cds)"
    assert archive[0] in cluster.tool_command("kafka-topics", ["--list"])


def test_watermarks_of_a_topic_created_a_moment_ago_and_of_a_partition_that_does_not_exist(
        local: cluster.LocalCluster, topic: str) -> None:
    from confluent_kafka import Consumer

    from kafkalab import config, consumers, workloads
    from kafkalab.errors import WaitTimeout

    workloads.produce(topic, [(None, b"a", 1, None), (None, b"b", 1, None)])
    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": f"{topic}-wm", "log_level": 0})
    try:
        assert consumers.watermarks(c, topic, 0) == (0, 0)
        assert consumers.watermarks(c, topic, 1) == (0, 2)
        with pytest.raises(WaitTimeout, match="_UNKNOWN_PARTITION"):
            consumers.watermarks(c, topic, 7, timeout_s=1.0)
    finally:
        c.close()


def test_every_broker_knows_a_topic_once_create_topics_returns_and_none_once_delete_topics_does(
        local: cluster.LocalCluster) -> None:
    name = f"test-{runscope.run_id()}-md"
    admin.create_topics({name: 2})
    try:
        md = admin.admin().list_topics(timeout=5)
        answers = {b.id: admin.broker_topics(b.host, b.port, [name, f"{name}-never"]) for b in md.brokers.values()}
        assert sorted(answers) == [1, 2, 3]
        for seen in answers.values():
            assert seen[name].error_code == 0 and len(seen[name].leaders) == 2 and min(seen[name].leaders.values()) >= 1
            assert seen[f"{name}-never"].error_code == protocol.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        admin.delete_topics([name])
    for b in admin.admin().list_topics(timeout=5).brokers.values():
        assert admin.broker_topics(b.host, b.port, [name])[name].error_code == protocol.UNKNOWN_TOPIC_OR_PARTITION


def test_balance_leaders_moves_leadership_back_to_the_preferred_replica(local: cluster.LocalCluster) -> None:
    import json
    import tempfile

    from kafkalab import coordinators

    with runscope.RunScope("balance") as run:
        topic = run.topic("t")
        admin.create_topics({topic: 1})
        leader = coordinators.partition_leader(topic, 0)
        others = [b for b in config.BROKER_IDS if b != leader]
        # put another broker first in the replica list: the leader stays, no longer the preferred replica
        plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [others[0], leader, others[1]]}]}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(plan, f)
        cluster.tool("kafka-reassign-partitions", "--reassignment-json-file", f.name, "--execute")
        wait_until(lambda: (topic, 0) in cluster.unbalanced_leaders(), timeout_s=30,
                   what=f"{topic}-0 preferring broker {others[0]} while {leader} still leads")
        moved = cluster.balance_leaders()
        assert (topic, 0) in moved
        # the election is done when balance_leaders returns; the metadata a broker answers with
        # may trail it by a moment (a clean-clone run on a loaded machine still saw the old leader)
        wait_until(lambda: coordinators.partition_leader(topic, 0) == others[0], timeout_s=15,
                   what=f"broker {others[0]} leading {topic}-0 in the metadata")
        assert (topic, 0) not in cluster.unbalanced_leaders()
