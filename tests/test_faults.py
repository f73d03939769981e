"""kafkalab.faults: framing, request and response parsing, and rules (pure, no Kafka), then the
proxy in front of the live brokers and its command line."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

from kafkalab.config import Topology
from click.testing import CliRunner

from kafkalab import faults
from kafkalab.faults import (
    FaultProxy,
    FrameReader,
    PartitionResult,
    ProduceRequestInfo,
    ProtocolError,
    Rule,
    RuleBook,
    encode_frame,
    parse_produce_request,
    parse_produce_response,
    parse_request_header,
    response_correlation_id,
)

# ----------------------------------------------------------------------------- captured frames

#: Produce requests captured by the proxy on this lab (frame payloads, without the size):
#: librdkafka 2.16 (confluent-kafka 2.16.1) sends Produce v10 (flexible), Kafka's Java client
#: 4.3.1 (kafka-producer-perf-test) Produce v13, which names the topic by its id (KIP-516).
LIBRDKAFKA_PLAIN_V10 = bytes.fromhex(
    "0000000a0000000200096361702d706c61696e0000ffff00007530020c6361702d7237313366303902000000004b0000000000"
    "0000000000003e00000000029c2f68a0000000000000000001a1fd4f68b8000001a1fd4f68b8ffffffffffffffffffffffffff"
    "ff0000000118000000026b0a68656c6c6f00000000")
LIBRDKAFKA_IDEMPOTENT_V10 = bytes.fromhex(
    "0000000a0000000300086361702d6964656d0000ffff00007530020c6361702d72373133663039020000000050000000000000"
    "0000000000430000000002b24268cd000000000001000001a1fd4f6a9e000001a1fd4f6a9e0000000000000fc7000000000000"
    "0000000210000000026b02610010000002026b026200000000")
JAVA_V13 = bytes.fromhex(
    "0000000d0000000500086361702d6a6176610000ffff0000753002d37631a76b7643bc88f4bd27aa5757a202000000005c0000"
    "0000000000000000004fffffffff02d95d6ee8000000000001000001a1fd4f7aa2000001a1fd4f7aac0000000000000be70000"
    "00000000000000021c0000000110595148484e454253001c00140201104550444e5345494600000000")
#: The broker's (Kafka 4.3.1) answers to the first and third.
RESPONSE_V10 = bytes.fromhex(
    "0000000200020c6361702d72373133663039020000000000000000000000000000ffffffffffffffff00000000000000000100"
    "00000000000000")
RESPONSE_V13 = bytes.fromhex(
    "000000050002d37631a76b7643bc88f4bd27aa5757a2020000000000000000000000000003ffffffffffffffff000000000000"
    "0000010000000000000000")


# ----------------------------------------------------------------------------- encoders for older versions


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _batch(pid: int = -1, epoch: int = -1, base_seq: int = -1, count: int = 1, body: bytes = b"\x00" * 9) -> bytes:
    """A record batch v2 header (61 bytes) followed by ``body`` as its records."""
    after_length = struct.pack(">ibIhiqqqhii", 0, 2, 0, 0, count - 1, 0, 0, pid, epoch, base_seq, count) + body
    return struct.pack(">qi", 0, len(after_length)) + after_length


def _produce_v3_to_v8(version: int, topics: dict[str, dict[int, bytes | None]], acks: int = -1,
                      corr: int = 7, client_id: str | None = "old") -> bytes:
    out = struct.pack(">hhi", 0, version, corr) + _string(client_id)
    out += _string(None) + struct.pack(">hi", acks, 1500) + struct.pack(">i", len(topics))
    for name, parts in topics.items():
        out += _string(name) + struct.pack(">i", len(parts))
        for p, records in parts.items():
            out += struct.pack(">i", p) + (struct.pack(">i", -1) if records is None else struct.pack(">i", len(records)) + records)
    return out


def _produce_response_v8(corr: int, results: list[tuple[str, int, int, int]]) -> bytes:
    out = struct.pack(">i", corr) + struct.pack(">i", len(results))
    for name, p, err, offset in results:
        out += _string(name) + struct.pack(">i", 1)
        out += struct.pack(">ihqqq", p, err, offset, -1, 0)
        out += struct.pack(">i", 1) + struct.pack(">i", 0) + _string("bad record")  # record_errors
        out += _string("why")  # error_message
    return out + struct.pack(">i", 0)  # throttle


# ----------------------------------------------------------------------------- framing


def test_frame_reader_reassembles_frames_split_anywhere() -> None:
    payloads = [b"a", b"", b"hello kafka", bytes(range(200))]
    stream = b"".join(encode_frame(p) for p in payloads)
    reader = FrameReader()
    got = []
    for i in range(len(stream)):  # one byte at a time: the worst TCP can do
        got.extend(reader.feed(stream[i:i + 1]))
    assert got == payloads and reader.pending_bytes == 0


def test_frame_reader_returns_every_frame_of_one_chunk_and_keeps_the_tail() -> None:
    reader = FrameReader()
    chunk = encode_frame(b"one") + encode_frame(b"two") + encode_frame(b"three")[:5]
    assert reader.feed(chunk) == [b"one", b"two"]
    assert reader.pending_bytes == 5
    assert reader.feed(encode_frame(b"three")[5:]) == [b"three"]


@pytest.mark.parametrize("size", [-1, 200])
def test_frame_reader_refuses_a_size_that_is_not_a_kafka_frame(size: int) -> None:
    with pytest.raises(ProtocolError, match="frame size"):
        FrameReader(max_frame_bytes=100).feed(struct.pack(">i", size) + b"x")


def test_encode_frame_prefixes_the_big_endian_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"


# ----------------------------------------------------------------------------- headers and Produce


def test_request_header_of_librdkafka_produce_v10() -> None:
    header, end = parse_request_header(LIBRDKAFKA_PLAIN_V10)
    assert (header.api, header.api_version, header.correlation_id, header.client_id) == ("Produce", 10, 2, "cap-plain")
    assert end == 2 + 2 + 4 + 2 + len("cap-plain") + 1  # the tagged-field count of header v2


def test_request_header_with_null_client_id_and_a_non_produce_api() -> None:
    payload = struct.pack(">hhi", 3, 12, 99) + struct.pack(">h", -1) + b"body"
    header, end = parse_request_header(payload)
    assert (header.api, header.api_version, header.correlation_id, header.client_id) == ("Metadata", 12, 99, None)
    assert end == 10


def test_produce_request_of_librdkafka_without_idempotence() -> None:
    header, info = parse_produce_request(LIBRDKAFKA_PLAIN_V10)
    assert (info.transactional_id, info.acks, info.timeout_ms) == (None, -1, 30000)
    [b] = info.batches
    assert (b.topic, b.partition, b.magic, b.record_count) == ("cap-r713f09", 0, 2, 1)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (-1, -1, -1, -1)


def test_produce_request_of_librdkafka_with_idempotence_carries_pid_and_sequences() -> None:
    _, info = parse_produce_request(LIBRDKAFKA_IDEMPOTENT_V10)
    [b] = info.batches
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.record_count, b.last_sequence) == (4039, 0, 0, 2, 1)
    assert info.record_count == 2 and not b.transactional


def test_produce_request_v13_of_the_java_client_names_the_topic_by_id() -> None:
    header, info = parse_produce_request(JAVA_V13)
    assert (header.api_version, header.client_id) == (13, "cap-java")
    [b] = info.batches
    assert b.topic == str(uuid.UUID("d37631a7-6b76-43bc-88f4-bd27aa5757a2"))
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.record_count) == (3047, 0, 0, 2)


@pytest.mark.parametrize("version", [3, 7, 8])
def test_produce_request_of_non_flexible_versions_with_two_topics(version: int) -> None:
    payload = _produce_v3_to_v8(version, {"a": {0: _batch(7, 1, 10, 3), 2: None}, "b": {1: _batch()}}, acks=1)
    header, info = parse_produce_request(payload)
    assert (header.api_version, header.client_id, info.acks, info.timeout_ms) == (version, "old", 1, 1500)
    assert [(b.topic, b.partition, b.producer_id, b.base_sequence, b.record_count) for b in info.batches] == [
        ("a", 0, 7, 10, 3), ("b", 1, -1, -1, 1)]


def test_produce_request_parser_reads_several_batches_of_one_partition() -> None:
    payload = _produce_v3_to_v8(8, {"t": {0: _batch(5, 0, 0, 2) + _batch(5, 0, 2, 4)}})
    _, info = parse_produce_request(payload)
    assert [(b.base_sequence, b.last_sequence) for b in info.batches] == [(0, 1), (2, 5)]


def test_produce_request_parser_refuses_truncated_frames_other_apis_and_old_versions() -> None:
    with pytest.raises(ProtocolError):
        parse_produce_request(LIBRDKAFKA_PLAIN_V10[:60])
    with pytest.raises(ProtocolError, match="not Produce"):
        parse_produce_request(struct.pack(">hhi", 3, 12, 1) + _string("x"))
    with pytest.raises(ProtocolError, match="v2"):
        parse_produce_request(struct.pack(">hhi", 0, 2, 1) + _string("x"))


def test_produce_response_v10_and_v13_as_kafka_4_3_sends_them() -> None:
    assert response_correlation_id(RESPONSE_V10) == 2
    assert parse_produce_response(RESPONSE_V10, 10) == [PartitionResult("cap-r713f09", 0, 0, 0)]
    [r] = parse_produce_response(RESPONSE_V13, 13)
    assert (r.topic, r.base_offset, r.error) == ("d37631a7-6b76-43bc-88f4-bd27aa5757a2", 3, "NONE")


def test_produce_response_v8_with_record_errors_and_error_names() -> None:
    payload = _produce_response_v8(11, [("t", 0, 46, 5), ("u", 3, 45, -1)])
    results = parse_produce_response(payload, 8)
    assert [(r.topic, r.partition, r.base_offset, r.error) for r in results] == [
        ("t", 0, 5, "DUPLICATE_SEQUENCE_NUMBER"), ("u", 3, -1, "OUT_OF_ORDER_SEQUENCE_NUMBER")]
    assert PartitionResult("t", 0, 999, 0).error == "error 999"


def test_appended_records_counts_only_partitions_answered_without_error() -> None:
    _, info = parse_produce_request(_produce_v3_to_v8(8, {"a": {0: _batch(count=3), 1: _batch(count=4)}}))
    results = [PartitionResult("a", 0, 0, 10), PartitionResult("a", 1, 7, -1)]
    assert faults._appended_records(info, results) == 3
    assert faults._appended_records(ProduceRequestInfo(None, -1, 0, ()), []) == 0


def test_api_names_and_keys() -> None:
    assert faults.api_key_of("produce") == 0 == faults.api_key_of("0") == faults.api_key_of(0)
    assert faults.api_name(22) == "InitProducerId" and faults.api_name(9999) == "api-9999"
    with pytest.raises(faults.KafkalabError, match="unknown Kafka api"):
        faults.api_key_of("Produse")


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


def test_fault_cli_without_a_serving_proxy_says_how_to_start_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    r = CliRunner().invoke(faults.cli_group, ["drop-acks", "2"])
    assert r.exit_code == 1 and "kafkalab fault serve" in r.output and "Traceback" not in r.output


def test_fault_cli_lists_its_commands() -> None:
    r = CliRunner().invoke(faults.cli_group, ["--help"])
    assert r.exit_code == 0
    for cmd in ("serve", "drop-acks", "blackhole", "add", "cut", "clear", "status", "events"):
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
    from confluent_kafka import Consumer, TopicPartition

    from kafkalab import config

    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": "faults-test", "log_level": 0})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


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
        assert rule.applied == 1 and proxy.stats()["lost_ack_records"] == 1
        dropped = [e for e in proxy.events("Produce", kind="response") if e.action == "dropped"]
        assert [r["base_offset"] for r in dropped[0].results] == [0], "the broker had answered offset 0"
    assert _end_offset(topic) == 2, "the log holds the record twice"


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
        [sys.executable, "-c", "import sys; from kafkalab.faults import cli_group; cli_group(sys.argv[1:])",
         "serve", "--duration", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runner = CliRunner()
    try:
        wait_until(lambda: faults.control_socket_path().exists(), timeout_s=20, what="kafkalab fault serve listening")
        r = runner.invoke(faults.cli_group, ["drop-acks", "1", "--client-id", "cli"])
        assert r.exit_code == 0 and "drop_response Produce client cli every 2 1x" in r.output
        p = _producer(Topology().fault_bootstrap_servers, "cli", **{"socket.timeout.ms": 1000})
        err, offset = _send(p, topic, b"via serve")
        p.close()
        assert err is None and offset == 1
        status = runner.invoke(faults.cli_group, ["status"]).output
        assert "matched 2, applied 1" in status and "lost_ack_records=1" in status
        events = runner.invoke(faults.cli_group, ["events", "--last", "4"]).output
        assert "dropped" in events and "NONE offset=0" in events
        assert runner.invoke(faults.cli_group, ["clear"]).output.strip() == "rules cleared"
    finally:
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=20)
    assert server.returncode == 0 and "fault proxy stopped; counters:" in out
    assert not faults.control_socket_path().exists()
