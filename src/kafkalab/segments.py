"""Partitions on disk: the folders and segment files a broker writes, and what Kafka's
``kafka-dump-log`` says about the record batches inside.

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
number of entries, and trimmed when the segment rolls.

Sources: Kafka documentation, Implementation > Log and > Message Format (4.3);
storage ``LogSegment``, ``OffsetIndex``, ``TimeIndex``, ``AbstractIndex`` (file naming,
entry sizes, preallocation); ``org.apache.kafka.tools.DumpLogSegments`` (4.3 output format).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
    ``.snapshot``, ``.deleted``) are left out."""
    files: list[SegmentFile] = []
    for p in Path(partition_dir).iterdir():
        if p.suffix in SEGMENT_SUFFIXES and p.stem.isdigit() and len(p.stem) == OFFSET_DIGITS:
            st = p.stat()
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


# ----------------------------------------------------------------------------- kafka-dump-log


@dataclass(frozen=True)
class DumpedBatch:
    """One record batch as ``kafka-dump-log --files X.log`` prints it (Kafka 4.3).

    ``producer_id`` is -1 for a producer without idempotence; an idempotent or transactional
    producer writes its producer id, epoch and the batch's first sequence number.
    """

    file: str
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


_BATCH_FIELDS = re.compile(r"(\w+): (\S+)")


def parse_dump_log(text: str) -> list[DumpedBatch]:
    """Record batches from the text ``kafka-dump-log --files a.log,b.log`` prints (without
    ``--print-data-log``). Lines other than ``Dumping <file>`` and ``baseOffset: ...`` are
    skipped.

    Raises:
        ValueError: a batch line lacks a field this parser needs (the format changed).
    """
    batches: list[DumpedBatch] = []
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Dumping "):
            current = line[len("Dumping "):].strip()
            continue
        if not line.startswith("baseOffset:"):
            continue
        f = dict(_BATCH_FIELDS.findall(line))
        try:
            batches.append(DumpedBatch(
                file=current,
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
            ))
        except KeyError as e:
            raise ValueError(f"kafka-dump-log batch line without {e.args[0]!r}: {line!r}") from None
    return batches
