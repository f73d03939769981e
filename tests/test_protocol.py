"""kafkalab.protocol: varints, frames, request and response headers, the Produce request and
response (on frames captured on this lab and on frames built here for older versions), and the
record batch v2 header. Pure: no Kafka."""

from __future__ import annotations

import struct
import uuid

import pytest

from kafkalab import protocol
from kafkalab.errors import KafkalabError
from kafkalab.protocol import (
    BATCH_HEADER_SIZE,
    FrameReader,
    PartitionResult,
    ProtocolError,
    encode_frame,
    encode_uvarint,
    encode_varint,
    parse_produce_request,
    parse_produce_response,
    parse_record_batches,
    parse_request_header,
    read_batch_header,
    read_uvarint,
    read_varint,
    response_correlation_id,
)

# ----------------------------------------------------------------------------- varints


@pytest.mark.parametrize("value, encoded", [
    (0, b"\x00"), (1, b"\x02"), (-1, b"\x01"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
    (300, b"\xd8\x04"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_signed_varints_are_zigzag_as_kafkas_byteutils_writes_them(value: int, encoded: bytes) -> None:
    # zigzag: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ...; 7 bits a byte, low group first (ByteUtils.writeVarint)
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert read_varint(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded)), "reads at a position, stops at the end"


def test_unsigned_varints_and_the_limits_of_the_decoder() -> None:
    assert read_uvarint(b"\x96\x01") == (150, 2)
    for v in (0, 127, 128, 16383, 16384, 2**35, 2**63 - 1):
        assert read_uvarint(encode_uvarint(v)) == (v, len(encode_uvarint(v)))
    assert read_varint(encode_varint(-(2**63))) == (-(2**63), 10), "a varlong takes up to 10 bytes"
    with pytest.raises(ProtocolError, match="longer than 10"):
        read_uvarint(b"\x80" * 10 + b"\x01")
    with pytest.raises(ProtocolError, match="past the end"):
        read_uvarint(b"\x80\x80")
    with pytest.raises(ValueError):
        encode_uvarint(-1)


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


def test_api_names_and_keys() -> None:
    assert protocol.api_key_of("produce") == 0 == protocol.api_key_of("0") == protocol.api_key_of(0)
    assert protocol.api_name(22) == "InitProducerId" and protocol.api_name(9999) == "api-9999"
    with pytest.raises(KafkalabError, match="unknown Kafka api"):
        protocol.api_key_of("Produse")


# ----------------------------------------------------------------------------- record batch header


def test_batch_header_reads_the_61_documented_bytes_at_a_position() -> None:
    assert BATCH_HEADER_SIZE == 61
    batch = struct.pack(">qiibIhiqqqhii", 100, 61 - 12, 3, 2, 0xCAFEBABE, 0x10, 4, 1000, 1004, 77, 2, 9, 5)
    h = read_batch_header(b"xx" + batch, 2)
    assert (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic, h.crc) == (100, 49, 3, 2, 0xCAFEBABE)
    assert (h.last_offset_delta, h.base_timestamp, h.max_timestamp) == (4, 1000, 1004)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (77, 2, 9, 5)
    assert h.size == 61 and h.is_transactional, "batchLength + 12 bytes; attribute bit 4 is transactional"
    assert protocol.batch_magic(batch) == 2
    with pytest.raises(ProtocolError, match="61-byte header"):
        read_batch_header(batch[:60])


def test_record_batches_of_an_older_magic_are_reported_not_parsed() -> None:
    old = struct.pack(">qiib", 0, 30, 0, 1) + b"\x00" * 30
    [b] = parse_record_batches("t", 0, old)
    assert (b.magic, b.record_count, b.size) == (1, -1, len(old))
    assert parse_record_batches("t", 0, None) == []


def test_metadata_v4_request_is_header_v1_topics_and_no_auto_creation() -> None:
    frame = protocol.encode_metadata_request(["a", "bc"], 42, client_id="me")
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, pos = protocol.parse_request_header(frame[4:])
    assert (header.api, header.api_version, header.correlation_id, header.client_id) == ("Metadata", 4, 42, "me")
    assert frame[4 + pos:] == struct.pack(">i", 2) + b"\x00\x01a" + b"\x00\x02bc" + b"\x00"


def _s(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else struct.pack(">h", len(text)) + text.encode()


def test_metadata_v4_response_gives_each_topics_error_and_partition_leaders() -> None:
    payload = (struct.pack(">ii", 42, 0)  # correlation id, throttle
               + struct.pack(">i", 1) + struct.pack(">i", 1) + _s("127.0.0.1") + struct.pack(">i", 9092) + _s(None)
               + _s("cluster") + struct.pack(">i", 101)
               + struct.pack(">i", 2)
               + struct.pack(">h", 0) + _s("t") + b"\x00" + struct.pack(">i", 2)
               + struct.pack(">hii", 0, 0, 1) + struct.pack(">iii", 2, 1, 2) + struct.pack(">ii", 1, 1)
               + struct.pack(">hii", 5, 1, -1) + struct.pack(">i", 0) + struct.pack(">i", 0)
               + struct.pack(">h", 3) + _s("gone") + b"\x00" + struct.pack(">i", 0))
    answer = protocol.parse_metadata_response(payload)
    corr, topics = answer.correlation_id, answer.topics
    assert corr == 42 and answer.brokers == {1: "127.0.0.1:9092"}
    assert topics["t"] == protocol.TopicMetadata("t", 0, {0: 1, 1: -1})
    assert topics["gone"].error_code == protocol.UNKNOWN_TOPIC_OR_PARTITION and topics["gone"].leaders == {}
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_metadata_response(payload[:-3])
