"""kafkalab.experiments.tour (notebook 00): parsers and tables on captured samples, and the
Spark-free tour on the live cluster."""

from __future__ import annotations

from collections import Counter

import pytest

from kafkalab import workloads
from kafkalab.cluster import ClusterStatus, NodeStatus
from kafkalab.errors import KafkalabError
from kafkalab.experiments import tour

#: Captured from ``kafka-metadata-quorum describe --status`` on this lab (Kafka 4.3.1; one
#: static voter, so it has no directoryId; brokers are observers).
QUORUM_4_3 = """\
ClusterId:              a2Fma2FsYWItY2x1c3Rlcg
LeaderId:               101
LeaderEpoch:            1
HighWatermark:          1400
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   0
CurrentVoters:          [{"id": 101, "endpoints": ["CONTROLLER://127.0.0.1:9093"]}]
CurrentObservers:       [{"id": 1, "directoryId": "pUproUF2TpDMGzm-5MsCIQ"}, {"id": 2, "directoryId": "YzTZvDx9pCBsRYCTZHy92g"}, {"id": 3, "directoryId": "6BelVf_cRTAFqEXo1PezYw"}]
"""

#: The older format (plain id lists), as in the Kafka 3.x documentation, Operations > KRaft.
QUORUM_3_X = """\
ClusterId:              fMCL8kv1SWm87L_Md-I2hg
LeaderId:               3002
LeaderEpoch:            2
HighWatermark:          10
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   -1
CurrentVoters:          [3000,3001,3002]
CurrentObservers:       [0,1,2]
"""


def test_parse_quorum_status_of_kafka_4_3() -> None:
    q = tour.parse_quorum_status(QUORUM_4_3)
    assert (q.cluster_id, q.leader_id, q.leader_epoch, q.high_watermark) == ("a2Fma2FsYWItY2x1c3Rlcg", 101, 1, 1400)
    assert q.voters == [101] and q.observers == [1, 2, 3]
    assert (q.max_follower_lag, q.max_follower_lag_time_ms) == (0, 0)


def test_parse_quorum_status_of_the_older_id_list_format() -> None:
    q = tour.parse_quorum_status(QUORUM_3_X)
    assert q.leader_id == 3002 and q.voters == [3000, 3001, 3002] and q.observers == [0, 1, 2]
    assert q.max_follower_lag_time_ms == -1


def test_parse_quorum_status_names_a_missing_field() -> None:
    with pytest.raises(ValueError, match="LeaderId"):
        tour.parse_quorum_status("ClusterId: x\n")


def _status() -> ClusterStatus:
    def node(i: int, role: str, listeners: dict[str, str]) -> NodeStatus:
        return NodeStatus(i, role, 1000 + i, True, False, listeners, f"/n{i}/logs", f"/n{i}/data")

    brokers = {i: node(i, "broker", {"CLIENT": f"127.0.0.1:{9092 + 100 * (i - 1)}",
                                     "INTERNAL": f"127.0.0.1:{9094 + 100 * (i - 1)}",
                                     "FAULT": f"127.0.0.1:{9096 + 100 * (i - 1)}"}) for i in (1, 2, 3)}
    return ClusterStatus("local", "4.3.1", "127.0.0.1:9092", brokers,
                         {101: node(101, "controller", {"CONTROLLER": "127.0.0.1:9093"})}, 101)


def test_nodes_table_lists_controllers_first_and_marks_the_quorum_leader() -> None:
    df = tour.nodes_table(_status())
    assert list(df.index) == [101, 1, 2, 3]
    assert df.loc[101, "quorum leader"] and not df.loc[1, "quorum leader"]
    assert df.loc[2, "FAULT advertised"] == "127.0.0.1:9196" and df.loc[2, "FAULT bound"] == "127.0.0.1:9195"
    assert df.loc[101, "CONTROLLER"] == "127.0.0.1:9093" and df.loc[101, "CLIENT"] == ""


def test_aircraft_flights_takes_whole_aircraft_that_fly_more_than_once() -> None:
    from kafkalab.data import flights

    every = flights()
    chosen = tour.aircraft_flights(every, 200)
    per_key = Counter(f.key for f in chosen)
    assert len(chosen) >= 200 and min(per_key.values()) >= 2
    all_per_key = Counter(f.key for f in every)
    assert all(per_key[k] == all_per_key[k] for k in per_key), "an aircraft comes with all its flights"
    positions = [every.index(f) for f in chosen]
    assert positions == sorted(positions), "file order is kept"
    with pytest.raises(KafkalabError):
        tour.aircraft_flights(every[:10], 5)


def test_key_partitions_order_and_counts() -> None:
    d = [tour.Delivery("f1", "A", 0, 5), tour.Delivery("f2", "B", 1, 0), tour.Delivery("f0", "A", 0, 2)]
    assert tour.key_partitions(d) == {"A": {0}, "B": {1}}
    assert tour.order_by_key(d) == {"A": ["f0", "f1"], "B": ["f2"]}
    assert tour.per_partition(d) == {0: 2, 1: 1}


def test_partitioner_table_predicts_both_clients() -> None:
    df = tour.partitioner_table(["foobar"], 10, {"foobar": {4}}, {"foobar": {6}})
    row = df.loc["foobar"]
    assert row["murmur2 predicts"] == 6  # toPositive(-790332482) % 10
    assert row["librdkafka wrote to"] == [4] and row["Java wrote to"] == [6]


def test_the_notebooks_programs_are_found_and_set_what_the_lessons_say() -> None:
    from kafkalab import programs

    producer = programs.from_notebook(tour.NOTEBOOK, "flight_producer")
    reader = programs.from_notebook(tour.NOTEBOOK, "flight_reader")
    unkeyed = programs.from_notebook(tour.NOTEBOOK, "unkeyed_producer")
    assert "Producer(lab.conf)" in producer.source and "key=key" in producer.source, \
        "the keyed producer sets nothing: librdkafka's defaults"
    assert '"sticky.partitioning.linger.ms": 0' in unkeyed.source and "key=" not in unkeyed.source
    assert '"auto.offset.reset": "earliest"' in reader.source and "consumer.close()" in reader.source
    # the exercise's edit applies to the program as shown
    assert "murmur2_random" in producer.replace("Producer(lab.conf)",
                                                'Producer(lab.conf | {"partitioner": "murmur2_random"})').source


def test_record_id_of_a_flight_value() -> None:
    from kafkalab.data import flights

    f = flights()[0]
    assert tour._record_id(f.to_json().decode()) == f.record_id
    with pytest.raises(KafkalabError):
        tour._record_id(None)


def test_listener_ports_come_from_the_topology_and_the_figure_draws_each() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from kafkalab.config import Topology
    from kafkalab.experiments import tour_plots

    topo = Topology(controllers=3)
    ports = tour_plots.listener_ports(topo)
    by = {(p.node, p.listener): p.port for p in ports if p.node != "proxy"}
    for b in topo.brokers:
        assert {by[(b.node_id, name)] for name in ("CLIENT", "TLS", "FAULT", "INTERNAL")} == \
            {b.ports[name] for name in ("CLIENT", "TLS", "FAULT", "INTERNAL")}
    assert sorted(p.port for p in ports if p.node == "proxy") == sorted(b.fault_proxy_port for b in topo.brokers)
    assert sorted(p.port for p in ports if p.listener == "CONTROLLER") == sorted(c.controller_port
                                                                                 for c in topo.controller_nodes)
    fig = tour_plots.listeners_figure(topo)
    text = " ".join(t.get_text() for t in fig.axes[0].texts)
    for p in ports:
        assert str(p.port) in text, f"the figure shows port {p.port} ({p.node} {p.listener})"
    assert "fault proxy" in text and "controller 103" in text


# ----------------------------------------------------------------------------- live cluster


@pytest.mark.cluster
def test_run_tour_on_the_live_cluster_confirms_the_notebooks_claims() -> None:
    r = tour.run_tour(n_flights=120)
    assert r.voters == [101] and r.quorum_leader == 101 and r.observers == [1, 2, 3]
    assert all(len(p.replicas) == 3 and sorted(p.isr) == sorted(p.replicas) for p in r.partitions)
    assert r.produced == r.consumed >= 120 and r.each_record_once and r.keys < r.produced
    assert r.one_partition_per_key and r.crc32_predicts_librdkafka and r.keys_where_murmur2_differs > 0
    assert all(len(set(sizes.values())) == 1 for sizes in r.log_sizes.values())
    assert r.librdkafka_producer_ids == [-1], "librdkafka is not idempotent by default"
    assert r.topic not in workloads.admin().list_topics(timeout=5).topics, "run_tour deletes its topic"


@pytest.mark.cluster
def test_metadata_lists_brokers_on_the_listener_the_client_came_through() -> None:
    from kafkalab.config import Topology
    from kafkalab.faults import FaultProxy

    brokers = Topology().brokers
    via_client = tour.advertised_brokers(Topology().bootstrap_servers)
    # A pass-through proxy answers at the advertised proxy ports: once librdkafka has the
    # metadata it drops the bootstrap connection and may send the request there instead.
    with FaultProxy():
        via_fault = tour.advertised_brokers(f"127.0.0.1:{brokers[0].ports['FAULT']}")
    assert via_client == {b.node_id: f"127.0.0.1:{b.client_port}" for b in brokers}
    assert via_fault == {b.node_id: f"127.0.0.1:{b.fault_proxy_port}" for b in brokers}


@pytest.mark.cluster
def test_editing_the_shown_producer_to_murmur2_random_moves_keys_to_where_java_puts_them() -> None:
    from kafkalab import admin, defaults, programs, runscope
    from kafkalab.data import flights as load_flights

    shown = programs.from_notebook(tour.NOTEBOOK, "flight_producer")
    edited = shown.replace("Producer(lab.conf)", 'Producer(lab.conf | {"partitioner": "murmur2_random"})',
                           name="murmur_producer")
    fl = tour.aircraft_flights(load_flights(), 60)
    with runscope.RunScope("tour-edit") as run:
        t_shown, t_edited = run.topic("shown"), run.topic("edited")
        admin.create_topics({t_shown: 3, t_edited: 3}, replication_factor=-1)
        before = tour.key_partitions(tour.produce_flights(shown, t_shown, fl))
        after = tour.key_partitions(tour.produce_flights(edited, t_edited, fl))
    assert all(ps == {defaults.librdkafka_partition(k.encode(), 3)} for k, ps in before.items()), \
        "as shown, the producer puts each key at CRC32(key) % 3"
    assert all(ps == {defaults.java_partition(k.encode(), 3)} for k, ps in after.items()), \
        "edited to murmur2_random, it puts each key at murmur2(key) % 3, as the Java client does"
    assert any(before[k] != after[k] for k in before), "the edit changed where some keys go"
