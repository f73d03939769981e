"""kafkalab.audit: each Jepsen-named check finds the anomaly planted in a small ledger,
and reports nothing on a clean one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafkalab import audit, ledger
from kafkalab.ledger import Ledger

pytestmark = pytest.mark.spark

Planted = dict[str, Any]


# --- planting events ------------------------------------------------------------------


def sent(value: str, partition: int, offset: int, key: str = "k", producer: str = "p-1") -> list[Planted]:
    """A value handed to the producer, then acknowledged at (partition, offset)."""
    common = {"topic": "t", "key": key, "value": value, "client_id": producer}
    return [
        {"kind": "produced", **common},
        {"kind": "acked", "partition": partition, "offset": offset, **common},
    ]


def read(
    value: str, partition: int, offset: int, consumer: str = "m-1", generation: int = 1, key: str = "k"
) -> Planted:
    """A value returned by a consumer's poll."""
    return {
        "kind": "consumed", "topic": "t", "partition": partition, "offset": offset, "key": key,
        "value": value, "member_id": consumer, "client_id": f"client-{consumer}", "generation": generation,
    }


def processed(value: str, consumer: str = "m-1") -> Planted:
    return {"kind": "processed", "topic": "t", "value": value, "member_id": consumer}


def plant(spark, path: Path, events: list[Planted], same_ts: bool = False):
    """Write ``events`` through a Ledger (ts_ms 1000, 1001, ... unless same_ts) and load them."""
    with Ledger(path, run_id="r1") as book:
        for i, event in enumerate(events):
            book.record(**{"ts_ms": 1000 if same_ts else 1000 + i, **event})
    return ledger.load(spark, str(path))


def rows(frame, *columns: str) -> list[tuple]:
    """Selected columns of a small result frame, as sorted tuples."""
    return sorted(tuple(r) for r in frame.select(*columns).collect())


def clean_run() -> list[Planted]:
    """Two partitions, three values each: sent, read once in order, processed once, committed."""
    events: list[Planted] = []
    for p in (0, 1):
        for i in range(3):
            events += sent(f"v-{p}-{i}", p, i, key=f"k-{p}")
    for p in (0, 1):
        for i in range(3):
            events.append(read(f"v-{p}-{i}", p, i, key=f"k-{p}"))
            events.append(processed(f"v-{p}-{i}"))
        events.append({"kind": "committed", "topic": "t", "partition": p, "offset": 3, "member_id": "m-1"})
    return events


@pytest.fixture(scope="module")
def clean(spark, tmp_path_factory):
    return plant(spark, tmp_path_factory.mktemp("clean") / "ledger.jsonl", clean_run()).cache()


# --- a clean ledger -------------------------------------------------------------------


@pytest.mark.parametrize("check", list(audit.CHECKS))
def test_a_clean_ledger_has_no_anomaly(clean, check: str) -> None:
    found = audit.CHECKS[check](clean).collect()
    assert found == [], f"{check} reported {found} on a clean ledger"


def test_summary_of_a_clean_ledger_is_all_zero(clean) -> None:
    assert audit.summary(clean) == {name: 0 for name in audit.CHECKS}


# --- lost writes and unseen -----------------------------------------------------------


def test_lost_write_is_an_acked_value_skipped_while_a_later_offset_was_read(spark, tmp_path) -> None:
    events = [e for i in range(4) for e in sent(f"v{i}", 0, i)]
    events += [read("v0", 0, 0), read("v1", 0, 1), read("v3", 0, 3)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert rows(audit.lost_writes(events), "value", "partition", "offset", "max_read_offset") == [("v2", 0, 2, 3)]
    assert audit.unseen(events).count() == 0, "a lost write is not also unseen"


def test_lost_write_when_another_value_was_read_at_the_acked_offset(spark, tmp_path) -> None:
    events = sent("v0", 0, 0) + [read("intruder", 0, 0)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert rows(audit.lost_writes(events), "value", "offset", "max_read_offset") == [("v0", 0, 0)]


def test_unseen_is_an_acked_value_beyond_the_last_offset_read(spark, tmp_path) -> None:
    events = [e for i in range(4) for e in sent(f"v{i}", 0, i)]
    events += sent("other-partition", 1, 0)
    events.append({"kind": "acked", "topic": "t", "value": "failed", "error": "Local: Message timed out"})
    events += [read("v0", 0, 0), read("v1", 0, 1)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert rows(audit.unseen(events), "value", "max_read_offset") == [
        ("other-partition", None), ("v2", 1), ("v3", 1)
    ], "a failed delivery report (acked with error) is not an acknowledgement"
    assert audit.lost_writes(events).count() == 0


def test_writes_of_another_run_do_not_count_as_read(spark, tmp_path) -> None:
    events = sent("v0", 0, 0) + sent("v1", 0, 1) + [read("v1", 0, 1)]
    path = tmp_path / "r1.jsonl"
    plant(spark, path, events)
    with Ledger(tmp_path / "r2.jsonl", run_id="r2") as other:
        other.record("consumed", topic="t", partition=0, offset=0, value="v0")
    both = ledger.load(spark, str(tmp_path / "*.jsonl"))
    assert rows(audit.lost_writes(both), "run_id", "value") == [("r1", "v0")]


# --- duplicates, redeliveries, processing twice ---------------------------------------


def test_duplicate_is_one_value_the_log_holds_at_two_offsets(spark, tmp_path) -> None:
    # A producer retry without idempotence: v1 acked at 1, and its retry also landed at 2.
    events = sent("v0", 0, 0) + sent("v1", 0, 1)
    events += [read("v0", 0, 0), read("v1", 0, 1), read("v1", 0, 2)]
    events.append(read("v0", 0, 0, consumer="m-2"))  # a redelivery, not a duplicate
    events = plant(spark, tmp_path / "l.jsonl", events)
    found = audit.duplicates(events).collect()
    assert len(found) == 1
    assert (found[0].value, found[0]["count"]) == ("v1", 2)
    assert [(o.partition, o.offset) for o in found[0].offsets] == [(0, 1), (0, 2)]


def test_redelivery_is_one_offset_consumed_twice(spark, tmp_path) -> None:
    # m-1 reads 0 and 1, dies before committing 1; m-2 resumes at the committed offset 1.
    events = sent("v0", 0, 0) + sent("v1", 0, 1) + sent("v2", 0, 2)
    events += [read("v0", 0, 0), read("v1", 0, 1)]
    events += [read("v1", 0, 1, consumer="m-2", generation=2), read("v2", 0, 2, consumer="m-2", generation=2)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    found = audit.redeliveries(events).collect()
    assert [(r.value, r.partition, r.offset, r.deliveries, r.consumers) for r in found] == [
        ("v1", 0, 1, 2, ["m-1", "m-2"])
    ]
    assert audit.duplicates(events).count() == 0, "the log holds v1 once"
    assert audit.nonmonotonic_polls(events).count() == 0, "two consumers, each reading forward"


def test_processed_more_than_once_is_a_value_whose_side_effect_ran_twice(spark, tmp_path) -> None:
    events = sent("v0", 0, 0) + sent("v1", 0, 1)
    events += [read("v0", 0, 0), processed("v0"), read("v1", 0, 1), processed("v1")]
    events += [read("v1", 0, 1, consumer="m-2", generation=2), processed("v1", consumer="m-2")]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert rows(audit.processed_more_than_once(events), "value", "times", "consumers") == [
        ("v1", 2, ["m-1", "m-2"])
    ]


# --- nonmonotonic polls ---------------------------------------------------------------


def test_nonmonotonic_poll_is_a_consumer_reading_an_offset_not_above_its_previous(spark, tmp_path) -> None:
    events = [e for i in range(3) for e in sent(f"v{i}", 0, i)]
    events += [read("v0", 0, 0), read("v1", 0, 1), read("v2", 0, 2)]
    events += [read("v0", 0, 0, consumer="m-2")]  # another consumer starting over: fine
    events += [read("v1", 0, 1), read("v2", 0, 2)]  # m-1 goes back to 1 in the same generation
    events = plant(spark, tmp_path / "l.jsonl", events)
    expected = [("m-1", 0, 2, 1, "v1")]
    assert rows(audit.nonmonotonic_polls(events), "consumer", "partition", "prev_offset", "offset", "value") == expected
    assert audit.nonmonotonic_polls(events, within_generation=True).count() == 1


def test_reading_the_same_offset_again_is_nonmonotonic(spark, tmp_path) -> None:
    events = sent("v0", 0, 0) + [read("v0", 0, 0), read("v0", 0, 0)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert rows(audit.nonmonotonic_polls(events), "prev_offset", "offset") == [(0, 0)]


def test_a_replay_after_a_rebalance_is_nonmonotonic_only_across_generations(spark, tmp_path) -> None:
    events = [e for i in range(3) for e in sent(f"v{i}", 0, i)]
    events += [read("v0", 0, 0, generation=1), read("v1", 0, 1, generation=1), read("v2", 0, 2, generation=1)]
    events += [read("v1", 0, 1, generation=2), read("v2", 0, 2, generation=2)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert rows(audit.nonmonotonic_polls(events), "prev_generation", "generation", "offset") == [(1, 2, 1)]
    assert audit.nonmonotonic_polls(events, within_generation=True).count() == 0


def test_polls_in_the_same_millisecond_are_ordered_by_seq(spark, tmp_path) -> None:
    events = [e for i in range(5) for e in sent(f"v{i}", 0, i)]
    events += [read(f"v{i}", 0, i) for i in range(5)]
    events = plant(spark, tmp_path / "l.jsonl", events, same_ts=True)
    assert audit.nonmonotonic_polls(events).count() == 0


# --- order inversions -----------------------------------------------------------------


def test_order_inversion_is_a_later_produced_value_at_an_earlier_offset(spark, tmp_path) -> None:
    # p-1 sends a, b, c for key k; b's first batch failed and its retry landed after c.
    events = sent("a", 0, 0) + sent("b", 0, 2) + sent("c", 0, 1)
    events += sent("x", 0, 3, key="other")  # another key: not compared with k
    events += sent("z", 0, 4, producer="p-2")  # another producer of k: not compared
    events += [read("a", 0, 0), read("c", 0, 1), read("b", 0, 2), read("x", 0, 3), read("z", 0, 4)]
    events = plant(spark, tmp_path / "l.jsonl", events)
    found = rows(audit.order_inversions(events), "key", "producer", "prev_value", "prev_offset", "value", "offset")
    assert found == [("k", "p-1", "b", 2, "c", 1)]


def test_order_inversions_by_another_key_column(spark, tmp_path) -> None:
    events = sent("a", 0, 1) + sent("b", 0, 0)
    events += [read("b", 0, 0), read("a", 0, 1)]
    frame = plant(spark, tmp_path / "l.jsonl", events).withColumnRenamed("key", "flight")
    assert rows(audit.order_inversions(frame, key_col="flight"), "flight", "prev_value", "value") == [("k", "a", "b")]


# --- summary --------------------------------------------------------------------------


def test_summary_counts_one_planted_anomaly_of_each_kind(spark, tmp_path) -> None:
    events = [e for i in range(5) for e in sent(f"v{i}", 0, i, key="k0")]
    events += sent("w0", 1, 0, key="k1") + sent("w1", 1, 1, key="k1")
    events += sent("x0", 2, 1, key="k2") + sent("x1", 2, 0, key="k2")
    # p0: v2 lost (3 read), v4 unseen; m-1 goes back to 1 after 3: nonmonotonic + redelivery.
    events += [read("v0", 0, 0), read("v1", 0, 1), read("v3", 0, 3), read("v1", 0, 1)]
    # p1: the log holds w1 at 1 and at 2: duplicate.
    events += [read("w0", 1, 0), read("w1", 1, 1), read("w1", 1, 2)]
    # p2: x0 sent first, but the log has x1 first: order inversion.
    events += [read("x1", 2, 0), read("x0", 2, 1)]
    events += [processed("v0"), processed("v0")]
    events = plant(spark, tmp_path / "l.jsonl", events)
    assert audit.summary(events) == {name: 1 for name in audit.CHECKS}


# --- the primitives, on any record frame ----------------------------------------------


def test_positions_counts_the_distinct_offsets_holding_each_value(spark) -> None:
    log = spark.createDataFrame([("t", "a", 0, 0), ("t", "a", 1, 4), ("t", "a", 1, 4), ("t", "b", 0, 1)],
                                "topic string, value string, partition int, offset long")
    got = {r["value"]: (r["copies"], [tuple(o) for o in r["offsets"]]) for r in audit.positions(log).collect()}
    assert got == {"a": (2, [(0, 0), (1, 4)]), "b": (1, [(0, 1)])}, "a position read twice counts once"


def test_log_against_acks_shows_duplicates_and_lost_writes(spark, tmp_path) -> None:
    events = plant(spark, tmp_path / "l.jsonl", sent("a", 0, 0) + sent("b", 0, 1) + sent("c", 0, 2))
    log = spark.createDataFrame([("t", "a", 0, 0), ("t", "a", 0, 3), ("t", "b", 0, 1)],
                                "topic string, value string, partition int, offset long")
    got = rows(audit.log_against_acks(log, events), "value", "copies", "acks")
    assert got == [("a", 2, 1), ("b", 1, 1), ("c", 0, 1)], "a: duplicate; c: acked, not in the log (lost write)"


def test_inversions_are_the_places_a_column_steps_back(spark) -> None:
    frame = spark.createDataFrame([("x", 0, 0), ("x", 1, 2), ("x", 2, 1), ("x", 3, 1), ("y", 0, 5), ("y", 1, 4)],
                                  "g string, i long, v long")
    strict = rows(audit.inversions(frame, ["g"], ["i"], "v", carry=("i",)), "g", "prev_i", "i", "prev_v", "v")
    assert strict == [("x", 1, 2, 2, 1), ("y", 0, 1, 5, 4)]
    assert len(rows(audit.inversions(frame, ["g"], ["i"], "v", strict=False), "g", "i")) == 3, "a repeat steps back too"
    assert len(rows(audit.inversions(frame, [], ["i", "g"], "v"), "i")) == 2, "one group, v = 0 5 2 4 1 1: two steps back"


def test_input_against_output_counts_lost_duplicated_unexpected_and_aborted_reads(spark) -> None:
    inputs = spark.createDataFrame([("v", r) for r in "abcd"], "view string, record_id string")
    outputs = spark.createDataFrame([("v", "a", 0), ("v", "a", 1), ("v", "b", 0), ("v", "x", None), ("w", "y", 0)],
                                    "view string, record_id string, is_left int")
    got = {r["view"]: r.asDict() for r in audit.input_against_output(inputs, outputs).collect()}
    assert got["v"] == {"view": "v", "input": 4, "output": 4, "distinct_output": 3, "duplicates": 1, "duplicated_ids": 1,
                        "lost": 2, "unexpected": 1, "left_read": 1}, "c and d lost, a twice (once aborted), x unexpected"
    assert got["w"]["unexpected"] == 1 and got["w"]["input"] == 0
