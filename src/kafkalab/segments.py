"""Partitions on disk: the folders and segment files a broker writes, and the record batches
and index entries inside them.

Each broker keeps one folder per partition replica it holds, ``<log.dirs>/<topic>-<partition>``.
A partition is a sequence of segments; each segment is a set of files named by its base
offset (the first offset it holds), zero-padded to 20 digits:

==============  ==================================================================
``.log``        the record batches, as the producer sent them (magic 2 format)
``.index``      sparse offset index: 8-byte entries (relative offset, file position)
``.timeindex``  sparse time index: 12-byte entries (timestamp, relative offset)
==============  ==================================================================

Besides segments a partition folder holds ``leader-epoch-checkpoint`` and
``partition.metadata`` (the topic id, KIP-516). The active segment's index files are
preallocated to ``segment.index.bytes`` (10 MiB by default), rounded down to a whole
number of entries, zero-filled past the last entry, and trimmed when the segment rolls.

This module reads those files without the broker: ``read_log`` (record batch v2 headers,
records, CRC-32C checked with the ``crc32c`` library from PyPI), ``read_offset_index``, ``read_time_index``, ``read_partition``;
looks offsets and timestamps up the way the broker does (``lookup_offset``,
``scan_for_offset``, ``offset_for_timestamp``); states the broker's rules for index
entries and retention as functions (``expected_offset_index``, ``size_retention_deletes``,
``time_retention_deletes``). It reads files only: no Kafka client. What Kafka's own
``kafka-dump-log`` says about the same bytes is ``kafkalab.dumplog`` (which compares the two
field by field); the record batch header and varints are ``kafkalab.protocol``;
``kafkalab segments`` (the command, which asks the cluster for the leader) is in
``kafkalab.cli``.

Sources (Kafka 4.3): documentation, Implementation > Message Format (record batch, record,
control records) and > Log; storage ``LogSegment`` (append: one offset-index entry per
``index.interval.bytes``, the time index beside it), ``OffsetIndex``, ``TimeIndex``,
``AbstractIndex`` (entry sizes, binary search, preallocation); ``UnifiedLog``
(``deleteRetentionMsBreachedSegments``, ``deleteRetentionSizeBreachedSegments``,
``fetchOffsetByTimestamp``); clients ``DefaultRecordBatch``, ``DefaultRecord``,
``ControlRecordType``, ``EndTransactionMarker``; KIP-98 (producer id, sequence,
transactions), KIP-534 (delete horizon in the batch attributes).
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

# CRC-32C (Castagnoli), the checksum of record batch v2 (KIP-98; Kafka's
# org.apache.kafka.common.utils.Crc32C): ICRAR's crc32c, hardware-accelerated where the CPU has it.
from crc32c import crc32c

from .errors import KafkalabError
from .protocol import (BATCH_HEADER_SIZE, COMPRESSION_CODECS, CONTROL_BIT, CRC_START, DELETE_HORIZON_BIT,
                       LOG_OVERHEAD, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, ProtocolError, read_batch_header,
                       read_uvarint, read_varint)

#: Segment file suffixes, in the order of the table above.
SEGMENT_SUFFIXES: tuple[str, ...] = (".log", ".index", ".timeindex")

#: Digits in a segment file name (the base offset, zero-padded).
OFFSET_DIGITS = 20


@dataclass(frozen=True)
class SegmentFile:
    """One file of a segment.

    Attributes:
        path: the file.
        base_offset: the segment's first offset (from the file name).
        kind: ``"log"``, ``"index"`` or ``"timeindex"``.
        size: length in bytes (``st_size``; preallocated index files count in full).
        allocated: bytes the file really occupies on disk (``st_blocks * 512``).
    """

    path: Path
    base_offset: int
    kind: str
    size: int
    allocated: int


def partition_dir_name(topic: str, partition: int) -> str:
    """``"<topic>-<partition>"``: the folder name of a partition replica."""
    return f"{topic}-{partition}"


def partition_dirs(data_dir: str | Path, topic: str) -> dict[int, Path]:
    """Partition number -> folder of every replica of ``topic`` under one broker's ``data_dir``.

    Only live folders count: ones renamed for deletion (``<topic>-<p>.<id>-delete``) or for a
    move between log dirs (``-future``) do not match. A missing ``data_dir`` gives ``{}``.
    """
    root = Path(data_dir)
    if not root.is_dir():
        return {}
    pattern = re.compile(re.escape(topic) + r"-(\d+)")
    out: dict[int, Path] = {}
    for child in root.iterdir():
        m = pattern.fullmatch(child.name)
        if m and child.is_dir():
            out[int(m.group(1))] = child
    return dict(sorted(out.items()))


def segment_files(partition_dir: str | Path) -> list[SegmentFile]:
    """The ``.log``, ``.index`` and ``.timeindex`` files of a partition folder, sorted by base
    offset then kind (log, index, timeindex). Other files (checkpoints, ``partition.metadata``,
    ``.snapshot``, ``.deleted``, ``.cleaned``, ``.swap``) are left out."""
    files: list[SegmentFile] = []
    for p in Path(partition_dir).iterdir():
        if p.suffix in SEGMENT_SUFFIXES and p.stem.isdigit() and len(p.stem) == OFFSET_DIGITS:
            try:
                st = p.stat()
            except FileNotFoundError:  # deleted by the broker (retention, cleaner) meanwhile
                continue
            files.append(SegmentFile(p, int(p.stem), p.suffix[1:], st.st_size, st.st_blocks * 512))
    order = {s[1:]: i for i, s in enumerate(SEGMENT_SUFFIXES)}
    return sorted(files, key=lambda f: (f.base_offset, order[f.kind]))


def partition_of(path: str | Path) -> int:
    """Partition number of a segment file from its folder name (``.../<topic>-<p>/000...0.log`` -> p).

    Raises:
        ValueError: the folder name does not end in ``-<number>``.
    """
    name = Path(path).parent.name
    head, sep, tail = name.rpartition("-")
    if not sep or not head or not tail.isdigit():
        raise ValueError(f"{path}: its folder {name!r} is not <topic>-<partition>")
    return int(tail)


def log_bytes(partition_dir: str | Path) -> int:
    """Total size of the ``.log`` files of a partition folder: the bytes of its record batches."""
    return sum(f.size for f in segment_files(partition_dir) if f.kind == "log")


def segment_file_name(base_offset: int, suffix: str = ".log") -> str:
    """``00000000000000001018.log``: the name of a segment file with base offset ``base_offset``."""
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


# ----------------------------------------------------------------------------- errors


class SegmentFormatError(KafkalabError, ValueError):
    """Bytes that are not what the format says: a batch header out of range, a magic other
    than 2, a record that runs past its batch. The message names the file and position."""


class CorruptBatchError(SegmentFormatError):
    """A record batch whose stored CRC-32C differs from the CRC-32C of its bytes."""


# ----------------------------------------------------------------------------- record batch v2

# The header layout (``BATCH_HEADER``, 61 bytes), its attribute bits and ``read_batch_header``
# are wire primitives: ``kafkalab.protocol``.

#: Control record types (key: version int16, type int16), ``ControlRecordType``.
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

NO_SEQUENCE = -1
_INT32_MAX = 2**31 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """``DefaultRecordBatch.incrementSequence``: sequences wrap from 2^31-1 to 0."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(frozen=True)
class Header:
    """A record header: a UTF-8 key and a value (None if null)."""

    key: str
    value: bytes | None


@dataclass(frozen=True)
class Record:
    """One record of a batch, with its absolute offset and timestamp (ms) resolved.

    ``sequence`` is the batch's base sequence plus the record's offset delta, or -1 when the
    producer is not idempotent. ``value is None`` marks a tombstone (a delete, for compaction).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE
    attributes: int = 0

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True)
class ControlMarker:
    """The content of a control record: ``type`` ``"COMMIT"`` or ``"ABORT"`` (an end
    transaction marker, with the transaction coordinator's epoch), or another control type."""

    type: str
    version: int
    coordinator_epoch: int | None = None


@dataclass(frozen=True)
class RecordBatch:
    """One record batch (magic 2) as it sits in a ``.log`` file.

    Header fields keep the names of the format; ``position`` is the byte offset of the batch
    in its file and ``crc_valid`` says whether the stored CRC matches the bytes (None when not
    checked). ``records`` is None when the records were not read (``records=False``).
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    crc_valid: bool | None = None
    records: tuple[Record, ...] | None = None

    @property
    def size(self) -> int:
        """Bytes the batch occupies in the file: ``batch_length + 12``."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_position(self) -> int:
        return self.position + self.size

    @property
    def compression(self) -> str:
        return COMPRESSION_CODECS.get(self.attributes & 0x07, f"unknown({self.attributes & 0x07})")

    @property
    def timestamp_type(self) -> str:
        """``"CreateTime"`` (set by the producer) or ``"LogAppendTime"`` (set by the broker)."""
        return "LogAppendTime" if self.attributes & TIMESTAMP_TYPE_BIT else "CreateTime"

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner may drop this batch's tombstones (KIP-534), or None. The cleaner
        sets it (in ``base_timestamp``) on the first pass that keeps a tombstone."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def control(self) -> ControlMarker | None:
        """The marker of a control batch (its first record), else None."""
        if not self.is_control or not self.records:
            return None
        return parse_control_record(self.records[0])

    def to_json(self) -> dict:
        """The batch as ``kafkalab segments --json`` prints it."""
        return {
            "base_offset": self.base_offset,
            "last_offset": self.last_offset,
            "record_count": self.records_count,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "base_sequence": self.base_sequence,
            "is_transactional": self.is_transactional,
            "is_control": self.is_control,
            "position": self.position,
            "size": self.size,
            "max_timestamp": self.max_timestamp,
            "compression": self.compression,
        }


def parse_control_record(record: Record) -> ControlMarker:
    """Decode a control record: key = version int16, type int16; for COMMIT/ABORT the value is
    version int16, coordinator epoch int32 (``EndTransactionMarker``).

    Raises:
        SegmentFormatError: the key is shorter than 4 bytes.
    """
    if record.key is None or len(record.key) < 4:
        raise SegmentFormatError(f"control record at offset {record.offset} has key {record.key!r}")
    version, type_id = struct.unpack_from(">hh", record.key)
    name = CONTROL_TYPES.get(type_id, f"UNKNOWN({type_id})")
    epoch = None
    if name in ("ABORT", "COMMIT") and record.value is not None and len(record.value) >= 6:
        epoch = struct.unpack_from(">hi", record.value)[1]
    return ControlMarker(name, version, epoch)


def decompress(codec: str, data: bytes) -> bytes:
    """The records section of a compressed batch, decompressed.

    gzip with the standard library; lz4 (LZ4 frame format), zstd and snappy with pyarrow.
    Snappy comes either framed as by xerial snappy-java (magic ``\\x82SNAPPY\\x00``, then
    4-byte big-endian chunk lengths: the Java producer) or as one raw block (librdkafka).

    Raises:
        SegmentFormatError: an unknown codec.
    """
    if codec == "none":
        return data
    if codec == "gzip":
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    import pyarrow as pa

    if codec in ("lz4", "zstd"):
        with pa.input_stream(pa.py_buffer(data), compression=codec) as stream:
            return stream.read()
    if codec == "snappy":
        codec_obj = pa.Codec("snappy")

        def raw(block: bytes) -> bytes:
            size, _ = read_uvarint(block, 0)
            return codec_obj.decompress(block, decompressed_size=size).to_pybytes()

        magic = b"\x82SNAPPY\x00"
        if data.startswith(magic):
            pos, parts = 16, []
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                parts.append(raw(data[pos + 4:pos + 4 + n]))
                pos += 4 + n
            return b"".join(parts)
        return raw(data)
    raise SegmentFormatError(f"unknown compression codec {codec!r}")


def _parse_records(body: bytes, batch: RecordBatch, where: str) -> tuple[Record, ...]:
    """The ``records_count`` records of ``batch`` from its (decompressed) records section."""
    out = []
    pos = 0
    log_append = batch.timestamp_type == "LogAppendTime"
    try:
        for _ in range(batch.records_count):
            length, pos = read_varint(body, pos)
            end = pos + length
            attributes = body[pos]
            pos += 1
            ts_delta, pos = read_varint(body, pos)
            offset_delta, pos = read_varint(body, pos)
            klen, pos = read_varint(body, pos)
            key = None if klen < 0 else bytes(body[pos:pos + klen])
            pos += max(klen, 0)
            vlen, pos = read_varint(body, pos)
            value = None if vlen < 0 else bytes(body[pos:pos + vlen])
            pos += max(vlen, 0)
            nheaders, pos = read_varint(body, pos)
            headers = []
            for _h in range(nheaders):
                hklen, pos = read_varint(body, pos)
                hkey = bytes(body[pos:pos + hklen]).decode("utf-8", "replace")
                pos += hklen
                hvlen, pos = read_varint(body, pos)
                hval = None if hvlen < 0 else bytes(body[pos:pos + hvlen])
                pos += max(hvlen, 0)
                headers.append(Header(hkey, hval))
            if pos != end:
                raise SegmentFormatError(f"{where}: record at offset delta {offset_delta} is {length} bytes "
                                         f"long but its fields take {length + pos - end}")
            seq = (NO_SEQUENCE if batch.base_sequence == NO_SEQUENCE
                   else increment_sequence(batch.base_sequence, offset_delta))
            out.append(Record(
                offset=batch.base_offset + offset_delta,
                timestamp=batch.max_timestamp if log_append else batch.base_timestamp + ts_delta,
                key=key, value=value, headers=tuple(headers), sequence=seq, attributes=attributes,
            ))
    except (IndexError, ProtocolError):
        raise SegmentFormatError(f"{where}: records run past the end of the batch") from None
    return tuple(out)


def parse_batches(data: bytes | bytearray | memoryview, *, where: str = "<bytes>", records: bool = True,
                  check_crc: bool = True) -> tuple[list[RecordBatch], int]:
    """Record batches laid back to back in ``data`` (the content of a ``.log`` file).

    Args:
        data: the bytes, from position 0 of the file.
        where: names the source in error messages (a file path).
        records: also decode each batch's records (decompressing if needed); False reads
            headers only (faster).
        check_crc: compute each batch's CRC-32C and set ``crc_valid``; False leaves it None.

    Returns:
        ``(batches, trailing_bytes)``: ``trailing_bytes`` counts bytes at the end that do not
        form a whole batch (a write in progress on the active segment; ``kafka-dump-log``
        reports them as "invalid bytes at the end").

    Raises:
        SegmentFormatError: a batch length below the header size, a magic other than 2 (Kafka
            4 reads and writes only v2; v0/v1 were removed by KIP-724), or records that do not
            fit their batch.
    """
    buf = memoryview(data).cast("B")
    n = len(buf)
    headers: list[tuple] = []
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        base_offset, batch_length = struct.unpack_from(">qi", buf, pos)
        if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise SegmentFormatError(f"{where}: batch at position {pos} has length {batch_length}, "
                                     f"less than a v2 header ({BATCH_HEADER_SIZE - LOG_OVERHEAD})")
        if pos + LOG_OVERHEAD + batch_length > n:
            break  # partial batch at the end
        fields = read_batch_header(buf, pos)
        if fields.magic != 2:
            raise SegmentFormatError(f"{where}: batch at position {pos} has magic {fields.magic}; "
                                     "this reader knows record batch v2 only")
        headers.append((pos, fields))
        pos += LOG_OVERHEAD + batch_length
    crcs: list[int | None]
    if check_crc:
        crcs = [crc32c(buf[p + CRC_START:p + f.size]) for p, f in headers]
    else:
        crcs = [None] * len(headers)
    out = []
    for (p, f), computed in zip(headers, crcs):
        batch = RecordBatch(p, *f, crc_valid=None if computed is None else computed == f.crc)
        if records:
            body = bytes(buf[p + BATCH_HEADER_SIZE:p + f.size])
            try:
                body = decompress(batch.compression, body)
            except SegmentFormatError:
                raise
            except Exception as e:
                raise SegmentFormatError(f"{where}: batch at position {p}: cannot decompress "
                                         f"{batch.compression}: {e}") from e
            batch = RecordBatch(p, *f, crc_valid=batch.crc_valid,
                                records=_parse_records(body, batch, f"{where} position {p}"))
        out.append(batch)
    return out, n - pos


@dataclass
class LogFile:
    """A ``.log`` file read by ``read_log``: its batches, and the bytes after the last whole one."""

    path: Path
    base_offset: int
    batches: list[RecordBatch]
    trailing_bytes: int = 0

    @property
    def records(self) -> list[Record]:
        """Every record of every batch (control records included), in offset order."""
        return [r for b in self.batches for r in (b.records or ())]


def read_log(path: str | Path, *, records: bool = True, check_crc: bool = True,
             verify: bool = False) -> LogFile:
    """Read a segment's ``.log`` file.

    Args:
        path: the ``.log`` file (the base offset comes from its name; a name that is not
            20 digits gives base offset -1).
        records: decode records too (False: batch headers only).
        check_crc: compute CRC-32C per batch (``crc_valid``).
        verify: raise ``CorruptBatchError`` on the first batch whose CRC does not match.

    Raises:
        FileNotFoundError: no such file (a segment the broker deleted meanwhile).
        SegmentFormatError, CorruptBatchError: see ``parse_batches``.
    """
    p = Path(path)
    data = p.read_bytes()
    batches, trailing = parse_batches(data, where=str(p), records=records, check_crc=check_crc or verify)
    if verify:
        for b in batches:
            if b.crc_valid is False:
                raise CorruptBatchError(
                    f"{p}: batch at position {b.position} (offsets {b.base_offset}-{b.last_offset}) has "
                    f"stored CRC {b.crc} but its bytes give {crc32c(data[b.position + CRC_START:b.next_position])}")
    base = int(p.stem) if p.stem.isdigit() else -1
    return LogFile(p, base, batches, trailing)


# ----------------------------------------------------------------------------- indexes

OFFSET_INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True)
class IndexEntry:
    """An ``.index`` entry: the last offset of a batch (absolute) and the batch's position."""

    offset: int
    position: int

    def to_json(self) -> dict:
        return {"offset": self.offset, "position": self.position}


@dataclass(frozen=True)
class TimeIndexEntry:
    """A ``.timeindex`` entry: the largest timestamp (ms) so far in the segment and the
    (absolute) last offset of the batch that holds it."""

    timestamp: int
    offset: int

    def to_json(self) -> dict:
        return {"timestamp": self.timestamp, "offset": self.offset}


def _base_of(path: Path, base_offset: int | None) -> int:
    if base_offset is not None:
        return base_offset
    if not path.stem.isdigit():
        raise SegmentFormatError(f"{path}: the name is not a base offset; pass base_offset")
    return int(path.stem)


def read_offset_index(path: str | Path, base_offset: int | None = None) -> list[IndexEntry]:
    """Entries of an ``.index`` file, with absolute offsets.

    8-byte entries: relative offset int32, position int32 (``OffsetIndex``). The active
    segment's file is preallocated and zero-filled, so reading stops at the first entry whose
    relative offset is 0: a real entry never has one, because the first entry is written only
    after ``index.interval.bytes`` of batches (``LogSegment.append``). A trailing partial
    entry is ignored.

    Raises:
        FileNotFoundError: no such file. SegmentFormatError: the name is no base offset
            and ``base_offset`` is None.
    """
    p = Path(path)
    base = _base_of(p, base_offset)
    data = p.read_bytes()
    out = []
    for rel, pos in OFFSET_INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % 8]):
        if rel == 0:
            break
        out.append(IndexEntry(base + rel, pos))
    return out


def read_time_index(path: str | Path, base_offset: int | None = None) -> list[TimeIndexEntry]:
    """Entries of a ``.timeindex`` file, with absolute offsets.

    12-byte entries: timestamp int64, relative offset int32 (``TimeIndex``). Reading stops at
    the zero-filled tail of a preallocated file: an all-zero entry, or after the first entry
    any entry with relative offset 0 (the rule ``kafka-dump-log`` uses).

    Raises:
        FileNotFoundError, SegmentFormatError: as ``read_offset_index``.
    """
    p = Path(path)
    base = _base_of(p, base_offset)
    data = p.read_bytes()
    out = []
    for i, (ts, rel) in enumerate(TIME_INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % 12])):
        if rel == 0 and (ts == 0 or i > 0):
            break
        out.append(TimeIndexEntry(ts, base + rel))
    return out


# ----------------------------------------------------------------------------- segments


@dataclass
class Segment:
    """One segment: its ``.log`` batches and its two indexes (entries with absolute offsets)."""

    base_offset: int
    log: Path
    batches: list[RecordBatch]
    index: list[IndexEntry]
    timeindex: list[TimeIndexEntry]
    trailing_bytes: int = 0

    @property
    def size(self) -> int:
        """Bytes of whole batches in the ``.log`` file."""
        return self.batches[-1].next_position if self.batches else 0

    @property
    def records(self) -> list[Record]:
        return [r for b in self.batches for r in (b.records or ())]

    @property
    def largest_timestamp(self) -> int:
        """The largest batch max timestamp (ms), or -1 for an empty segment: what retention by
        time compares with ``retention.ms``."""
        return max((b.max_timestamp for b in self.batches), default=-1)

    @property
    def next_offset(self) -> int:
        """One past the last offset held (the base offset if empty)."""
        return self.batches[-1].last_offset + 1 if self.batches else self.base_offset

    def to_json(self) -> dict:
        return {
            "file": str(self.log),
            "base_offset": self.base_offset,
            "batches": [b.to_json() for b in self.batches],
            "index": [e.to_json() for e in self.index],
            "timeindex": [e.to_json() for e in self.timeindex],
        }


def read_segment(log_path: str | Path, *, records: bool = True, check_crc: bool = True,
                 verify: bool = False) -> Segment:
    """The segment whose ``.log`` file is ``log_path``, with its ``.index`` and ``.timeindex``
    (empty lists if they are missing). The indexes are read before the log, so on the active
    segment every index entry points into batches that are read.

    Raises:
        FileNotFoundError: the ``.log`` file is gone (deleted by retention or the cleaner).
        SegmentFormatError, CorruptBatchError: see ``read_log``.
    """
    p = Path(log_path)
    base = int(p.stem)

    def maybe(reader, suffix):
        try:
            return reader(p.with_suffix(suffix), base)
        except FileNotFoundError:
            return []

    index = maybe(read_offset_index, ".index")
    timeindex = maybe(read_time_index, ".timeindex")
    log = read_log(p, records=records, check_crc=check_crc, verify=verify)
    return Segment(base, p, log.batches, index, timeindex, log.trailing_bytes)


def read_partition(partition_dir: str | Path, *, records: bool = True, check_crc: bool = True,
                   verify: bool = False) -> list[Segment]:
    """Every segment of a partition folder, by base offset. A segment deleted by the broker
    between listing and reading is skipped.

    Raises:
        FileNotFoundError: the folder does not exist.
        SegmentFormatError, CorruptBatchError: see ``read_log``.
    """
    out = []
    for f in segment_files(partition_dir):
        if f.kind != "log":
            continue
        try:
            out.append(read_segment(f.path, records=records, check_crc=check_crc, verify=verify))
        except FileNotFoundError:
            continue
    return out


def partition_json(segments: Iterable[Segment]) -> dict:
    """``{"segments": [...]}``, the JSON ``kafkalab segments --json`` prints."""
    return {"segments": [s.to_json() for s in segments]}


# ----------------------------------------------------------------------------- lookups


@dataclass(frozen=True)
class IndexLookup:
    """The result of a binary search in an offset or time index.

    ``entry``: the entry found, or None when the target is before the first entry (then the
    search starts at the segment's position 0); ``probes``: the entry numbers the search
    looked at, in order.
    """

    entry: IndexEntry | TimeIndexEntry | None
    probes: tuple[int, ...]

    @property
    def position(self) -> int:
        """Where to start reading the ``.log`` file (0 if no entry)."""
        return self.entry.position if isinstance(self.entry, IndexEntry) else 0


def _floor_search(keys: Sequence[int], target: int) -> tuple[int, tuple[int, ...]]:
    """Index of the largest key <= target (-1 if none), and the probes of the binary search."""
    lo, hi, probes = 0, len(keys) - 1, []
    if not keys or keys[0] > target:
        return -1, (0,) if keys else ()
    while lo < hi:
        mid = (lo + hi + 1) // 2
        probes.append(mid)
        if keys[mid] <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo, tuple(probes)


def lookup_offset(index: Sequence[IndexEntry], target: int) -> IndexLookup:
    """``OffsetIndex.lookup``: the entry with the largest offset <= ``target`` (binary search).

    Kafka first searches the "warm" tail of the index (the last 8 KiB of entries, which the
    page cache most likely holds: ``AbstractIndex.largestLowerBoundSlotFor``); the entry it
    finds is the same.
    """
    i, probes = _floor_search([e.offset for e in index], target)
    return IndexLookup(index[i] if i >= 0 else None, probes)


def lookup_timestamp(timeindex: Sequence[TimeIndexEntry], target_ms: int) -> IndexLookup:
    """``TimeIndex.lookup``: the entry with the largest timestamp <= ``target_ms``."""
    i, probes = _floor_search([e.timestamp for e in timeindex], target_ms)
    return IndexLookup(timeindex[i] if i >= 0 else None, probes)


@dataclass(frozen=True)
class Scan:
    """What a scan of a ``.log`` file from ``start_position`` read: the batch found (None if
    none), how many batch headers it read and how many bytes it skipped over to get there."""

    batch: RecordBatch | None
    headers_read: int
    bytes_skipped: int
    start_position: int


def _header_batch(head: bytes, position: int) -> RecordBatch:
    fields = read_batch_header(head)
    if fields.magic != 2:
        raise SegmentFormatError(f"batch at position {position} has magic {fields.magic}; expected 2")
    return RecordBatch(position, *fields)


def scan_for_offset(log_path: str | Path, target: int, start_position: int = 0) -> Scan:
    """``FileRecords.searchForOffsetFromPosition``: from ``start_position``, read batch headers
    (61 bytes each, seeking over the records) until a batch whose last offset is >= ``target``.

    Returns:
        Scan with that batch (header only, ``records`` None), or with None if the file ends first.

    Raises:
        SegmentFormatError: a header that is not a v2 batch.
    """
    pos = start_position
    read = 0
    with open(log_path, "rb") as fh:
        while True:
            fh.seek(pos)
            head = fh.read(BATCH_HEADER_SIZE)
            if len(head) < BATCH_HEADER_SIZE:
                return Scan(None, read, pos - start_position, start_position)
            read += 1
            batch = _header_batch(head, pos)
            if batch.last_offset >= target:
                return Scan(batch, read, pos - start_position, start_position)
            pos = batch.next_position


@dataclass(frozen=True)
class TimestampLookup:
    """How ``offset_for_timestamp`` found its answer.

    ``offset``/``timestamp``: the first record at or after the target time (None if no record
    is that recent); ``segment``: base offset of the segment searched; ``time_entry``: the time
    index entry used (None: none at or before the target); ``start_position``: where the scan
    of the ``.log`` started (from the offset index).
    """

    offset: int | None
    timestamp: int | None
    segment: int | None
    time_entry: TimeIndexEntry | None
    start_position: int


def offset_for_timestamp(segments: Sequence[Segment], target_ms: int,
                         log_start_offset: int | None = None) -> TimestampLookup:
    """The offset a ListOffsets request for ``target_ms`` returns (what a consumer's
    ``offsets_for_times`` gets): the earliest offset whose record timestamp is >= ``target_ms``.

    As the broker does it (``UnifiedLog.fetchOffsetByTimestamp``,
    ``LogSegment.findOffsetByTimestamp``, ``FileRecords.searchForTimestamp``): take the first
    segment whose largest timestamp is >= the target; in its time index find the largest
    timestamp <= the target and the offset beside it; look that offset up in the offset index
    for a file position; scan batches from there, skipping any whose max timestamp is below
    the target, and in the first that qualifies return the first record at or after the target.

    Args:
        segments: the partition's segments read with records (``read_partition``).
        target_ms: a timestamp, ms since the epoch.
        log_start_offset: offsets below it are not returned (default: first segment's base).

    Raises:
        ValueError: the segment to search was read without records.
    """
    start = log_start_offset if log_start_offset is not None else (segments[0].base_offset if segments else 0)
    seg = next((s for s in segments if s.largest_timestamp >= target_ms), None)
    if seg is None:
        return TimestampLookup(None, None, None, None, 0)
    te = lookup_timestamp(seg.timeindex, target_ms).entry
    hint = te.offset if isinstance(te, TimeIndexEntry) else seg.base_offset
    position = lookup_offset(seg.index, max(hint, start)).position
    for b in seg.batches:
        if b.position < position or b.max_timestamp < target_ms:
            continue
        if b.records is None:
            raise ValueError(f"segment {seg.base_offset} was read without records")
        for r in b.records:
            if r.timestamp >= target_ms and r.offset >= start:
                return TimestampLookup(r.offset, r.timestamp, seg.base_offset, te, position)
    return TimestampLookup(None, None, seg.base_offset, te, position)


# ----------------------------------------------------------------------------- the broker's rules


def expected_offset_index(batches: Sequence[RecordBatch], index_interval_bytes: int = 4096) -> list[IndexEntry]:
    """The ``.index`` entries ``LogSegment.append`` writes for ``batches`` appended in order to
    an empty segment: before appending a batch, if more than ``index_interval_bytes`` were
    appended since the last entry, write (the batch's last offset, its position).

    Source: storage ``LogSegment.append`` (Kafka 4.3: one check per batch), topic config
    ``index.interval.bytes`` (default 4096).
    """
    out, since = [], 0
    for b in batches:
        if since > index_interval_bytes:
            out.append(IndexEntry(b.last_offset, b.position))
            since = 0
        since += b.size
    return out


def expected_time_index(batches: Sequence[RecordBatch], index_interval_bytes: int = 4096,
                        rolled: bool = False) -> list[TimeIndexEntry]:
    """The ``.timeindex`` entries written beside ``expected_offset_index``: at each index point,
    (largest batch max timestamp so far, last offset of that batch) if that timestamp is larger
    than the last entry's; when the segment rolls (``rolled``) one more such entry.

    Source: storage ``LogSegment.append``, ``LogSegment.onBecomeInactiveSegment``,
    ``TimeIndex.maybeAppend``.
    """
    out: list[TimeIndexEntry] = []
    since, max_ts, max_off, last_ts = 0, -1, -1, -1
    for b in batches:
        if b.max_timestamp > max_ts:
            max_ts, max_off = b.max_timestamp, b.last_offset
        if since > index_interval_bytes:
            if max_ts > last_ts:
                out.append(TimeIndexEntry(max_ts, max_off))
                last_ts = max_ts
            since = 0
        since += b.size
    if rolled and max_ts > last_ts:
        out.append(TimeIndexEntry(max_ts, max_off))
    return out


def size_retention_deletes(segments: Sequence[tuple[int, int]], retention_bytes: int) -> list[int]:
    """Base offsets of the segments retention by size deletes, given ``(base_offset, size)`` of
    every segment, oldest first (the active one last).

    ``retention.bytes`` is per partition: with ``excess = total - retention_bytes``, delete
    segments from the oldest while the next one fits entirely in the excess; stop at the first
    that does not. Whole segments only, so the partition may stay above the limit by less than
    a segment. (The broker also keeps the active segment if it is empty and never deletes past
    the high watermark.)

    Source: ``UnifiedLog.deleteRetentionSizeBreachedSegments`` and ``deletableSegments``.
    """
    total = sum(size for _, size in segments)
    if retention_bytes < 0 or total < retention_bytes:
        return []
    excess = total - retention_bytes
    out = []
    for base, size in segments:
        if excess - size < 0:
            break
        excess -= size
        out.append(base)
    return out


def time_retention_deletes(segments: Sequence[tuple[int, int]], retention_ms: int, now_ms: int) -> list[int]:
    """Base offsets of the segments retention by time deletes, given ``(base_offset,
    largest_timestamp)`` of every segment, oldest first: the oldest segments whose *newest*
    record is older than ``retention_ms`` at ``now_ms``, up to the first that is not. The age
    is that of the record timestamps, not of the file.

    Source: ``UnifiedLog.deleteRetentionMsBreachedSegments`` (``startMs -
    segment.largestTimestamp > retentionMs``) and ``deletableSegments``.
    """
    if retention_ms < 0:
        return []
    out = []
    for base, largest in segments:
        if not now_ms - largest > retention_ms:
            break
        out.append(base)
    return out


def compacted_view(records: Sequence[tuple[int, bytes | None, bytes | None]], clean_upto: int,
                   drop_tombstones: bool) -> list[tuple[int, bytes | None, bytes | None]]:
    """The records a compacted partition keeps, given every ``(offset, key, value)`` it was
    written, once the cleaner has cleaned everything below ``clean_upto`` (the base offset of
    the active segment: the cleaner never touches the active segment).

    Below ``clean_upto`` only the record with the latest offset of each key stays; a
    tombstone (value None) stays too unless ``drop_tombstones`` (its batch's delete horizon
    has passed and a later pass ran); keyless records are dropped. From ``clean_upto`` on,
    everything stays. Offsets never change: a compacted log has gaps.

    Source: Kafka documentation, Design > Log Compaction; storage ``Cleaner.shouldRetainRecord``.
    """
    latest: dict[bytes, int] = {}
    for off, key, _ in records:
        if off < clean_upto and key is not None:
            latest[key] = off
    out = []
    for off, key, value in records:
        if off >= clean_upto:
            out.append((off, key, value))
        elif key is not None and latest[key] == off and (value is not None or not drop_tombstones):
            out.append((off, key, value))
    return out


# ----------------------------------------------------------------------------- replicas on this machine


def replica_dir(topic: str, partition: int, broker: int | None = None) -> tuple[int, Path]:
    """``(broker id, folder)`` of a replica of ``topic``-``partition`` on this lab's local
    cluster (``.kafkalab/cluster/node-<id>/data``).

    ``broker`` None: the lowest broker id that holds a folder for it (read from the disks
    only; the partition's leader is ``kafkalab.coordinators.partition_leader``).

    Raises:
        KafkalabError: unknown broker id, or no such folder on that broker (the compose
            backend keeps data inside its containers, where this reader cannot see it).
    """
    from . import config

    if broker is None:
        for b in config.BROKER_IDS:
            if partition in partition_dirs(config.Node(b, "broker").data_dir, topic):
                broker = b
                break
    if broker is None or broker not in config.BROKER_IDS:
        raise KafkalabError(f"no broker holds {topic}-{partition} here (broker ids: "
                            f"{', '.join(map(str, config.BROKER_IDS))})" if broker is None else
                            f"no broker {broker} (broker ids: {', '.join(map(str, config.BROKER_IDS))})")
    data_dir = config.Node(broker, "broker").data_dir
    folder = partition_dirs(data_dir, topic).get(partition)
    if folder is None:
        raise KafkalabError(f"broker {broker} has no folder {partition_dir_name(topic, partition)} in {data_dir} "
                            "(not a replica there, or the cluster runs on the compose backend, whose data "
                            "stays inside the containers)")
    return broker, folder
