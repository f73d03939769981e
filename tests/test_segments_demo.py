"""kafkalab.experiments.segments_demo (notebook 06): the pure helpers, without a cluster.
The live parts run in tests/test_segments_live.py and in the notebook itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalab import segments
from kafkalab.errors import KafkalabError
from kafkalab.experiments import segments_demo as demo


def test_classify_entry_names_what_a_kraft_log_dir_holds(tmp_path: Path) -> None:
    assert demo.classify_entry("__cluster_metadata-0", True).startswith("KRaft metadata log")
    assert demo.classify_entry("t-0.abc123-delete", True).startswith("deleted partition")
    assert demo.classify_entry("__consumer_offsets-3", True) == "internal topic partition"
    assert demo.classify_entry("orders-1", True) == "topic partition"
    assert demo.classify_entry("meta.properties", False).startswith("node.id")
    assert demo.classify_entry("something.else", False) == "other file"
    for name in ("a-0", "a-1", "__cluster_metadata-0"):
        (tmp_path / name).mkdir()
    (tmp_path / "meta.properties").write_text("node.id=1\nversion=1\n")
    table = demo.data_dir_table(tmp_path)
    assert table.loc["topic partition", "count"] == 2
    assert demo.read_properties(tmp_path / "meta.properties") == {"node.id": "1", "version": "1"}


def _batch(position: int, length: int, base: int) -> segments.RecordBatch:
    return segments.RecordBatch(position, base, length - 12, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1)


def test_appended_back_to_back_checks_positions_and_the_file_length(tmp_path: Path) -> None:
    log = tmp_path / segments.segment_file_name(0)
    log.write_bytes(bytes(300))
    good = segments.Segment(0, log, [_batch(0, 100, 0), _batch(100, 200, 1)], [], [])
    assert demo.appended_back_to_back([good])
    gap = segments.Segment(0, log, [_batch(0, 100, 0), _batch(150, 150, 1)], [], [])
    assert not demo.appended_back_to_back([gap])
    short = segments.Segment(0, log, [_batch(0, 100, 0)], [], [])
    assert not demo.appended_back_to_back([short])
    assert demo.appended_back_to_back([segments.Segment(0, log, [_batch(0, 100, 0)], [], [], trailing_bytes=200)])


def test_raw_write_rate_writes_and_removes_its_file(tmp_path: Path) -> None:
    r = demo.raw_write_rate(tmp_path, total_bytes=3 * 1024 * 1024, block_bytes=1024 * 1024, fsync=True)
    assert r.total_bytes == 3 * 1024 * 1024 and r.fsync and r.mb_per_s > 0
    assert list(tmp_path.iterdir()) == []
    assert set(r.to_json()) == {"total_bytes", "block_bytes", "fsync", "seconds", "mb_per_s"}


def test_filler_makes_records_of_the_asked_size() -> None:
    recs = list(demo.filler(5, 1000, key_prefix="x", timestamp_ms=7))
    assert [k for k, _, _ in recs] == [f"x{i}:".encode() for i in range(5)]
    assert {len(v) for _, v, _ in recs} == {1000} and {t for _, _, t in recs} == {7}
    assert len({v for _, v, _ in recs}) == 5


def test_compaction_scenario_predicts_what_the_cleaner_leaves() -> None:
    scn = demo.CompactionScenario("c", "d", 0, ["a", "b", "c"])
    scn.written = [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"c", b"1"), (3, b"a", None), (4, b"b", b"2"), (5, b"c", b"2")]
    scn.round_starts = [0, 3, 5]
    assert scn.active_base == 5
    assert scn.expected(drop_tombstones=False) == [(2, b"c", b"1"), (3, b"a", None), (4, b"b", b"2"), (5, b"c", b"2")]
    assert scn.expected(drop_tombstones=True) == [(2, b"c", b"1"), (4, b"b", b"2"), (5, b"c", b"2")]
    assert scn.latest_values() == {"b": "2", "c": "2"}


def test_the_compaction_settings_are_the_teaching_values_the_notebook_states() -> None:
    assert demo.COMPACTION_CONFIG == {"cleanup.policy": "compact", "segment.ms": "60000",
                                      "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "10000"}
    assert demo.ROUND_GAP_MS > int(demo.COMPACTION_CONFIG["segment.ms"])
    assert demo.MIN_SEGMENT_BYTES == 1024 * 1024


def test_a_batches_program_gets_its_records_from_a_recipe() -> None:
    from kafkalab.instruments.batches import RecordRecipe, filler_value

    recipe = RecordRecipe(3, 10, first_timestamp_ms=1_000, timestamp_step_ms=500, partition=2)
    assert list(recipe.records()) == [(b"k0", b"k0:k0:k0:k", 1_000, 2), (b"k1", b"k1:k1:k1:k", 1_500, 2),
                                      (b"k2", b"k2:k2:k2:k", 2_000, 2)]
    assert recipe.payload_bytes == 3 * (2 + 10)
    assert {ts for _, _, ts, _ in RecordRecipe(2, 5).records()} == {0}, "no first timestamp: 0, the producer stamps now"
    assert demo.Records is RecordRecipe
    assert filler_value(b"x7", 4) == b"x7:x"
    with pytest.raises(ValueError):
        RecordRecipe(-1, 10)
    with pytest.raises(ValueError):
        RecordRecipe(1, 0)


def test_the_lookup_figure_draws_the_entries_and_batches_the_lookup_read(tmp_path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from kafkalab.experiments import segments_demo_plots as plots

    log = tmp_path / segments.segment_file_name(0)
    log.write_bytes(bytes(1000))
    batches = [segments.RecordBatch(100 * i, 10 * i, 100 - 12, 0, 2, 0, 9, 0, 0, 0, -1, -1, -1, 10) for i in range(10)]
    index = [segments.IndexEntry(10 * i + 9, 100 * i) for i in (1, 3, 5, 7)]
    seg = segments.Segment(0, log, batches, index, [])
    hit = segments.lookup_offset(index, 64)
    assert hit.entry == index[2]
    scan = segments.Scan(batches[6], 2, 100, 500)
    entries, rows = plots.lookup_rows(seg, hit, scan, around=1)
    assert entries == [(1, 39, 300), (2, 59, 500), (3, 79, 700)]
    assert [(r[0], r[4]) for r in rows] == [(40, "before"), (50, "scanned"), (60, "found"), (70, "after")]
    assert plots.lookup_figure(seg, 64, hit, scan).axes
    with pytest.raises(ValueError):
        plots.lookup_rows(seg, hit, segments.Scan(None, 5, 500, 500))


def test_a_keyed_round_writes_its_values_then_a_tombstone_per_deleted_key() -> None:
    from kafkalab.instruments.batches import KeyedRound

    r = KeyedRound(5_000, ["a", "b"], "r", repeat=2, deletes=["c"])
    assert list(r.updates()) == [(b"a", b"r0:a"), (b"b", b"r0:b"), (b"a", b"r1:a"), (b"b", b"r1:b")]
    assert r.records() == list(r.updates()) + [(b"c", None)], "the deletes come last, as tombstones"
    assert KeyedRound(0).records() == []
    with pytest.raises(ValueError):
        KeyedRound(0, ["a"], repeat=-1)


def test_the_compaction_scenario_stamps_each_round_a_gap_after_the_previous() -> None:
    scn = demo.CompactionScenario("c", "d", 1_000, ["k0", "k1"])
    first, third = scn.next_round(["k0"], "r"), scn.next_round(["k1"], "v", after=2)
    assert (first.timestamp_ms, third.timestamp_ms) == (1_000, 1_000 + 2 * demo.ROUND_GAP_MS)
    scn.round_starts.append(0)  # one round written: the next comes a gap later
    assert scn.next_round().timestamp_ms == 1_000 + demo.ROUND_GAP_MS
    with pytest.raises(KafkalabError, match="program"):
        scn.write_round(["k0"], "x")


def test_fetch_positions_reads_librdkafkas_statistics() -> None:
    import json

    pos = demo.FetchPositions()
    assert pos.next_offset("t", 0) is None and pos.at_end("t", 0) is None, "no statistics yet"

    def stats(state: str, next_offset: int, hi: int, queued: int) -> str:
        part = {"fetch_state": state, "next_offset": next_offset, "hi_offset": hi, "fetchq_cnt": queued}
        return json.dumps({"topics": {"t": {"partitions": {"0": part, "-1": {"fetch_state": "none"}}}}})

    pos(stats("offset-query", -1001, -1, 0))
    assert pos.next_offset("t", 0) is None and ("t", -1) not in pos.partitions
    pos(stats("active", 4600, 4900, 120))
    assert pos.next_offset("t", 0) == 4600 and pos.at_end("t", 0) is None, "records fetched, not yet delivered"
    pos(stats("active", 4900, 4900, 0))
    assert pos.at_end("t", 0) == 4900, "fetching at the high watermark with nothing queued: at the end"
