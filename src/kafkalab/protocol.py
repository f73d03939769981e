"""Kafka wire primitives, one of each: varints, frames, request and response headers, the
Produce request and response, and the record batch v2 header.

=====================  ==========================================================================
``read_uvarint``       unsigned varint (LEB128, 7 bits a byte, low bits first) at a position
``read_varint``        signed varint/varlong: zigzag over ``read_uvarint`` (records, KIP-98)
``encode_frame``       ``int32 size`` + payload; ``FrameReader`` cuts a TCP stream into frames
``Reader``             big-endian cursor over a frame: int8..int64, varints, (compact) strings
                       and bytes, arrays, tagged fields
``parse_request_header``   api key, version, correlation id, client id (request header v1/v2)
``response_correlation_id``  the correlation id a response starts with
``parse_produce_request``, ``parse_produce_response``  Produce v3-v13, down to the batch headers
``read_batch_header``  the 61-byte record batch v2 header (``BatchHeader``)
``parse_txn_request``, ``parse_txn_response``  EndTxn and AddPartitionsToTxn v0-v5 (KAFKA-17754)
``encode_metadata_request``, ``parse_metadata_response``  Metadata v4: what one broker knows
=====================  ==========================================================================

A request is ``int32 size`` + header (``int16 api_key``, ``int16 api_version``, ``int32
correlation_id``, ``client_id`` nullable string, tagged fields in flexible versions) + body;
a response is ``int32 size`` + ``int32 correlation_id`` (+ tagged fields in flexible versions)
+ body, and answers the request with the same correlation id on the same connection. A
Produce request with ``acks=0`` gets no response at all. ``kafkalab.faults`` (the proxy)
reads frames with this module; ``kafkalab.segments`` (the files) reads record batches and
records with it.

Sources: Kafka protocol guide (kafka.apache.org/protocol, 4.3: "Network", "Common Request and
Response Structure", "Protocol Primitive Types"); message schemas ``RequestHeader.json``,
``ResponseHeader.json``, ``ProduceRequest.json`` (v3-v13; v9+ flexible; v13 names topics by
id, KIP-516), ``ProduceResponse.json``, ``EndTxnRequest.json``/``EndTxnResponse.json`` (v0-v5;
v3+ flexible; v5 returns the bumped epoch, KIP-890) and ``AddPartitionsToTxnRequest.json``/
``AddPartitionsToTxnResponse.json`` (v0-v5; v4+ batched, broker to coordinator) in apache/kafka
clients/src/main/resources/common/message; record batch v2: Kafka documentation, Implementation > Message Format; clients
``ByteUtils`` (varints) and ``DefaultRecordBatch`` (header offsets).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from .errors import KafkalabError

# ----------------------------------------------------------------------------- protocol constants

#: Api keys by name (Kafka protocol guide, "Api Keys"), the ones a client of this lab sends.
API_KEYS: dict[str, int] = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8, "OffsetFetch": 9,
    "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14,
    "DescribeGroups": 15, "ListGroups": 16, "SaslHandshake": 17, "ApiVersions": 18, "CreateTopics": 19,
    "DeleteTopics": 20, "DeleteRecords": 21, "InitProducerId": 22, "OffsetForLeaderEpoch": 23,
    "AddPartitionsToTxn": 24, "AddOffsetsToTxn": 25, "EndTxn": 26, "TxnOffsetCommit": 28,
    "DescribeConfigs": 32, "AlterConfigs": 33, "DescribeLogDirs": 35, "SaslAuthenticate": 36,
    "CreatePartitions": 37, "DeleteGroups": 42, "IncrementalAlterConfigs": 44, "OffsetDelete": 47,
    "DescribeCluster": 60, "DescribeProducers": 61, "DescribeTransactions": 65, "ListTransactions": 66,
    "ConsumerGroupHeartbeat": 68, "ConsumerGroupDescribe": 69, "GetTelemetrySubscriptions": 71,
    "PushTelemetry": 72, "ShareGroupHeartbeat": 76,
}
API_NAMES: dict[int, str] = {v: k for k, v in API_KEYS.items()}
PRODUCE = API_KEYS["Produce"]

#: First flexible version of Produce (``"flexibleVersions": "9+"``): compact strings and
#: arrays, tagged fields, request header v2 and response header v1.
PRODUCE_FLEXIBLE_FROM = 9
#: First flexible version of EndTxn and AddPartitionsToTxn (``"flexibleVersions": "3+"`` in
#: ``EndTxnRequest.json`` and ``AddPartitionsToTxnRequest.json``).
TXN_FLEXIBLE_FROM = 3
#: Api key -> first flexible version, for the apis whose bodies this module reads: their
#: request header is v2 (tagged fields after ``client_id``) from that version on.
FLEXIBLE_FROM: dict[int, int] = {PRODUCE: PRODUCE_FLEXIBLE_FROM, API_KEYS["EndTxn"]: TXN_FLEXIBLE_FROM,
                                 API_KEYS["AddPartitionsToTxn"]: TXN_FLEXIBLE_FROM}
#: First Produce version that names topics by id instead of by name (KIP-516, Kafka 4.1).
PRODUCE_TOPIC_ID_FROM = 13

#: Kafka error codes the proxy reports by name (Kafka protocol guide, "Error Codes").
ERROR_NAMES: dict[int, str] = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION",
    6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE",
    19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    59: "UNKNOWN_PRODUCER_ID", 87: "INVALID_RECORD", 90: "PRODUCER_FENCED", 100: "UNKNOWN_TOPIC_ID",
    # transactions (KIP-98, KIP-890)
    14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
    48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING", 50: "INVALID_TRANSACTION_TIMEOUT",
    51: "CONCURRENT_TRANSACTIONS", 52: "TRANSACTION_COORDINATOR_FENCED", 55: "OPERATION_NOT_ATTEMPTED",
    127: "TRANSACTION_ABORTABLE",
}

#: The error a broker answers for a topic it does not know (yet, or any more).
UNKNOWN_TOPIC_OR_PARTITION = 3

#: Largest frame the proxy accepts, bytes (a safety limit like ``socket.request.max.bytes``,
#: whose broker default is 104857600).
MAX_FRAME_BYTES = 104_857_600

class ProtocolError(KafkalabError, ValueError):
    """Bytes that are not a well-formed Kafka frame of the kind expected (message says where)."""


def api_key_of(api: str | int) -> int:
    """``"Produce"`` or ``0`` -> 0.

    Raises:
        KafkalabError: an unknown api name (the message lists the known ones).
    """
    if isinstance(api, int):
        return api
    if api.isdigit():
        return int(api)
    for name, key in API_KEYS.items():
        if name.lower() == api.lower():
            return key
    raise KafkalabError(f"unknown Kafka api {api!r}; known: {', '.join(API_KEYS)} (or a number)")


def api_name(key: int) -> str:
    """0 -> ``"Produce"``; an api key the table lacks -> ``"api-<key>"``."""
    return API_NAMES.get(key, f"api-{key}")


# ----------------------------------------------------------------------------- varints

#: Most bytes of a varint: a varlong (64 bits in 7-bit groups). A varint (int32) takes at most 5.
VARINT_MAX_BYTES = 10


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """The unsigned varint at ``buf[pos]``: ``(value, position after it)``.

    7 bits a byte, least significant group first; a set high bit means another byte follows
    (``ByteUtils.readUnsignedVarint``/``readVarlong`` before zigzag).

    Raises:
        ProtocolError: the buffer ends inside the varint, or it is longer than
            ``VARINT_MAX_BYTES`` bytes.
    """
    value = shift = 0
    start = pos
    try:
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos
            shift += 7
            if shift >= 7 * VARINT_MAX_BYTES:
                raise ProtocolError(f"varint at position {start} is longer than {VARINT_MAX_BYTES} bytes")
    except IndexError:
        raise ProtocolError(f"varint at position {start} runs past the end ({len(buf)} bytes)") from None


def read_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """The signed (zigzag) varint or varlong at ``buf[pos]``: ``(value, position after it)``.
    Zigzag maps 0, -1, 1, -2... to 0, 1, 2, 3...; record fields (length, deltas, key and value
    lengths, header counts) use it.

    Raises:
        ProtocolError: as ``read_uvarint``.
    """
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_uvarint(value: int) -> bytes:
    """``value`` (>= 0) as an unsigned varint; the inverse of ``read_uvarint``.

    Raises:
        ValueError: a negative value.
    """
    if value < 0:
        raise ValueError(f"an unsigned varint cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """``value`` (a signed 64-bit int) zigzag-encoded as a varint; the inverse of ``read_varint``."""
    return encode_uvarint((value << 1) ^ (value >> 63))


# ----------------------------------------------------------------------------- framing


def encode_frame(payload: bytes) -> bytes:
    """``int32 size`` (big-endian, bytes that follow) + ``payload``: one Kafka frame."""
    return struct.pack(">i", len(payload)) + payload


class FrameReader:
    """Cuts a TCP byte stream into Kafka frames.

    ``feed(chunk)`` returns the payloads (without the 4-byte size) of every frame completed
    by ``chunk``, in order; bytes of an incomplete frame wait for the next chunk. TCP may
    split or join frames anywhere, so this is the only safe way to read them.

    Raises (from ``feed``):
        ProtocolError: a negative size or one above ``max_frame_bytes``.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES):
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        frames: list[bytes] = []
        while len(self._buf) >= 4:
            size = struct.unpack_from(">i", self._buf, 0)[0]
            if size < 0 or size > self.max_frame_bytes:
                raise ProtocolError(f"frame size {size} is not in 0..{self.max_frame_bytes}: not a Kafka stream")
            if len(self._buf) < 4 + size:
                break
            frames.append(bytes(self._buf[4:4 + size]))
            del self._buf[:4 + size]
        return frames

    @property
    def pending_bytes(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buf)


class Reader:
    """Big-endian cursor over one frame's payload with Kafka's primitive types (Kafka protocol
    guide, "Protocol Primitive Types"). Every read past the end raises ``ProtocolError``."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data = data
        self.pos = pos

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"needs {n} bytes at position {self.pos}, frame has {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def uint32(self) -> int:
        return struct.unpack(">I", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos)
        return value

    def varint(self) -> int:
        value, self.pos = read_varint(self.data, self.pos)
        return value

    def uuid(self) -> str:
        return str(uuid.UUID(bytes=self._take(16)))

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._take(n).decode("utf-8", "replace")

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._take(n).decode("utf-8", "replace")

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self._take(n)

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._take(n)

    def array_length(self, compact: bool) -> int:
        n = (self.uvarint() - 1) if compact else self.int32()
        return max(n, 0)

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


# ----------------------------------------------------------------------------- record batch v2 header

#: Record batch v2 header, big-endian (Kafka documentation, Implementation > Message Format):
#: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
#: attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64,
#: producerId int64, producerEpoch int16, baseSequence int32, recordsCount int32.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
#: 61 bytes.
BATCH_HEADER_SIZE = BATCH_HEADER.size
#: baseOffset and batchLength: a batch occupies ``batchLength + LOG_OVERHEAD`` bytes.
LOG_OVERHEAD = 12
#: Where ``magic`` sits in a batch (after baseOffset, batchLength, partitionLeaderEpoch).
MAGIC_OFFSET = 16
#: The CRC-32C covers the batch from the attributes field to its end.
CRC_START = 21

#: Attribute bits 0-2: the compression codec, by id (``CompressionType``; names as
#: ``kafka-dump-log`` prints them).
COMPRESSION_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40


#: The header's fields (all ints), in the order of the format, named as in ``DefaultRecordBatch``.
BATCH_HEADER_FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
                       "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                       "base_sequence", "records_count")


class BatchHeader(NamedTuple("_BatchHeaderFields", [(f, int) for f in BATCH_HEADER_FIELDS])):
    """The 61-byte header of a record batch v2: the ``BATCH_HEADER_FIELDS``, in that order
    (``kafkalab.segments.RecordBatch`` takes them after the batch's position)."""

    __slots__ = ()

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies: ``batch_length + 12``."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def batch_magic(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The ``magic`` byte (record format version; 2 since Kafka 0.11) of the batch at ``pos``:
    read it before the rest, older formats have another layout.

    Raises:
        ProtocolError: fewer than 17 bytes from ``pos``.
    """
    if pos + MAGIC_OFFSET + 1 > len(buf):
        raise ProtocolError(f"record batch at {pos} ends before its magic byte")
    return struct.unpack_from(">b", buf, pos + MAGIC_OFFSET)[0]


def read_batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The record batch v2 header at ``buf[pos]`` (fields as the format stores them; the
    caller checks ``magic`` and the length against its buffer).

    Raises:
        ProtocolError: fewer than ``BATCH_HEADER_SIZE`` (61) bytes from ``pos``.
    """
    if pos + BATCH_HEADER_SIZE > len(buf):
        raise ProtocolError(f"record batch at {pos} is shorter than its {BATCH_HEADER_SIZE}-byte header")
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, pos))


# ----------------------------------------------------------------------------- requests and responses


@dataclass(frozen=True)
class RequestHeader:
    """The fixed start of every request (request header v1/v2). ``size``: payload bytes."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int

    @property
    def api(self) -> str:
        return api_name(self.api_key)


def parse_request_header(payload: bytes) -> tuple[RequestHeader, int]:
    """Header of a request frame's ``payload`` and the position where the header ends.

    The position is exact for the apis of ``FLEXIBLE_FROM`` (Produce, EndTxn,
    AddPartitionsToTxn: it skips the tagged fields of header v2 when the version is
    flexible); for other apis it is the end of ``client_id``, which is all the proxy needs
    from them.

    Raises:
        ProtocolError: fewer bytes than a header.
    """
    r = Reader(payload)
    api_key, version, corr = r.int16(), r.int16(), r.int32()
    client_id = r.nullable_string()
    if api_key in FLEXIBLE_FROM and version >= FLEXIBLE_FROM[api_key]:
        r.skip_tagged_fields()
    return RequestHeader(api_key, version, corr, client_id, len(payload)), r.pos


def response_correlation_id(payload: bytes) -> int:
    """The correlation id a response frame starts with.

    Raises:
        ProtocolError: fewer than 4 bytes.
    """
    return Reader(payload).int32()


@dataclass(frozen=True)
class BatchInfo:
    """One record batch in a Produce request, from its v2 header (61 bytes).

    ``producer_id`` is -1 and ``base_sequence`` -1 for a producer without idempotence. The
    batch's records carry sequences ``base_sequence .. base_sequence + record_count - 1``.
    ``topic`` is the name (Produce v3-v12) or the topic id (v13+, KIP-516).
    """

    topic: str
    partition: int
    magic: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    transactional: bool
    size: int

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.record_count - 1 if self.base_sequence >= 0 else -1


@dataclass(frozen=True)
class ProduceRequestInfo:
    """What a Produce request carries: ``acks`` (-1 = all ISR, 1 = leader, 0 = no response),
    the broker-side ``timeout_ms`` (the client's ``request.timeout.ms``), and its batches."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    batches: tuple[BatchInfo, ...]

    @property
    def record_count(self) -> int:
        return sum(b.record_count for b in self.batches)


def parse_record_batches(topic: str, partition: int, records: bytes | None) -> list[BatchInfo]:
    """The batch headers in a Produce partition's ``records`` bytes (magic 2 only; older
    message sets are reported with ``magic`` and counts of -1).

    Raises:
        ProtocolError: a batch header is cut short.
    """
    if not records:
        return []
    out: list[BatchInfo] = []
    pos = 0
    while pos + MAGIC_OFFSET + 1 <= len(records):
        magic = batch_magic(records, pos)
        if magic != 2:
            out.append(BatchInfo(topic, partition, magic, -1, -1, -1, -1, False, len(records) - pos))
            break
        h = read_batch_header(records, pos)
        out.append(BatchInfo(topic, partition, magic, h.producer_id, h.producer_epoch, h.base_sequence,
                             h.records_count, h.is_transactional, h.size))
        pos += h.size
    return out


def parse_produce_request(payload: bytes) -> tuple[RequestHeader, ProduceRequestInfo]:
    """Header and body of a Produce request frame (versions 3 to 13).

    Raises:
        ProtocolError: not a Produce request, a version below 3, or a truncated body.
    """
    header, pos = parse_request_header(payload)
    if header.api_key != PRODUCE:
        raise ProtocolError(f"api key {header.api_key} is not Produce (0)")
    v = header.api_version
    if v < 3:
        raise ProtocolError(f"Produce v{v} predates record batch v2 (Kafka 4 accepts v3+)")
    flexible = v >= PRODUCE_FLEXIBLE_FROM
    r = Reader(payload, pos)
    txn = r.compact_nullable_string() if flexible else r.nullable_string()
    acks, timeout_ms = r.int16(), r.int32()
    batches: list[BatchInfo] = []
    for _ in range(r.array_length(flexible)):
        if v >= PRODUCE_TOPIC_ID_FROM:
            topic = r.uuid()
        else:
            topic = (r.compact_nullable_string() if flexible else r.nullable_string()) or ""
        for _ in range(r.array_length(flexible)):
            partition = r.int32()
            records = r.compact_nullable_bytes() if flexible else r.nullable_bytes()
            batches.extend(parse_record_batches(topic, partition, records))
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
    return header, ProduceRequestInfo(txn, acks, timeout_ms, tuple(batches))


@dataclass(frozen=True)
class PartitionResult:
    """One partition of a Produce response: ``error_code`` (0 = appended) and the offset the
    broker gave the batch's first record (``base_offset``; for a duplicate that an idempotent
    producer retried, the offset of the copy already in the log)."""

    topic: str
    partition: int
    error_code: int
    base_offset: int

    @property
    def error(self) -> str:
        return ERROR_NAMES.get(self.error_code, f"error {self.error_code}")


def parse_produce_response(payload: bytes, version: int) -> list[PartitionResult]:
    """Partitions of a Produce response frame (versions 3 to 13) answering a request of ``version``.

    Raises:
        ProtocolError: a truncated body.
    """
    flexible = version >= PRODUCE_FLEXIBLE_FROM
    r = Reader(payload)
    r.int32()  # correlation id
    if flexible:
        r.skip_tagged_fields()  # response header v1
    out: list[PartitionResult] = []
    for _ in range(r.array_length(flexible)):
        if version >= PRODUCE_TOPIC_ID_FROM:
            topic = r.uuid()
        else:
            topic = (r.compact_nullable_string() if flexible else r.nullable_string()) or ""
        for _ in range(r.array_length(flexible)):
            partition, error_code, base_offset = r.int32(), r.int16(), r.int64()
            r.int64()  # log_append_time_ms (v2+)
            if version >= 5:
                r.int64()  # log_start_offset
            if version >= 8:
                for _ in range(r.array_length(flexible)):
                    r.int32()
                    r.compact_nullable_string() if flexible else r.nullable_string()
                    if flexible:
                        r.skip_tagged_fields()
                r.compact_nullable_string() if flexible else r.nullable_string()
            if flexible:
                r.skip_tagged_fields()  # current_leader (v10+) is a tagged field
            out.append(PartitionResult(topic, partition, error_code, base_offset))
        if flexible:
            r.skip_tagged_fields()
    return out




# ----------------------------------------------------------------------------- transaction requests

#: Api keys of the two transaction-control requests a producer sends its transaction
#: coordinator and that KAFKA-17754 is about.
END_TXN = API_KEYS["EndTxn"]
ADD_PARTITIONS_TO_TXN = API_KEYS["AddPartitionsToTxn"]
#: First EndTxn version whose response carries the producer id and the new epoch: the
#: epoch is bumped at every commit or abort (KIP-890 part 2, transactions v2).
END_TXN_EPOCH_BUMP_FROM = 5
#: First AddPartitionsToTxn version of the batched, broker-to-broker form (a list of
#: transactions and a ``VerifyOnly`` flag, KIP-890 part 1); clients send v3 and below.
ADD_PARTITIONS_BATCHED_FROM = 4


@dataclass(frozen=True)
class TxnRequestInfo:
    """The transaction a control request speaks for: an EndTxn or an AddPartitionsToTxn
    request body (``EndTxnRequest.json`` v0-v5, ``AddPartitionsToTxnRequest.json`` v0-v5).

    Attributes:
        api: ``"EndTxn"`` or ``"AddPartitionsToTxn"``.
        api_version: the request's version.
        transactional_id: the producer's ``transactional.id``.
        producer_id: the producer id the coordinator gave it (InitProducerId).
        producer_epoch: the epoch the request claims.
        committed: EndTxn: True commit, False abort; None for AddPartitionsToTxn.
        partitions: AddPartitionsToTxn: ``(topic, partition)`` pairs to add; () for EndTxn.
        verify_only: AddPartitionsToTxn v4+ (broker to coordinator): only check they are in.
        transactions: AddPartitionsToTxn v4+: how many transactions the request carries
            (the fields above are the first one's); 1 otherwise.
    """

    api: str
    api_version: int
    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    committed: bool | None = None
    partitions: tuple[tuple[str, int], ...] = ()
    verify_only: bool = False
    transactions: int = 1


@dataclass(frozen=True)
class TxnResponseInfo:
    """What the coordinator answered an EndTxn or AddPartitionsToTxn request.

    Attributes:
        error_code: EndTxn: the error code; AddPartitionsToTxn v0-v3: the first partition
            error that is not NONE (0 if all are NONE); v4+: the top-level error code, or
            else the first partition error.
        producer_id, producer_epoch: EndTxn v5+ (KIP-890): the producer id and the epoch
            after the bump; -1 before v5.
        partition_errors: AddPartitionsToTxn: ``(topic, partition, error_code)``; () for EndTxn.
    """

    api: str
    api_version: int
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1
    partition_errors: tuple[tuple[str, int, int], ...] = ()

    @property
    def error(self) -> str:
        return ERROR_NAMES.get(self.error_code, f"error {self.error_code}")


def _string(r: Reader, flexible: bool) -> str | None:
    return r.compact_nullable_string() if flexible else r.nullable_string()


def _txn_topics(r: Reader, flexible: bool) -> list[tuple[str, int]]:
    """``[AddPartitionsToTxnTopic]``: name, ``[int32]`` partitions (+ tagged fields if flexible)."""
    out: list[tuple[str, int]] = []
    for _ in range(r.array_length(flexible)):
        name = _string(r, flexible) or ""
        for _ in range(r.array_length(flexible)):
            out.append((name, r.int32()))
        if flexible:
            r.skip_tagged_fields()
    return out


def parse_txn_request(payload: bytes) -> tuple[RequestHeader, TxnRequestInfo]:
    """Header and body of an EndTxn (v0-v5) or AddPartitionsToTxn (v0-v5) request frame.

    Raises:
        ProtocolError: another api, or a truncated body.
    """
    header, pos = parse_request_header(payload)
    v = header.api_version
    flexible = v >= TXN_FLEXIBLE_FROM
    r = Reader(payload, pos)
    if header.api_key == END_TXN:
        txn = _string(r, flexible)
        pid, epoch, committed = r.int64(), r.int16(), bool(r.int8())
        return header, TxnRequestInfo("EndTxn", v, txn, pid, epoch, committed=committed)
    if header.api_key != ADD_PARTITIONS_TO_TXN:
        raise ProtocolError(f"api key {header.api_key} is neither EndTxn (26) nor AddPartitionsToTxn (24)")
    if v < ADD_PARTITIONS_BATCHED_FROM:
        txn = _string(r, flexible)
        pid, epoch = r.int64(), r.int16()
        parts = _txn_topics(r, flexible)
        return header, TxnRequestInfo("AddPartitionsToTxn", v, txn, pid, epoch, partitions=tuple(parts))
    first: TxnRequestInfo | None = None
    n = r.array_length(True)
    for _ in range(n):
        txn = r.compact_nullable_string()
        pid, epoch, verify = r.int64(), r.int16(), bool(r.int8())
        parts = _txn_topics(r, True)
        r.skip_tagged_fields()
        if first is None:
            first = TxnRequestInfo("AddPartitionsToTxn", v, txn, pid, epoch, partitions=tuple(parts),
                                   verify_only=verify, transactions=n)
    return header, first or TxnRequestInfo("AddPartitionsToTxn", v, None, -1, -1, transactions=0)


def _partition_results(r: Reader, flexible: bool) -> list[tuple[str, int, int]]:
    """``[AddPartitionsToTxnTopicResult]``: name, ``[partition, error code]``."""
    out: list[tuple[str, int, int]] = []
    for _ in range(r.array_length(flexible)):
        name = _string(r, flexible) or ""
        for _ in range(r.array_length(flexible)):
            out.append((name, r.int32(), r.int16()))
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
    return out


def parse_txn_response(payload: bytes, api_key: int, version: int) -> TxnResponseInfo:
    """An EndTxn or AddPartitionsToTxn response frame answering a request of ``api_key`` and
    ``version`` (``EndTxnResponse.json``, ``AddPartitionsToTxnResponse.json``, v0-v5).

    Raises:
        ProtocolError: another api, or a truncated body.
    """
    flexible = version >= TXN_FLEXIBLE_FROM
    r = Reader(payload)
    r.int32()  # correlation id
    if flexible:
        r.skip_tagged_fields()  # response header v1
    r.int32()  # throttle_time_ms
    if api_key == END_TXN:
        error = r.int16()
        pid = epoch = -1
        if version >= END_TXN_EPOCH_BUMP_FROM:
            pid, epoch = r.int64(), r.int16()
        return TxnResponseInfo("EndTxn", version, error, pid, epoch)
    if api_key != ADD_PARTITIONS_TO_TXN:
        raise ProtocolError(f"api key {api_key} is neither EndTxn (26) nor AddPartitionsToTxn (24)")
    if version < ADD_PARTITIONS_BATCHED_FROM:
        parts = _partition_results(r, flexible)
        top = 0
    else:
        top = r.int16()
        parts = []
        for _ in range(r.array_length(True)):
            r.compact_nullable_string()  # transactional id
            parts.extend(_partition_results(r, True))
            r.skip_tagged_fields()
    error = top or next((e for _, _, e in parts if e), 0)
    return TxnResponseInfo("AddPartitionsToTxn", version, error, partition_errors=tuple(parts))


# ----------------------------------------------------------------------------- Metadata v4

#: The Metadata version ``encode_metadata_request`` sends: v4, the oldest one Kafka 4 still
#: serves (KIP-896 removed v0-v3) and the newest before flexible versions (v9+), so plain
#: int16 strings and int32 arrays. Source: ``MetadataRequest.json``/``MetadataResponse.json``.
METADATA_VERSION = 4


@dataclass(frozen=True)
class TopicMetadata:
    """One topic of a Metadata response, as the answering broker knows it.

    Attributes:
        error_code: the topic's error (0 none, 3 UNKNOWN_TOPIC_OR_PARTITION, 5 LEADER_NOT_AVAILABLE).
        leaders: partition -> leader broker id (-1: none).
    """

    name: str
    error_code: int
    leaders: dict[int, int]


def encode_metadata_request(topics: list[str], correlation_id: int, client_id: str = "kafkalab") -> bytes:
    """A whole Metadata v4 request frame asking for ``topics`` (never auto-creating them):
    request header v1, ``topics: [name]``, ``allow_auto_topic_creation=false``."""
    def string(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">h", len(b)) + b

    body = struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics) + b"\x00"
    header = struct.pack(">hhi", API_KEYS["Metadata"], METADATA_VERSION, correlation_id) + string(client_id)
    return encode_frame(header + body)


@dataclass(frozen=True)
class MetadataAnswer:
    """One broker's Metadata v4 response.

    Attributes:
        brokers: broker id -> ``host:port`` as this broker advertises them on the listener the
            request came through.
        topics: topic -> ``TopicMetadata``.
    """

    correlation_id: int
    brokers: dict[int, str]
    topics: dict[str, TopicMetadata]


def parse_metadata_response(payload: bytes) -> MetadataAnswer:
    """A Metadata v4 response frame's payload -> ``MetadataAnswer``.

    Raises:
        ProtocolError: a truncated response.
    """
    r = Reader(payload)
    corr = r.int32()
    r.int32()  # throttle_time_ms
    brokers: dict[int, str] = {}
    for _ in range(r.array_length(False)):  # brokers: node_id, host, port, rack
        node, host, port, _rack = r.int32(), r.nullable_string(), r.int32(), r.nullable_string()
        brokers[node] = f"{host}:{port}"
    r.nullable_string()  # cluster_id
    r.int32()  # controller_id
    topics: dict[str, TopicMetadata] = {}
    for _ in range(r.array_length(False)):
        error, name, _internal = r.int16(), r.nullable_string() or "", r.int8()
        leaders: dict[int, int] = {}
        for _ in range(r.array_length(False)):
            _perr, index, leader = r.int16(), r.int32(), r.int32()
            for _ in range(2):  # replica_nodes, isr_nodes
                for _ in range(r.array_length(False)):
                    r.int32()
            leaders[index] = leader
        topics[name] = TopicMetadata(name, error, leaders)
    return MetadataAnswer(corr, brokers, topics)
