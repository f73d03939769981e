"""kafkalab.segments: partition folders, segment files, and kafka-dump-log output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafkalab import segments

#: Captured from kafka-dump-log (Kafka 4.3.1) on this lab: a librdkafka batch (no producer
#: id) and two batches of Spark's Java producer (idempotent: producer id and sequences).
DUMP_SAMPLE = """\
Dumping /data/tour-red419a-py-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 58 count: 59 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795249201823 size: 15768 magic: 2 compresscodec: none crc: 2028429632 isvalid: true
Dumping /data/tour-red419a-java-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 46 count: 47 baseSequence: 0 lastSequence: 46 producerId: 1001 producerEpoch: 0 partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795249223134 size: 12568 magic: 2 compresscodec: none crc: 3272146273 isvalid: true
baseOffset: 47 lastOffset: 49 count: 3 baseSequence: 47 lastSequence: 49 producerId: 1001 producerEpoch: 0 partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 12568 CreateTime: 1795249223935 size: 859 magic: 2 compresscodec: none crc: 3758039428 isvalid: true
"""


def test_parse_dump_log_reads_every_batch_and_its_file() -> None:
    b = segments.parse_dump_log(DUMP_SAMPLE)
    assert [x.file.split("/")[2] for x in b] == ["tour-red419a-py-0", "tour-red419a-java-0", "tour-red419a-java-0"]
    assert (b[0].producer_id, b[0].base_sequence, b[0].count, b[0].size) == (-1, -1, 59, 15768)
    assert (b[1].producer_id, b[1].producer_epoch, b[1].base_sequence, b[1].last_sequence) == (1001, 0, 0, 46)
    assert b[2].position == b[1].position + b[1].size  # batches sit back to back
    assert not any(x.is_transactional or x.is_control for x in b)
    assert {x.magic for x in b} == {2} and {x.compresscodec for x in b} == {"none"}


def test_partition_of_reads_the_folder_name() -> None:
    assert segments.partition_of("/d/tour-r1-flights-java-2/00000000000000000000.log") == 2
    with pytest.raises(ValueError):
        segments.partition_of("/d/meta/00000000000000000000.log")


def test_parse_dump_log_rejects_a_batch_line_it_does_not_understand() -> None:
    with pytest.raises(ValueError, match="producerId"):
        segments.parse_dump_log("baseOffset: 0 lastOffset: 1 count: 2")


def test_partition_dirs_matches_only_live_folders_of_that_topic(tmp_path: Path) -> None:
    for name in ["t-0", "t-1", "t-10", "t-x-0", "t-1-0", "t-2.0123abcd-delete", "tt-0", "t-3-future"]:
        (tmp_path / name).mkdir()
    (tmp_path / "t-4").write_text("a file, not a folder")
    assert list(segments.partition_dirs(tmp_path, "t")) == [0, 1, 10]
    assert list(segments.partition_dirs(tmp_path, "t-1")) == [0]
    assert segments.partition_dirs(tmp_path / "missing", "t") == {}


def test_segment_files_lists_segments_by_base_offset_then_kind(tmp_path: Path) -> None:
    for base in (0, 1018):
        for suffix, size in ((".timeindex", 12), (".log", 100), (".index", 8)):
            (tmp_path / f"{base:020d}{suffix}").write_bytes(b"\0" * size)
    for other in ("leader-epoch-checkpoint", "partition.metadata", f"{0:020d}.snapshot"):
        (tmp_path / other).write_text("x")
    files = segments.segment_files(tmp_path)
    assert [(f.base_offset, f.kind) for f in files] == [
        (0, "log"), (0, "index"), (0, "timeindex"), (1018, "log"), (1018, "index"), (1018, "timeindex")]
    assert segments.log_bytes(tmp_path) == 200


def test_allocated_bytes_show_a_sparse_preallocated_index(tmp_path: Path) -> None:
    p = tmp_path / f"{0:020d}.index"
    with open(p, "wb") as fh:
        fh.truncate(10 * 1024 * 1024)  # like a preallocated active-segment index
    (f,) = segments.segment_files(tmp_path)
    assert f.size == 10 * 1024 * 1024
    if hasattr(os.stat(p), "st_blocks"):
        assert f.allocated < f.size
