"""kafkalab.faults: what a dropped response cost and the rules (pure, no Kafka), then the proxy
in front of the live brokers and its command line. Frames and the Produce codec are tested in
tests/test_protocol.py."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from kafkalab.config import Topology
from click.testing import CliRunner

from kafkalab import faults, faults_cli
from kafkalab.faults import FaultProxy, Rule, RuleBook
from kafkalab.protocol import BatchInfo, PartitionResult, ProduceRequestInfo

# ----------------------------------------------------------------------------- Produce results


def test_appended_records_counts_only_partitions_answered_without_error() -> None:
    batches = (BatchInfo("a", 0, 2, -1, -1, -1, 3, False, 100), BatchInfo("a", 1, 2, -1, -1, -1, 4, False, 100))
    info = ProduceRequestInfo(None, -1, 1500, batches)
    results = [PartitionResult("a", 0, 0, 10), PartitionResult("a", 1, 7, -1)]
    assert faults._appended_records(info, results) == 3
    assert faults._appended_records(ProduceRequestInfo(None, -1, 0, ()), []) == 0


# ----------------------------------------------------------------------------- rules


def _decisions(rule: Rule, n: int) -> list[int]:
    return [i for i in range(1, n + 1) if rule.decide()]


def test_rule_every_other_request_for_a_number_of_times() -> None:
    assert _decisions(Rule("drop_response", times=3, every=2), 12) == [1, 3, 5]


def test_rule_skip_then_every_request_without_end() -> None:
    r = Rule("drop_request", skip=4)
    assert _decisions(r, 8) == [5, 6, 7, 8] and not r.exhausted and r.seen == 8 and r.applied == 4


def test_rule_times_zero_never_applies_and_is_exhausted() -> None:
    r = Rule("cut", times=0)
    assert _decisions(r, 5) == [] and r.exhausted


def test_rule_scope_by_api_broker_client_and_response() -> None:
    r = Rule("drop_response", brokers=(2,), client_id="p1")
    assert r.matches(0, 2, "p1")
    assert not r.matches(3, 2, "p1"), "another api"
    assert not r.matches(0, 1, "p1"), "another broker"
    assert not r.matches(0, 2, "p2"), "another client"
    assert not r.matches(0, 2, "p1", expects_response=False), "acks=0 gets no response to drop"
    assert Rule("drop_request").matches(0, 1, None, expects_response=False)


@pytest.mark.parametrize("kwargs", [{"action": "explode"}, {"action": "cut", "every": 0},
                                    {"action": "cut", "skip": -1}, {"action": "delay_request", "delay_ms": -5},
                                    {"action": "cut", "api": "Nope"}])
def test_rule_refuses_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(faults.KafkalabError):
        Rule(**kwargs)


def test_rule_json_round_trip_keeps_what_a_caller_sets() -> None:
    r = Rule("delay_response", api="Fetch", brokers=[1, 3], client_id="c", skip=1, every=3, times=2, delay_ms=250)
    r2 = Rule.from_json(r.to_json())
    assert (r2.action, r2.api_key, r2.brokers, r2.client_id, r2.skip, r2.every, r2.times, r2.delay_ms) == \
        ("delay_response", 1, (1, 3), "c", 1, 3, 2, 250)
    assert r2.name == r.name == "delay_response Fetch broker 1,3 client c skip 1 every 3 2x 250 ms"


def test_rulebook_first_applying_rule_wins_and_earlier_rules_count_the_request() -> None:
    book = RuleBook()
    first = book.add(Rule("drop_response", skip=1, times=1))
    second = book.add(Rule("delay_response", delay_ms=10))
    picked = [book.decide(0, 1, "c", True) for _ in range(3)]
    assert picked == [second, first, second]
    assert (first.seen, first.applied, second.seen, second.applied) == (3, 1, 2, 2)
    assert book.decide(3, 1, "c", True) is None, "no rule for Metadata: forwarded"


def test_control_commands_on_a_proxy_that_is_not_serving() -> None:
    proxy = FaultProxy()
    added = proxy._control({"op": "add", "rule": Rule("drop_response", times=2, every=2).to_json()})
    assert added["ok"] and added["rule"]["times"] == 2
    status = proxy._control({"op": "status"})
    assert [r["action"] for r in status["rules"]] == ["drop_response"]
    assert status["bootstrap_servers"] == Topology().fault_bootstrap_servers
    assert status["produce"]["lost_ack_records"] == 0 and status["stats"] == []
    assert proxy._control({"op": "clear"}) == {"ok": True} and proxy.rules.rules == []
    with pytest.raises(faults.KafkalabError, match="unknown control op"):
        proxy._control({"op": "explode"})


@pytest.mark.socket
def test_fault_cli_without_a_serving_proxy_says_how_to_start_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    r = CliRunner().invoke(faults_cli.cli_group, ["drop-acks", "2"])
    assert r.exit_code == 1 and "kafkalab fault serve" in r.output and "Traceback" not in r.output


def test_fault_cli_lists_its_commands() -> None:
    r = CliRunner().invoke(faults_cli.cli_group, ["--help"])
    assert r.exit_code == 0
    for cmd in ("serve", "drop-acks", "blackhole", "add", "cut", "clear", "status", "events", "hold", "release"):
        assert cmd in r.output


# ----------------------------------------------------------------------------- live: the proxy in front of the brokers


def _topic(partitions: int = 1) -> str:
    from kafkalab import admin, runscope

    t = f"faults-{runscope.run_id()}"
    admin.create_topics({t: partitions})
    return t


def _producer(proxy_or_servers, client_id: str, **conf):
    from confluent_kafka import Producer

    servers = proxy_or_servers if isinstance(proxy_or_servers, str) else proxy_or_servers.bootstrap_servers
    return Producer({"bootstrap.servers": servers, "client.id": client_id, "linger.ms": 0, "log_level": 0, **conf})


def _send(producer, topic: str, value: bytes, timeout_s: float = 30.0):
    reports = []
    producer.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    producer.flush(timeout_s)
    return reports[0]


def _end_offset(topic: str) -> int:
    from kafkalab import admin

    return admin.list_offsets([(topic, 0)])[(topic, 0)]


@pytest.fixture
def topic():
    from kafkalab import admin

    t = _topic()
    yield t
    admin.delete_topics([t])


@pytest.mark.cluster
def test_metadata_through_the_proxy_names_the_proxy_ports_and_traffic_is_counted(topic: str) -> None:
    from kafkalab.experiments.tour import advertised_brokers

    with FaultProxy() as proxy:
        assert advertised_brokers(proxy.bootstrap_servers) == {
            b.node_id: f"127.0.0.1:{b.fault_proxy_port}" for b in Topology().brokers}
        p = _producer(proxy, "plain")
        err, offset = _send(p, topic, b"x")
        p.close()
        assert err is None and offset == 0
        s = proxy.stats()
        assert (s["requests"], s["forwarded"], s["responses"], s["records_sent"], s["lost_ack_records"]) == (1, 1, 1, 1, 0)
        assert proxy.stats(api=None)["requests"] > s["requests"], "ApiVersions and Metadata went through the proxy too"


@pytest.mark.cluster
def test_a_dropped_response_means_the_broker_wrote_and_the_client_retried(topic: str) -> None:
    with FaultProxy() as proxy:
        rule = proxy.drop_acks(1, client_id="lost")
        p = _producer(proxy, "lost", **{"socket.timeout.ms": 1000})
        err, offset = _send(p, topic, b"once")
        p.close()
        assert err is None and offset == 1, "the retry was written after the first copy"
        # the first answer may reach the proxy after the client gave up on it (socket.timeout.ms,
        # 1 s, on a loaded machine): the proxy still reads it, and counts it when it comes
        proxy.wait_for(lambda px: px.stats()["lost_ack_records"] >= 1, timeout_s=faults.DRAIN_TIMEOUT_S,
                       what="the dropped answer to the first Produce request seen by the proxy")
        assert rule.applied == 1 and proxy.stats()["lost_ack_records"] == 1
        dropped = [e for e in proxy.events("Produce", kind="response") if e.action == "dropped"]
        assert [r["base_offset"] for r in dropped[0].results] == [0], "the broker had answered offset 0"
    assert _end_offset(topic) == 2, "the log holds the record twice"


@pytest.mark.cluster
def test_the_answer_to_a_request_its_client_left_behind_is_still_read() -> None:
    """A client that closes its connection with a request in flight (librdkafka after
    socket.timeout.ms) leaves the broker to answer it: the proxy reads that answer for its
    counters and events, and sends it nowhere."""
    node = Topology().brokers[0]
    client_id = b"left-behind"
    # ApiVersions v0 (request header v1: api key 18, version 0, correlation id, client id; empty body)
    request = struct.pack(">hhih", 18, 0, 4242, len(client_id)) + client_id
    with FaultProxy() as proxy:
        with socket.create_connection(("127.0.0.1", node.fault_proxy_port), timeout=10) as s:
            s.sendall(struct.pack(">i", len(request)) + request)
        answered = proxy.wait_for(
            lambda px: [e for e in px.events("ApiVersions", kind="response", client_id="left-behind")],
            timeout_s=faults.DRAIN_TIMEOUT_S, what="the broker's answer to the request the client left behind")
        assert [e.correlation_id for e in answered] == [4242]
        proxy.wait_for(lambda px: px.events(kind="close"), timeout_s=faults.DRAIN_TIMEOUT_S,
                       what="the proxy to close the connection once the answer was read")


@pytest.mark.cluster
def test_blackhole_swallows_produce_requests_until_the_rules_are_cleared(topic: str) -> None:
    with FaultProxy() as proxy:
        p = _producer(proxy, "bh", **{"socket.timeout.ms": 1000, "message.timeout.ms": 2500})
        p.list_topics(topic, timeout=10)
        proxy.blackhole(brokers=[1, 2, 3])
        err, _ = _send(p, topic, b"never")
        assert err is not None and err.name() == "_MSG_TIMED_OUT"
        assert proxy.stats()["dropped_requests"] >= 1 and proxy.stats()["forwarded"] == 0
        proxy.clear_rules()
        err, offset = _send(p, topic, b"now")
        p.close()
        assert err is None and offset == 0, "nothing of the swallowed request reached the log"


@pytest.mark.cluster
def test_cut_closes_the_connection_before_the_broker_sees_the_request(topic: str) -> None:
    with FaultProxy() as proxy:
        proxy.add_rule(Rule("cut", times=1))
        p = _producer(proxy, "cut")
        err, offset = _send(p, topic, b"after reconnect")
        p.close()
        s = proxy.stats()
        assert err is None and offset == 0 and s["cuts"] == 1 and s["forwarded"] == 1
        assert [e.kind for e in proxy.events("Produce")] == ["request", "request", "response"]
    assert _end_offset(topic) == 1


@pytest.mark.cluster
def test_delayed_response_delays_the_delivery_report(topic: str) -> None:
    with FaultProxy() as proxy:
        p = _producer(proxy, "slow")
        p.list_topics(topic, timeout=10)
        _send(p, topic, b"warm")
        proxy.add_rule(Rule("delay_response", times=1, delay_ms=700))
        t0 = time.monotonic()
        err, offset = _send(p, topic, b"late")
        took = time.monotonic() - t0
        p.close()
        assert err is None and offset == 1 and took >= 0.7 and proxy.stats()["delayed_responses"] == 1


@pytest.mark.cluster
def test_stop_frees_the_ports_and_a_second_proxy_is_refused_while_one_runs() -> None:
    from kafkalab.cluster import port_is_free

    proxy = FaultProxy().start()
    try:
        with pytest.raises(faults.PortInUse, match=str(Topology().node(1).fault_proxy_port)):
            FaultProxy().start()
    finally:
        proxy.stop()
    assert not proxy.running and all(port_is_free(b.fault_proxy_port) for b in Topology().brokers)
    proxy.stop()  # twice is harmless


@pytest.mark.cluster
def test_fault_serve_takes_rules_from_the_other_fault_commands(topic: str) -> None:
    from kafkalab.waiting import wait_until

    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from kafkalab.faults_cli import cli_group; cli_group(sys.argv[1:])",
         "serve", "--duration", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runner = CliRunner()
    try:
        wait_until(lambda: faults_cli.control_socket_path().exists(), timeout_s=20, what="kafkalab fault serve listening")
        r = runner.invoke(faults_cli.cli_group, ["drop-acks", "1", "--client-id", "cli"])
        assert r.exit_code == 0 and "drop_response Produce client cli every 2 1x" in r.output
        p = _producer(Topology().fault_bootstrap_servers, "cli", **{"socket.timeout.ms": 1000})
        err, offset = _send(p, topic, b"via serve")
        p.close()
        assert err is None and offset == 1
        status = runner.invoke(faults_cli.cli_group, ["status"]).output
        assert "matched 2, applied 1" in status and "lost_ack_records=1" in status
        events = runner.invoke(faults_cli.cli_group, ["events", "--last", "4"]).output
        assert "dropped" in events and "NONE offset=0" in events
        assert runner.invoke(faults_cli.cli_group, ["clear"]).output.strip() == "rules cleared"
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=20)
    assert server.returncode == 0 and "fault proxy stopped; counters:" in out
    assert not faults_cli.control_socket_path().exists()
