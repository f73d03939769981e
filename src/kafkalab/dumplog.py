"""Kafka's own ``kafka-dump-log``: run it, and parse what it prints, in one place.

``kafka-dump-log --files a.log,a.index,a.timeindex [--print-data-log]``
(``org.apache.kafka.tools.DumpLogSegments`` in Kafka 4.3) prints, per file, a ``Dumping
<path>`` line, then for a ``.log`` one line per record batch (``baseOffset: ... isvalid:
true``) and, with ``--print-data-log``, one line per record under it (``| offset: ...``);
for an ``.index`` ``offset: N position: P`` lines, for a ``.timeindex`` ``timestamp: T
offset: N`` lines.

==========================  ====================================================================
``run(files, print_data)``  the tool on ``files`` (one JVM for all), parsed: a ``Dump``
``parse(text)``             the same from captured text
``Dump``                    ``files`` (path -> ``DumpedFile``), ``batches``, ``records``
``DumpedBatch``             one batch line, with its ``partition`` and its ``records``
``DumpedRecord``            one record line, with its batch's producer id, epoch, partition
``batches_table``           batches as a DataFrame, one row per batch
``diff_against_dump``       ``kafkalab.segments``' reading of a segment against the tool's
==========================  ====================================================================

Field names follow ``kafkalab.segments`` where the tool prints the same thing; a record's
``value`` is what the tool prints after ``payload:`` (UTF-8 text).

Sources: ``org.apache.kafka.tools.DumpLogSegments`` (Kafka 4.3, its output format); Kafka
documentation, Implementation > Message Format (record batch, control records); KIP-98
(producer id, sequence, transaction markers); KIP-534 (delete horizon).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from . import segments
from .segments import Segment

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class DumpedRecord:
    """One record line of ``kafka-dump-log --print-data-log`` (``| offset: ...``).

    ``key``/``value`` are the text the tool printed (UTF-8 decoded; None when absent: a null
    key, a null value, or a control record); ``control``: ``"COMMIT"``/``"ABORT"`` for an end
    transaction marker, with ``coordinator_epoch``. ``timestamp`` is ms since the epoch, of
    type ``timestamp_type`` (``CreateTime`` or ``LogAppendTime``). ``sequence`` is the batch's
    base sequence plus the record's offset delta (-1 without idempotence). The fields after
    ``coordinator_epoch`` are copied from the record's batch.
    """

    offset: int
    timestamp_type: str
    timestamp: int
    key_size: int
    value_size: int
    sequence: int | None = None
    header_keys: tuple[str, ...] = ()
    key: str | None = None
    value: str | None = None
    control: str | None = None
    coordinator_epoch: int | None = None
    partition: int | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    is_transactional: bool = False

    @property
    def kind(self) -> str:
        """``"data"`` for a data record, else the control type (``"COMMIT"``, ``"ABORT"``)."""
        return self.control or "data"


@dataclass(frozen=True)
class DumpedBatch:
    """One record batch as ``kafka-dump-log --files X.log`` prints it (Kafka 4.3).

    ``producer_id`` is -1 for a producer without idempotence; an idempotent or transactional
    producer writes its producer id, epoch and the batch's first sequence number (its records
    carry ``base_sequence .. last_sequence``). ``size`` is the batch's bytes on disk.
    ``partition`` comes from the file's folder (``<topic>-<partition>``; None for another
    folder name). The fields after ``compresscodec`` are filled when the line has them;
    ``records`` only with ``--print-data-log`` (or ``--deep-iteration``).
    """

    file: str
    partition: int | None
    base_offset: int
    last_offset: int
    count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    partition_leader_epoch: int
    is_transactional: bool
    is_control: bool
    position: int
    size: int
    magic: int
    compresscodec: str
    timestamp_type: str | None = None
    max_timestamp: int | None = None
    delete_horizon_ms: int | None = None
    crc: int | None = None
    is_valid: bool | None = None
    records: tuple[DumpedRecord, ...] = ()


@dataclass
class DumpedFile:
    """What ``kafka-dump-log`` printed for one file: batches (``.log``), ``(offset, position)``
    entries (``.index``) or ``(timestamp, offset)`` entries (``.timeindex``), and the invalid
    bytes it reported at the end of a ``.log``."""

    path: str
    batches: list[DumpedBatch] = field(default_factory=list)
    index: list[tuple[int, int]] = field(default_factory=list)
    timeindex: list[tuple[int, int]] = field(default_factory=list)
    trailing_bytes: int = 0


@dataclass
class Dump:
    """Everything one ``kafka-dump-log`` run printed: ``files`` by path (the path after
    ``Dumping``), in the order printed."""

    files: dict[str, DumpedFile] = field(default_factory=dict)

    @property
    def batches(self) -> list[DumpedBatch]:
        """Every batch of every file, in the order printed."""
        return [b for f in self.files.values() for b in f.batches]

    @property
    def records(self) -> list[DumpedRecord]:
        """Every record line (data and control) of every batch, in the order printed."""
        return [r for b in self.batches for r in b.records]

    def get(self, path: str | Path) -> DumpedFile | None:
        """What the tool printed for ``path``, or None if it printed nothing for it."""
        return self.files.get(str(path))


_BATCH_FIELDS = re.compile(r"(\w+): (\S+)")
_RECORD_LINE = re.compile(
    r"\| offset: (-?\d+) (\w+): (-?\d+) keySize: (-?\d+) valueSize: (-?\d+)"
    r"(?: sequence: (-?\d+) headerKeys: \[(.*?)\])?(.*)$")
_INDEX_LINE = re.compile(r"offset: (-?\d+) position: (-?\d+)$")
_TIMEINDEX_LINE = re.compile(r"timestamp: (-?\d+) offset: (-?\d+)$")
_TRAILING = re.compile(r"Found (\d+) invalid bytes at the end of ")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime", "NO_TIMESTAMP_TYPE")


def _partition_of(path: str) -> int | None:
    try:
        return segments.partition_of(path)
    except ValueError:
        return None


def _dumped_batch(file: str, line: str) -> DumpedBatch:
    f = dict(_BATCH_FIELDS.findall(line))
    ts_type = next((t for t in _TIMESTAMP_TYPES if t in f), None)
    horizon = f.get("deleteHorizonMs", "")
    m = re.fullmatch(r"OptionalLong\[(-?\d+)\]", horizon)
    try:
        return DumpedBatch(
            file=file,
            partition=_partition_of(file),
            base_offset=int(f["baseOffset"]),
            last_offset=int(f["lastOffset"]),
            count=int(f["count"]),
            producer_id=int(f["producerId"]),
            producer_epoch=int(f["producerEpoch"]),
            base_sequence=int(f["baseSequence"]),
            last_sequence=int(f["lastSequence"]),
            partition_leader_epoch=int(f["partitionLeaderEpoch"]),
            is_transactional=f["isTransactional"] == "true",
            is_control=f["isControl"] == "true",
            position=int(f["position"]),
            size=int(f["size"]),
            magic=int(f["magic"]),
            compresscodec=f["compresscodec"],
            timestamp_type=ts_type,
            max_timestamp=int(f[ts_type]) if ts_type else None,
            delete_horizon_ms=int(m.group(1)) if m else None,
            crc=int(f["crc"]) if "crc" in f else None,
            is_valid=(f["isvalid"] == "true") if "isvalid" in f else None,
        )
    except KeyError as e:
        raise ValueError(f"kafka-dump-log batch line without {e.args[0]!r}: {line!r}") from None


def _dumped_record(line: str, batch: DumpedBatch) -> DumpedRecord:
    m = _RECORD_LINE.match(line)
    if not m:
        raise ValueError(f"kafka-dump-log record line not understood: {line!r}")
    offset, ts_type, ts, ksize, vsize, seq, hkeys, rest = m.groups()
    ksize_i, vsize_i = int(ksize), int(vsize)
    control = epoch = key = payload = None
    cm = re.match(r" endTxnMarker: (\w+) coordinatorEpoch: (-?\d+)", rest)
    if cm:
        control, epoch = cm.group(1), int(cm.group(2))
    elif rest.startswith(" key: "):
        body = rest[len(" key: "):]
        # the key is printed as UTF-8 text and may itself contain " payload: ": cut it where its
        # UTF-8 length reaches keySize, if the rest starts there; else at the first " payload: "
        cut, nbytes = 0, 0
        while nbytes < ksize_i and cut < len(body):
            nbytes += len(body[cut].encode("utf-8", "surrogatepass"))
            cut += 1
        if nbytes == ksize_i and (body[cut:].startswith(" payload: ") or (vsize_i < 0 and cut == len(body))):
            key, tail = body[:cut], body[cut:]
        else:
            key, sep, tail = body.partition(" payload: ")
            tail = sep + tail
        if tail.startswith(" payload: "):
            payload = tail[len(" payload: "):]
    elif rest.startswith(" payload: "):
        payload = rest[len(" payload: "):]
    return DumpedRecord(
        offset=int(offset), timestamp_type=ts_type, timestamp=int(ts), key_size=ksize_i, value_size=vsize_i,
        sequence=int(seq) if seq is not None else None,
        header_keys=tuple(k for k in hkeys.split(",") if k) if hkeys else (),
        key=key, value=payload, control=control, coordinator_epoch=epoch,
        partition=batch.partition, producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
        is_transactional=batch.is_transactional,
    )


def parse(text: str) -> Dump:
    """Everything ``kafka-dump-log --files a.log,a.index,a.timeindex [--print-data-log]``
    printed. Record lines belong to the batch line above them; lines before any ``Dumping``
    line belong to file ``""``; other lines (``Log starting offset``...) are skipped.

    Raises:
        ValueError: a batch or record line lacks a field this parser needs (the format
            changed), or a record line comes before any batch line.
    """
    files: dict[str, DumpedFile] = {}
    current: DumpedFile | None = None
    pending: list[list[DumpedRecord]] = []
    for raw in text.split("\n"):  # the tool ends lines with println's "\n"; other breaks may be payload
        line = raw.rstrip("\r")  # trailing spaces stay: they may belong to a printed payload
        if line.startswith("Dumping "):
            if current is not None:
                current.batches = [_with_records(b, r) for b, r in zip(current.batches, pending)]
            path = line[len("Dumping "):].strip()
            current = files.setdefault(path, DumpedFile(path))
            pending = [[] for _ in current.batches]
            continue
        if current is None:
            if not line.startswith(("baseOffset:", "| offset:")):
                continue
            current = files.setdefault("", DumpedFile(""))
        if line.startswith("baseOffset:"):
            current.batches.append(_dumped_batch(current.path, line))
            pending.append([])
        elif line.startswith("| offset:"):
            if not pending:
                raise ValueError(f"kafka-dump-log record line before any batch: {line!r}")
            pending[-1].append(_dumped_record(line, current.batches[-1]))
        elif (m := _TRAILING.match(line)):
            current.trailing_bytes = int(m.group(1))
        elif current.path.endswith(".index") and (m := _INDEX_LINE.match(line)):
            current.index.append((int(m.group(1)), int(m.group(2))))
        elif current.path.endswith(".timeindex") and (m := _TIMEINDEX_LINE.match(line)):
            current.timeindex.append((int(m.group(1)), int(m.group(2))))
    if current is not None:
        current.batches = [_with_records(b, r) for b, r in zip(current.batches, pending)]
    return Dump(files)


def _with_records(batch: DumpedBatch, records: list[DumpedRecord]) -> DumpedBatch:
    return replace(batch, records=batch.records + tuple(records)) if records else batch


def run(files: Iterable[str | Path], print_data: bool = False, timeout_s: float = 120.0) -> Dump:
    """Run Kafka's ``kafka-dump-log --files`` on ``files`` (``.log``, ``.index``,
    ``.timeindex``; one JVM for all, a few seconds) and parse it. ``print_data`` adds
    ``--print-data-log``: every record, key and value. No files: an empty ``Dump``, no JVM.

    Raises:
        KafkalabError: the tool failed (its stderr in the message), e.g. a file the broker
            deleted meanwhile; ValueError: as ``parse``.
    """
    from . import cluster

    paths = [str(f) for f in files]
    if not paths:
        return Dump()
    args = ["--files", ",".join(paths)] + (["--print-data-log"] if print_data else [])
    return parse(cluster.tool("kafka-dump-log", *args, timeout_s=timeout_s).stdout)


#: Columns of ``batches_table``.
BATCH_COLUMNS = ["partition", "base_offset", "last_offset", "count", "producer_id", "producer_epoch",
                 "base_sequence", "last_sequence", "is_transactional", "position", "size"]


def batches_table(batches: Iterable[DumpedBatch]) -> "pd.DataFrame":
    """Dumped record batches as a DataFrame, one row per batch, columns ``BATCH_COLUMNS``:
    partition (from the file's folder), offsets, record count, producer id and epoch, base and
    last sequence, transactional flag, position and size (bytes)."""
    import pandas as pd

    return pd.DataFrame([{c: getattr(b, c) for c in BATCH_COLUMNS} for b in batches], columns=BATCH_COLUMNS)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def diff_against_dump(segment: Segment, dumped: Dump, limit: int = 20) -> list[str]:
    """Field-by-field differences between ``segment`` (read by ``kafkalab.segments``) and what
    ``kafka-dump-log --print-data-log`` printed for its three files (``run``); an empty list
    when they agree.

    Compared: every batch field the tool prints (offsets, count, sequences, producer id and
    epoch, leader epoch, transactional/control flags, delete horizon, position, timestamp type
    and max timestamp, size, magic, codec, CRC and its validity); per record the offset,
    timestamp, key and value sizes, sequence, header keys, key and value text, and the end
    transaction marker of control records; the index and time-index entries; the invalid
    bytes at the end. One difference in format is not one in content: for an index that has
    no entry yet, the tool prints the preallocated file's first zero-filled slot as
    ``offset: <base> position: 0`` (``timestamp: 0 offset: <base>``); the reader returns no
    entry.
    """
    out: list[str] = []

    def check(what: str, mine, theirs) -> None:
        if mine != theirs and len(out) < limit:
            out.append(f"{what}: reader {mine!r}, kafka-dump-log {theirs!r}")

    log = dumped.get(segment.log)
    if log is None:
        return [f"kafka-dump-log printed nothing for {segment.log}"]
    check("batches", len(segment.batches), len(log.batches))
    for b, d in zip(segment.batches, log.batches):
        at = f"batch @{b.position}"
        for name, mine, theirs in (
            ("base_offset", b.base_offset, d.base_offset), ("last_offset", b.last_offset, d.last_offset),
            ("count", b.records_count, d.count), ("producer_id", b.producer_id, d.producer_id),
            ("producer_epoch", b.producer_epoch, d.producer_epoch),
            ("base_sequence", b.base_sequence, d.base_sequence), ("last_sequence", b.last_sequence, d.last_sequence),
            ("partition_leader_epoch", b.partition_leader_epoch, d.partition_leader_epoch),
            ("is_transactional", b.is_transactional, d.is_transactional), ("is_control", b.is_control, d.is_control),
            ("delete_horizon_ms", b.delete_horizon_ms, d.delete_horizon_ms), ("position", b.position, d.position),
            ("timestamp_type", b.timestamp_type, d.timestamp_type), ("max_timestamp", b.max_timestamp, d.max_timestamp),
            ("size", b.size, d.size), ("magic", b.magic, d.magic), ("compression", b.compression, d.compresscodec),
            ("crc", b.crc, d.crc), ("crc_valid", b.crc_valid, d.is_valid),
        ):
            check(f"{at} {name}", mine, theirs)
        if b.records is None or not d.records:
            continue
        check(f"{at} records", len(b.records), len(d.records))
        marker = b.control
        for r, dr in zip(b.records, d.records):
            rat = f"{at} record {r.offset}"
            check(f"{rat} offset", r.offset, dr.offset)
            check(f"{rat} timestamp", (b.timestamp_type, r.timestamp), (dr.timestamp_type, dr.timestamp))
            check(f"{rat} key size", -1 if r.key is None else len(r.key), dr.key_size)
            check(f"{rat} value size", -1 if r.value is None else len(r.value), dr.value_size)
            check(f"{rat} sequence", r.sequence, dr.sequence)
            check(f"{rat} header keys", tuple(h.key for h in r.headers), dr.header_keys)
            if b.is_control:
                check(f"{rat} marker", (marker.type, marker.coordinator_epoch) if marker else None,
                      (dr.control, dr.coordinator_epoch))
            else:
                check(f"{rat} key", _text(r.key), dr.key)
                check(f"{rat} payload", _text(r.value), dr.value)
    check("trailing bytes", segment.trailing_bytes, log.trailing_bytes)
    index = dumped.get(segment.log.with_suffix(".index"))
    if index is not None:
        theirs = index.index
        if not segment.index and theirs == [(segment.base_offset, 0)]:
            theirs = []
        check("index", [(e.offset, e.position) for e in segment.index], theirs)
    timeindex = dumped.get(segment.log.with_suffix(".timeindex"))
    if timeindex is not None:
        theirs = timeindex.timeindex
        if not segment.timeindex and theirs == [(0, segment.base_offset)]:
            theirs = []
        check("timeindex", [(e.timestamp, e.offset) for e in segment.timeindex], theirs)
    return out
