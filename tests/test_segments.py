"""kafkalab.segments: partition folders, segment files, the record batch / index readers
(on bytes built here from the documented layout), the broker's rules, the reader against
kafka-dump-log text (``kafkalab.dumplog.diff_against_dump``), and ``kafkalab segments``. Pure:
no cluster (tests/test_segments_live.py compares with Kafka)."""

from __future__ import annotations

import gzip
import json
import os
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalab import dumplog, segments
from kafkalab.cli import segments_command
from kafkalab.errors import KafkalabError

def test_partition_of_reads_the_folder_name() -> None:
    assert segments.partition_of("/d/tour-r1-flights-java-2/00000000000000000000.log") == 2
    with pytest.raises(ValueError):
        segments.partition_of("/d/meta/00000000000000000000.log")


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


# ----------------------------------------------------------------------------- CRC-32C


#: RFC 3720 (iSCSI) appendix B.4 test vectors for CRC-32C, and the check value of "123456789".
CRC32C_VECTORS = [
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"", 0),
]


@pytest.mark.parametrize("data,crc", CRC32C_VECTORS)
def test_crc32c_matches_the_rfc_3720_vectors(data: bytes, crc: int) -> None:
    assert segments.crc32c(data) == crc
    assert segments.crc32c(memoryview(b"x" + data)[1:]) == crc  # read_log passes slices of a memoryview


# ----------------------------------------------------------------------------- a v2 batch encoder


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b, z = z & 0x7F, z >> 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _bytes_field(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def encode_batch(base_offset: int, records: list[tuple], *, attributes: int = 0, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1, leader_epoch: int = 0,
                 base_timestamp: int | None = None, max_timestamp: int | None = None,
                 gzip_records: bool = False, offset_deltas: list[int] | None = None,
                 compress=None) -> bytes:
    """A record batch v2 laid out as the Kafka documentation (Implementation > Message Format)
    describes it. ``records``: ``(key, value, timestamp, headers)``; headers ``[(str, bytes|None)]``."""
    ts0 = base_timestamp if base_timestamp is not None else records[0][2]
    deltas = offset_deltas or list(range(len(records)))
    body = b""
    for delta, (key, value, ts, headers) in zip(deltas, records):
        rec = bytes([0]) + _varint(ts - ts0) + _varint(delta) + _bytes_field(key) + _bytes_field(value)
        rec += _varint(len(headers)) + b"".join(_bytes_field(k.encode()) + _bytes_field(v) for k, v in headers)
        body += _varint(len(rec)) + rec
    if gzip_records:
        body = gzip.compress(body)
        attributes |= 1
    if compress is not None:  # (codec id, function of the records section)
        codec_id, fn = compress
        body = fn(body)
        attributes |= codec_id
    max_ts = max_timestamp if max_timestamp is not None else max(r[2] for r in records)
    after_crc = struct.pack(">hiqqqhii", attributes, deltas[-1], ts0, max_ts, producer_id, producer_epoch,
                            base_sequence, len(records)) + body
    crc = segments.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), leader_epoch, 2, crc) + after_crc


def _rec(key: str | None, value: str | None, ts: int = 1_700_000_000_000, headers=()) -> tuple:
    return (None if key is None else key.encode(), None if value is None else value.encode(), ts, list(headers))


# ----------------------------------------------------------------------------- record batches


def test_parse_batches_reads_every_header_field_and_record() -> None:
    data = encode_batch(100, [_rec("a", "1", 1000, [("h", b"x"), ("n", None)]), _rec(None, "2", 1005), _rec("t", None, 1003)],
                        producer_id=42, producer_epoch=3, base_sequence=7, leader_epoch=5)
    (b,), trailing = segments.parse_batches(data)
    assert trailing == 0
    assert (b.position, b.base_offset, b.last_offset, b.records_count, b.size) == (0, 100, 102, 3, len(data))
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (42, 3, 7, 9)
    assert (b.partition_leader_epoch, b.magic, b.compression, b.timestamp_type) == (5, 2, "none", "CreateTime")
    assert (b.base_timestamp, b.max_timestamp, b.crc_valid) == (1000, 1005, True)
    assert not b.is_transactional and not b.is_control and b.delete_horizon_ms is None
    r0, r1, r2 = b.records
    assert (r0.offset, r0.timestamp, r0.key, r0.value, r0.sequence) == (100, 1000, b"a", b"1", 7)
    assert r0.headers == (segments.Header("h", b"x"), segments.Header("n", None))
    assert (r1.key, r1.timestamp, r1.sequence) == (None, 1005, 8)
    assert r2.is_tombstone and not r0.is_tombstone
    assert b.to_json() == {
        "base_offset": 100, "last_offset": 102, "record_count": 3, "producer_id": 42, "producer_epoch": 3,
        "base_sequence": 7, "is_transactional": False, "is_control": False, "position": 0, "size": len(data),
        "max_timestamp": 1005, "compression": "none"}


def test_batches_sit_back_to_back_and_a_partial_tail_is_reported_not_parsed() -> None:
    first = encode_batch(0, [_rec("a", "1")])
    second = encode_batch(1, [_rec("b", "2"), _rec("c", "3")])
    (b0, b1), trailing = segments.parse_batches(first + second + second[:30])
    assert (b0.position, b1.position, b1.base_offset) == (0, len(first), 1)
    assert b1.position == b0.next_position
    assert trailing == 30


def test_gzip_batches_are_decompressed() -> None:
    data = encode_batch(7, [_rec(f"k{i}", f"v{i}" * 20) for i in range(30)], gzip_records=True)
    (b,), _ = segments.parse_batches(data)
    assert b.compression == "gzip" and b.crc_valid
    assert [r.value for r in b.records] == [f"v{i}".encode() * 20 for i in range(30)]


def _xerial_snappy(body: bytes) -> bytes:
    """snappy-java's SnappyOutputStream framing, as the Java producer writes it: magic, version 1,
    compatible version 1, then (big-endian length, raw snappy block) chunks."""
    import pyarrow as pa

    codec = pa.Codec("snappy")
    chunks = [body[i:i + 100] for i in range(0, len(body), 100)]
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for c in chunks:
        block = codec.compress(c, asbytes=True)
        out += struct.pack(">i", len(block)) + block
    return out


@pytest.mark.parametrize("name,codec_id,fn", [
    ("snappy", 2, lambda b: __import__("pyarrow").Codec("snappy").compress(b, asbytes=True)),  # raw: librdkafka
    ("snappy", 2, _xerial_snappy),  # framed: the Java producer
    ("lz4", 3, lambda b: __import__("pyarrow").Codec("lz4").compress(b, asbytes=True)),  # LZ4 frame
    ("zstd", 4, lambda b: __import__("pyarrow").Codec("zstd").compress(b, asbytes=True)),
])
def test_every_codec_is_decompressed(name: str, codec_id: int, fn) -> None:
    values = [f"value {i} ".encode() * (i + 1) for i in range(25)]
    data = encode_batch(3, [(b"k", v, 10, []) for v in values], compress=(codec_id, fn))
    (b,), _ = segments.parse_batches(data)
    assert b.compression == name and b.crc_valid
    assert [r.value for r in b.records] == values
    assert [r.offset for r in b.records] == list(range(3, 28))


def test_an_unknown_codec_is_a_format_error() -> None:
    data = encode_batch(0, [_rec("a", "1")], attributes=5)
    with pytest.raises(segments.SegmentFormatError, match="unknown"):
        segments.parse_batches(data)


def test_attributes_say_transactional_control_log_append_time_and_delete_horizon() -> None:
    marker = encode_batch(9, [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 4), 50, [])],
                          attributes=segments.TRANSACTIONAL_BIT | segments.CONTROL_BIT, producer_id=3, producer_epoch=0)
    (b,), _ = segments.parse_batches(marker)
    assert b.is_transactional and b.is_control
    assert b.control == segments.ControlMarker("COMMIT", 0, 4)
    abort = encode_batch(9, [(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 2), 50, [])], attributes=segments.CONTROL_BIT)
    assert segments.parse_batches(abort)[0][0].control.type == "ABORT"
    appended = encode_batch(0, [_rec("a", "1", 10), _rec("b", "2", 20)], attributes=segments.TIMESTAMP_TYPE_BIT,
                            max_timestamp=99)
    (b,), _ = segments.parse_batches(appended)
    assert b.timestamp_type == "LogAppendTime" and [r.timestamp for r in b.records] == [99, 99]
    horizon = encode_batch(0, [_rec("a", None, 5000)], attributes=segments.DELETE_HORIZON_BIT, base_timestamp=5000)
    assert segments.parse_batches(horizon)[0][0].delete_horizon_ms == 5000


def test_sequences_wrap_like_kafka() -> None:
    assert segments.increment_sequence(2**31 - 1, 1) == 0
    assert segments.increment_sequence(2**31 - 2, 3) == 1
    assert segments.increment_sequence(5, 3) == 8


def test_a_flipped_byte_fails_the_crc_and_read_log_verify_raises(tmp_path: Path) -> None:
    data = bytearray(encode_batch(0, [_rec("a", "hello")]))
    data[-2] ^= 0xFF  # inside the value: covered by the CRC
    (b,), _ = segments.parse_batches(bytes(data))
    assert b.crc_valid is False
    path = tmp_path / segments.segment_file_name(0)
    path.write_bytes(bytes(data))
    assert segments.read_log(path).batches[0].crc_valid is False
    with pytest.raises(segments.CorruptBatchError, match="position 0"):
        segments.read_log(path, verify=True)
    assert segments.read_log(path, check_crc=False).batches[0].crc_valid is None


def test_old_magic_and_impossible_lengths_are_format_errors() -> None:
    data = bytearray(encode_batch(0, [_rec("a", "1")]))
    data[16] = 1
    with pytest.raises(segments.SegmentFormatError, match="magic 1"):
        segments.parse_batches(bytes(data))
    with pytest.raises(segments.SegmentFormatError, match="length 10"):
        segments.parse_batches(struct.pack(">qi", 0, 10) + bytes(60))
    assert issubclass(segments.SegmentFormatError, KafkalabError)


def test_records_that_overrun_their_batch_are_a_format_error() -> None:
    data = bytearray(encode_batch(0, [_rec("a", "1")]))
    struct.pack_into(">i", data, 57, 2)  # recordsCount says 2, the batch holds 1
    with pytest.raises(segments.SegmentFormatError, match="past the end"):
        segments.parse_batches(bytes(data), check_crc=False)
    assert segments.parse_batches(bytes(data), records=False, check_crc=False)[0][0].records is None


# ----------------------------------------------------------------------------- index files


def _write_segment(folder: Path, base: int, batches: list[bytes], index=(), timeindex=(), prealloc: int = 0) -> Path:
    log = folder / segments.segment_file_name(base)
    log.write_bytes(b"".join(batches))
    idx = b"".join(struct.pack(">ii", o - base, p) for o, p in index)
    tidx = b"".join(struct.pack(">qi", t, o - base) for t, o in timeindex)
    log.with_suffix(".index").write_bytes(idx + bytes(prealloc // 8 * 8))
    log.with_suffix(".timeindex").write_bytes(tidx + bytes(prealloc // 12 * 12))
    return log


def test_index_readers_stop_at_the_zero_filled_tail_of_a_preallocated_file(tmp_path: Path) -> None:
    log = _write_segment(tmp_path, 1000, [], index=[(1010, 4200), (1020, 8400)],
                         timeindex=[(1_000, 1000), (2_000, 1020)], prealloc=1200)
    assert segments.read_offset_index(log.with_suffix(".index")) == [
        segments.IndexEntry(1010, 4200), segments.IndexEntry(1020, 8400)]
    # a first time index entry may point at the base offset itself (relative offset 0)
    assert segments.read_time_index(log.with_suffix(".timeindex")) == [
        segments.TimeIndexEntry(1_000, 1000), segments.TimeIndexEntry(2_000, 1020)]
    empty = _write_segment(tmp_path, 2000, [], prealloc=96)
    assert segments.read_offset_index(empty.with_suffix(".index")) == []
    assert segments.read_time_index(empty.with_suffix(".timeindex")) == []
    (tmp_path / "odd.index").write_bytes(bytes(8))
    with pytest.raises(segments.SegmentFormatError, match="base offset"):
        segments.read_offset_index(tmp_path / "odd.index")
    assert segments.read_offset_index(tmp_path / "odd.index", base_offset=5) == []


def test_lookup_offset_is_a_floor_binary_search() -> None:
    index = [segments.IndexEntry(o, o * 10) for o in (10, 20, 30, 40, 50, 60, 70, 80)]
    assert segments.lookup_offset(index, 5).entry is None and segments.lookup_offset(index, 5).position == 0
    assert segments.lookup_offset(index, 30).entry.offset == 30
    hit = segments.lookup_offset(index, 79)
    assert hit.entry.offset == 70 and hit.position == 700 and len(hit.probes) <= 3
    assert segments.lookup_offset(index, 10**9).entry.offset == 80
    assert segments.lookup_offset([], 3).entry is None
    times = [segments.TimeIndexEntry(t, o) for t, o in ((100, 5), (200, 9))]
    assert segments.lookup_timestamp(times, 150).entry == times[0] and segments.lookup_timestamp(times, 99).entry is None


def _segment_of_single_record_batches(tmp_path: Path, n: int = 40, base: int = 0, interval: int = 300,
                                      ts0: int = 1_000) -> segments.Segment:
    """``n`` batches of one record each, offset ``base + i`` stamped ``ts0 + 10 * i``, with the
    indexes the broker's rule gives for ``index.interval.bytes=interval``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    batches = [encode_batch(base + i, [_rec(f"k{i}", "x" * 100, ts0 + 10 * i)]) for i in range(n)]
    parsed, _ = segments.parse_batches(b"".join(batches))
    index = [(e.offset, e.position) for e in segments.expected_offset_index(parsed, interval)]
    timeindex = [(e.timestamp, e.offset) for e in segments.expected_time_index(parsed, interval)]
    log = _write_segment(tmp_path, base, batches, index, timeindex, prealloc=240)
    return segments.read_segment(log)


def test_scan_for_offset_reads_headers_from_the_index_position(tmp_path: Path) -> None:
    seg = _segment_of_single_record_batches(tmp_path)
    assert 0 < len(seg.index) < len(seg.batches)
    hit = segments.lookup_offset(seg.index, 33)
    scan = segments.scan_for_offset(seg.log, 33, hit.position)
    full = segments.scan_for_offset(seg.log, 33, 0)
    assert scan.batch.base_offset == full.batch.base_offset == 33
    assert full.headers_read == 34 and scan.headers_read < full.headers_read
    assert scan.bytes_skipped <= 300
    assert segments.scan_for_offset(seg.log, 10**6, 0).batch is None


def test_a_target_inside_an_indexed_batch_resolves_to_the_entry_before_it(tmp_path: Path) -> None:
    batches = [encode_batch(5 * i, [_rec(f"k{j}", "x" * 40, 1_000 + j) for j in range(5)]) for i in range(30)]
    parsed, _ = segments.parse_batches(b"".join(batches))
    index = segments.expected_offset_index(parsed, 500)
    log = _write_segment(tmp_path, 0, batches, [(e.offset, e.position) for e in index])
    seg = segments.read_segment(log)
    entry = seg.index[2]  # the last offset of an indexed batch; its first offset is 4 lower
    target = entry.offset - 4
    hit = segments.lookup_offset(seg.index, target)
    assert hit.entry == seg.index[1]
    scan = segments.scan_for_offset(seg.log, target, hit.position)
    assert scan.batch.base_offset == target and scan.batch.position == entry.position
    assert 500 < scan.bytes_skipped <= 500 + max(b.size for b in seg.batches)


def test_expected_index_rule_writes_an_entry_after_more_than_the_interval() -> None:
    class B:  # only what the rule reads
        def __init__(self, pos: int, size: int, last: int, ts: int) -> None:
            self.position, self.size, self.last_offset, self.max_timestamp = pos, size, last, ts
    sizes = [1024, 1024, 1024, 1024, 1, 1000, 5000, 10]
    batches, pos = [], 0
    for i, s in enumerate(sizes):
        batches.append(B(pos, s, i, 100 + (i if i != 6 else 0)))  # batch 6 is older than batch 5
        pos += s
    # exactly 4096 bytes before batch 4: no entry; 4097 before batch 5: an entry; then 6000 before batch 7
    assert segments.expected_offset_index(batches, 4096) == [segments.IndexEntry(5, 4097), segments.IndexEntry(7, 10097)]
    assert segments.expected_time_index(batches, 4096) == [segments.TimeIndexEntry(105, 5), segments.TimeIndexEntry(107, 7)]
    # at a roll the largest timestamp so far is added if it grew since the last entry
    assert segments.expected_time_index(batches[:5], 4096) == []
    assert segments.expected_time_index(batches[:5], 4096, rolled=True) == [segments.TimeIndexEntry(104, 4)]
    assert segments.expected_time_index(batches[:7], 4096, rolled=True) == [segments.TimeIndexEntry(105, 5)]


def test_offset_for_timestamp_follows_the_broker(tmp_path: Path) -> None:
    segs = [_segment_of_single_record_batches(tmp_path / "a", base=0, ts0=1_000),    # offsets 0-39 at 1000..1390
            _segment_of_single_record_batches(tmp_path / "b", base=40, ts0=2_000)]   # offsets 40-79 at 2000..2390
    found = segments.offset_for_timestamp(segs, 1_105)
    assert (found.offset, found.timestamp, found.segment) == (11, 1_110, 0)
    assert found.time_entry is not None and found.time_entry.timestamp <= 1_105
    assert segments.offset_for_timestamp(segs, 1_110).offset == 11
    assert segments.offset_for_timestamp(segs, 0).offset == 0
    assert segments.offset_for_timestamp(segs, 1_395).offset == 40  # the first segment whose largest timestamp reaches it
    assert segments.offset_for_timestamp(segs, 10**13).offset is None
    assert segments.offset_for_timestamp(segs, 1_005, log_start_offset=5).offset == 5


def test_retention_rules_delete_whole_segments_oldest_first() -> None:
    segs = [(0, 100), (10, 100), (20, 100), (30, 50)]
    assert segments.size_retention_deletes(segs, 150) == [0, 10]
    assert segments.size_retention_deletes(segs, 149) == [0, 10]
    assert segments.size_retention_deletes(segs, 250) == [0]
    assert segments.size_retention_deletes(segs, 350) == [] == segments.size_retention_deletes(segs, -1)
    aged = [(0, 1_000), (10, 7_000), (20, 2_000), (30, 9_000)]
    assert segments.time_retention_deletes(aged, 4_000, 10_000) == [0]  # stops at the first young segment
    assert segments.time_retention_deletes(aged, 500, 10_000) == [0, 10, 20, 30]
    assert segments.time_retention_deletes(aged, -1, 10_000) == []


def test_compacted_view_keeps_the_latest_per_key_below_the_active_segment() -> None:
    written = [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2"), (3, b"b", None), (4, None, b"x"), (5, b"a", b"3")]
    assert segments.compacted_view(written, 5, drop_tombstones=False) == [(2, b"a", b"2"), (3, b"b", None), (5, b"a", b"3")]
    assert segments.compacted_view(written, 5, drop_tombstones=True) == [(2, b"a", b"2"), (5, b"a", b"3")]
    assert segments.compacted_view(written, 0, drop_tombstones=True) == written


# ----------------------------------------------------------------------------- kafka-dump-log text

def _dump_text_for(seg: segments.Segment) -> str:
    """What kafka-dump-log would print for ``seg`` (the format of Kafka 4.3's DumpLogSegments)."""
    lines = [f"Dumping {seg.log}", f"Log starting offset: {seg.base_offset}"]
    for b in seg.batches:
        horizon = f"OptionalLong[{b.delete_horizon_ms}]" if b.delete_horizon_ms is not None else "OptionalLong.empty"
        lines.append(
            f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} baseSequence: {b.base_sequence} "
            f"lastSequence: {b.last_sequence} producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
            f"partitionLeaderEpoch: {b.partition_leader_epoch} isTransactional: {str(b.is_transactional).lower()} "
            f"isControl: {str(b.is_control).lower()} deleteHorizonMs: {horizon} position: {b.position} "
            f"{b.timestamp_type}: {b.max_timestamp} size: {b.size} magic: 2 compresscodec: {b.compression} "
            f"crc: {b.crc} isvalid: {str(b.crc_valid).lower()}")
        for r in b.records:
            line = (f"| offset: {r.offset} {b.timestamp_type}: {r.timestamp} keySize: {len(r.key) if r.key is not None else -1} "
                    f"valueSize: {len(r.value) if r.value is not None else -1} sequence: {r.sequence} "
                    f"headerKeys: [{','.join(h.key for h in r.headers)}]")
            if r.key is not None:
                line += f" key: {r.key.decode()}"
            if r.value is not None:
                line += f" payload: {r.value.decode()}"
            lines.append(line)
    lines.append(f"Dumping {seg.log.with_suffix('.index')}")
    lines += [f"offset: {e.offset} position: {e.position}" for e in seg.index] or [f"offset: {seg.base_offset} position: 0"]
    lines.append(f"Dumping {seg.log.with_suffix('.timeindex')}")
    lines += [f"timestamp: {e.timestamp} offset: {e.offset}" for e in seg.timeindex] or [f"timestamp: 0 offset: {seg.base_offset}"]
    return "\n".join(lines) + "\n"


def test_diff_against_dump_is_empty_when_they_agree_and_names_each_difference(tmp_path: Path) -> None:
    seg = _segment_of_single_record_batches(tmp_path)
    text = _dump_text_for(seg)
    assert dumplog.diff_against_dump(seg, dumplog.parse(text)) == []
    changed = text.replace(" producerId: -1 ", " producerId: 7 ", 1).replace("payload: xxx", "payload: yyy", 1)
    diffs = dumplog.diff_against_dump(seg, dumplog.parse(changed))
    assert any("producer_id" in d for d in diffs) and any("payload" in d for d in diffs)
    assert dumplog.diff_against_dump(seg, dumplog.Dump()) == [f"kafka-dump-log printed nothing for {seg.log}"]
    # an index with no entries: the tool prints the first zero-filled slot, the reader nothing
    empty = _write_segment(tmp_path, 500, [encode_batch(500, [_rec("a", "b")])], prealloc=96)
    eseg = segments.read_segment(empty)
    assert eseg.index == [] and dumplog.diff_against_dump(eseg, dumplog.parse(_dump_text_for(eseg))) == []


# ----------------------------------------------------------------------------- kafkalab segments


def test_cli_prints_the_issue_json_for_a_replica_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    folder = tmp_path / "cluster" / "node-2" / "data" / "t-3"
    folder.mkdir(parents=True)
    seg = _segment_of_single_record_batches(folder)
    assert seg.index  # the JSON below has index and time index entries to compare
    result = CliRunner().invoke(segments_command, ["--topic", "t", "--partition", "3", "--broker", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["topic"], out["partition"], out["broker"]) == ("t", 3, 2)
    (s,) = out["segments"]
    assert set(s) == {"file", "base_offset", "batches", "index", "timeindex"}
    assert s["file"] == str(seg.log) and s["base_offset"] == 0
    assert set(s["batches"][0]) == {"base_offset", "last_offset", "record_count", "producer_id", "producer_epoch",
                                    "base_sequence", "is_transactional", "is_control", "position", "size",
                                    "max_timestamp", "compression"}
    assert [b["base_offset"] for b in s["batches"]] == list(range(40))
    assert s["index"] == [{"offset": e.offset, "position": e.position} for e in seg.index]
    assert s["timeindex"] == [{"timestamp": e.timestamp, "offset": e.offset} for e in seg.timeindex]
    text = CliRunner().invoke(segments_command, ["--topic", "t", "--partition", "3", "--broker", "2"])
    assert text.exit_code == 0 and "40 batches" in text.output


def test_cli_fails_with_a_clear_error_on_a_corrupt_batch_or_a_missing_replica(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    folder = tmp_path / "cluster" / "node-1" / "data" / "t-0"
    folder.mkdir(parents=True)
    data = bytearray(encode_batch(0, [_rec("a", "hello")]))
    data[-1] ^= 1
    (folder / segments.segment_file_name(0)).write_bytes(bytes(data))
    bad = CliRunner().invoke(segments_command, ["--topic", "t", "--partition", "0", "--broker", "1", "--json"])
    assert isinstance(bad.exception, segments.CorruptBatchError)
    ok = CliRunner().invoke(segments_command, ["--topic", "t", "--partition", "0", "--broker", "1", "--no-verify", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.output)["segments"][0]["batches"][0]["record_count"] == 1
    missing = CliRunner().invoke(segments_command, ["--topic", "t", "--partition", "1", "--broker", "1"])
    assert isinstance(missing.exception, KafkalabError) and "no folder t-1" in str(missing.exception)
    unknown = CliRunner().invoke(segments_command, ["--topic", "t", "--partition", "0", "--broker", "9"])
    assert isinstance(unknown.exception, KafkalabError) and "no broker 9" in str(unknown.exception)
    assert segments_command.name == "segments"
