"""kafkalab.ledger: the JSON-lines event log every experiment writes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from kafkalab import ledger
from kafkalab.ledger import KINDS, Event, Ledger, read_events


def record_one_of_each(book: Ledger) -> list[Event]:
    return [
        book.record("produced", topic="flights", key="JFK", value="flight-1", client_id="p1"),
        book.record("acked", topic="flights", partition=2, offset=7, key="JFK", value="flight-1", client_id="p1"),
        book.record(
            "consumed", topic="flights", partition=2, offset=7, key="JFK", value="flight-1",
            member_id="m-1", group_instance_id="c-1", generation=3, client_id="c1",
        ),
        book.record("processed", topic="flights", partition=2, offset=7, value="flight-1", member_id="m-1"),
        book.record("committed", topic="flights", partition=2, offset=8, member_id="m-1", generation=3),
        book.record("assigned", topic="flights", partition=0, member_id="m-1"),
        book.record("revoked", topic="flights", partition=0, member_id="m-1"),
        book.record("acknowledged", topic="flights", partition=2, offset=7, value="flight-1", client_id="s1",
                    delivery_count=2, ack="RELEASE"),
    ]


def test_events_read_back_equal_to_what_was_recorded(tmp_path: Path) -> None:
    path = tmp_path / "run" / "ledger.jsonl"
    with Ledger(path, run_id="r1") as book:
        written = record_one_of_each(book)
    assert read_events(path) == written
    assert [e.kind for e in written] == list(KINDS)
    assert all(e.run_id == "r1" for e in written)


def test_each_line_is_one_json_object_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, run_id="r1") as book:
        record_one_of_each(book)
    lines = path.read_text().splitlines()
    assert len(lines) == len(KINDS)
    assert all(list(json.loads(line)) == list(ledger.FIELDS) for line in lines)


def test_flush_makes_lines_visible_and_calls_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = ledger.os.fsync
    monkeypatch.setattr(ledger.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    path = tmp_path / "ledger.jsonl"
    book = Ledger(path, run_id="r1")
    book.record("produced", topic="t", value="v-1")
    book.flush()
    assert synced, "flush() must call os.fsync"
    assert [e.value for e in read_events(path)] == ["v-1"], "a flushed line is readable before close"
    book.close()
    assert book.closed


def test_unknown_kind_is_rejected_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, run_id="r1") as book:
        with pytest.raises(ValueError, match="unknown event kind 'delivered'"):
            book.record("delivered", topic="t", value="v-1")
    assert path.read_text() == ""
    with pytest.raises(ValueError, match="unknown event kind"):
        Event(run_id="r1", kind="lost", ts_ms=0, seq=0, topic="t")


def test_seq_is_assigned_by_the_ledger_only(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.jsonl", run_id="r1") as book:
        with pytest.raises(ValueError, match="seq"):
            book.record("produced", topic="t", seq=5)
        with pytest.raises(TypeError):
            book.record("produced", topic="t", colour="red")


def test_seq_counts_up_from_zero_in_file_order_and_ts_never_goes_back(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, run_id="r1") as book:
        for i in range(50):
            book.record("produced", topic="t", value=f"v-{i}")
    events = read_events(path)
    assert [e.seq for e in events] == list(range(50))
    assert all(a.ts_ms <= b.ts_ms for a, b in zip(events, events[1:]))


def test_threads_sharing_a_ledger_write_whole_lines_with_unique_seq(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    threads_n, per_thread = 8, 500
    with Ledger(path, run_id="r1") as book:

        def consume(thread: int) -> None:
            for i in range(per_thread):
                book.record("consumed", topic="t", partition=thread, offset=i, value=f"v-{thread}-{i}")

        threads = [threading.Thread(target=consume, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = read_events(path)  # raises if any line is torn or interleaved
    assert len(events) == threads_n * per_thread
    assert [e.seq for e in events] == list(range(threads_n * per_thread)), "seq follows file order"
    for thread in range(threads_n):
        offsets = [e.offset for e in events if e.partition == thread]
        assert offsets == list(range(per_thread)), "each thread's events keep their order"


def test_record_after_close_is_refused(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.jsonl", run_id="r1")
    book.close()
    book.flush()  # no-op
    with pytest.raises(ValueError, match="closed"):
        book.record("produced", topic="t")


def test_a_torn_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, run_id="r1") as book:
        book.record("produced", topic="t", value="v-1")
    with path.open("a") as f:
        f.write('{"run_id":"r1","kind":"prod')
    with pytest.raises(ValueError, match=r"ledger.jsonl:2"):
        read_events(path)
    # read while a writer appends: the unfinished last line is left for the next read
    assert [e.value for e in read_events(path, growing=True)] == ["v-1"]
    with path.open("a") as f:
        f.write('uced", oops}\n{"run_id":')
    with pytest.raises(ValueError, match=r"ledger.jsonl:2"):
        read_events(path, growing=True)  # a whole line that is broken is still an error


@pytest.mark.spark
def test_a_folder_reads_every_ledger_by_name_and_kinds_filter(tmp_path: Path) -> None:
    for name, value in (("b", "v-b"), ("a", "v-a")):
        with Ledger(tmp_path / f"{name}.jsonl", "r1") as ledger:
            ledger.record("produced", topic="t", value=value)
            ledger.record("acked", topic="t", value=value, partition=0, offset=0)
    (tmp_path / "notes.txt").write_text("not a ledger")
    assert [(e.kind, e.value) for e in read_events(tmp_path)] == [
        ("produced", "v-a"), ("acked", "v-a"), ("produced", "v-b"), ("acked", "v-b")]
    assert [e.value for e in read_events(tmp_path, kinds="acked")] == ["v-a", "v-b"]
    assert len(read_events(tmp_path / "a.jsonl", kinds=("acked", "produced"))) == 2
    with pytest.raises(ValueError, match="unknown event kind"):
        read_events(tmp_path, kinds="ackd")
    assert read_events(tmp_path / "none.jsonl", missing_ok=True) == []
    with pytest.raises(FileNotFoundError):
        read_events(tmp_path / "none.jsonl")


def test_spark_loads_a_ledger_glob_with_the_explicit_schema(spark, tmp_path: Path) -> None:
    for name in ("producer", "consumer"):
        with Ledger(tmp_path / f"{name}.jsonl", run_id="r1") as book:
            record_one_of_each(book)
    frame = ledger.load(spark, str(tmp_path / "*.jsonl"))
    assert frame.schema == ledger.ledger_schema()
    assert frame.count() == 2 * len(KINDS)
    row = frame.where("kind = 'consumed'").first()
    assert (row.partition, row.offset, row.generation, row.group_instance_id) == (2, 7, 3, "c-1")


@pytest.mark.spark
def test_events_frame_matches_load(spark, tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    with Ledger(path, run_id="r1") as book:
        written = record_one_of_each(book)
    from_file = {tuple(r) for r in ledger.load(spark, path).collect()}
    from_objects = {tuple(r) for r in ledger.events_frame(spark, written).collect()}
    assert from_file == from_objects
