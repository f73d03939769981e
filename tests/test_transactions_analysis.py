"""kafkalab.experiments.transactions_analysis: the exactly-once audit, ledger reading, parsers
of Kafka's tools, the dumped records as a table. Pure code on planted data (Spark tests use the shared
session)."""

from __future__ import annotations

import pytest

from kafkalab import dumplog
from kafkalab.experiments import transactions_analysis as ta
from kafkalab.ledger import Event
from test_dumplog import DUMP

# ----------------------------------------------------------------------------- the audit


def test_audit_counts_extra_copies_lost_and_unexpected_ids() -> None:
    v = ta.audit_ids(["a", "b", "c", "d"], ["a", "a", "a", "b", "c", "x"])
    assert (v.input, v.output, v.distinct_output) == (4, 6, 4)
    assert (v.duplicates, v.duplicated_ids, v.lost, v.unexpected) == (2, 1, 1, 1)
    assert not v.exactly_once
    assert v.to_json()["exactly_once"] is False


def test_output_equal_to_the_input_set_without_repeats_is_exactly_once() -> None:
    v = ta.audit_ids(["a", "b", "b"], ["b", "a"])  # the input is a set
    assert v.exactly_once and (v.input, v.output, v.duplicates, v.lost) == (2, 2, 0, 0)


def test_an_empty_output_loses_every_input_record() -> None:
    v = ta.audit_ids(["a", "b"], [])
    assert (v.lost, v.output, v.exactly_once) == (2, 0, False)


# ----------------------------------------------------------------------------- the ledger


def _e(seq: int, kind: str, name: str, **kw) -> Event:
    return Event(run_id="r", kind=kind, ts_ms=1000 + seq, seq=seq, topic=kw.pop("topic", "t"), client_id=name, **kw)


def test_incarnations_split_what_was_committed_from_what_a_crash_left_behind() -> None:
    events = [
        _e(0, "consumed", "p-0", value="a"), _e(1, "produced", "p-0", value="a"),
        _e(2, "acked", "p-0", partition=0, offset=0, value="a"),
        _e(3, "committed", "p-0", partition=0, offset=1), _e(4, "committed", "p-0", partition=1, offset=5),
        _e(5, "consumed", "p-0", value="b"), _e(6, "produced", "p-0", value="b"),
        _e(7, "acked", "p-0", partition=1, offset=3, value="b"), _e(8, "processed", "p-0", value="b"),
        # the next incarnation replays b and finishes
        _e(0, "consumed", "p-1", value="b"), _e(1, "produced", "p-1", value="b"),
        _e(2, "acked", "p-1", partition=1, offset=5, value="b"), _e(3, "committed", "p-1", partition=1, offset=6),
    ]
    first, second = ta.incarnations(events)
    assert (first.name, first.consumed, first.produced, first.transactions) == ("p-0", 2, 2, 1)
    assert (first.uncommitted, first.uncommitted_offsets) == (1, [(1, 3)])
    assert (first.sink_writes, first.uncommitted_sink_writes) == (1, 1)
    assert (second.uncommitted, second.transactions, second.uncommitted_offsets) == (0, 1, [])


def test_a_failed_delivery_is_not_an_offset_left_in_the_log() -> None:
    events = [_e(0, "produced", "p-0", value="a"), _e(1, "acked", "p-0", value="a", error="timed out")]
    (inc,) = ta.incarnations(events)
    assert inc.uncommitted == 1 and inc.uncommitted_offsets == []


# ----------------------------------------------------------------------------- kafka-dump-log


def test_records_table_indexes_by_partition_from_the_folder_name() -> None:
    t = ta.records_table(dumplog.parse(DUMP).records)
    assert list(t.index[:2]) == [(2, 0), (2, 1)]
    assert list(t["kind"]) == ["data", "data", "COMMIT", "data", "ABORT", "data"]
    assert t.loc[(2, 1), "payload"] == "with: colon" and t.loc[(2, 2), "payload"] is None
    assert (t.loc[(2, 4), "producer_epoch"], t.loc[(2, 5), "transactional"]) == (1, False)


# ----------------------------------------------------------------------------- Kafka's other tools

DESCRIBE = (
    "CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\tTransactionTimeoutMs\t"
    "CurrentTransactionStartTimeMs\tTransactionDurationMs\tTopicPartitions\t\n"
    "2            \ttxn-re1a045-abandoned\t1018      \t0            \tOngoing         \t3000                \t"
    "1795250457101                \t1750                 \ttxn-re1a045-abandoned-out-0\t\n"
)


def test_transactions_describe_is_parsed_into_columns() -> None:
    d = ta.parse_transactions_describe(DESCRIBE)
    assert d["CoordinatorId"] == "2" and d["TransactionState"] == "Ongoing"
    assert d["TopicPartitions"] == "txn-re1a045-abandoned-out-0"
    assert int(d["CurrentTransactionStartTimeMs"]) == 1795250457101


def test_transactions_describe_without_a_table_is_an_error() -> None:
    with pytest.raises(ValueError, match="no table"):
        ta.parse_transactions_describe("Error: no such transactional id\n")


def test_features_are_read_with_their_finalized_level() -> None:
    text = ("Feature: metadata.version   SupportedMinVersion: 3.3-IV3   SupportedMaxVersion: 4.3-IV0   "
            "FinalizedVersionLevel: 4.3-IV0   Epoch: 6290\n"
            "Feature: transaction.version   SupportedMinVersion: 0   SupportedMaxVersion: 2   "
            "FinalizedVersionLevel: 2   Epoch: 6290\n")
    assert ta.parse_features(text) == {"metadata.version": "4.3-IV0", "transaction.version": "2"}
    with pytest.raises(ValueError):
        ta.parse_features("nothing here")


# ----------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spark_verdicts_agree_with_the_python_audit(spark) -> None:
    inp = spark.createDataFrame([(r,) for r in "abcd"], "record_id string")
    out_a = spark.createDataFrame([("a", 0, 0), ("a", 0, 1), ("b", 1, 0), ("x", 1, 1)],
                                  "record_id string, partition int, offset long")
    out_b = spark.createDataFrame([(r,) for r in "abcd"], "record_id string")
    left = spark.createDataFrame([(0, 1), (2, 9)], "partition int, offset long")
    v = ta.spark_verdicts({"a": inp, "b": inp}, {"a": out_a, "b": out_b}, {"a": left})
    expected = ta.audit_ids("abcd", ["a", "a", "b", "x"])
    expected.left_read = 1  # ("a", 0, 1) sits at a position left uncommitted
    assert v["a"] == expected
    assert v["b"].exactly_once and v["b"].left_read == 0


@pytest.mark.spark
def test_spark_verdict_of_an_empty_output_loses_everything(spark) -> None:
    inp = spark.createDataFrame([(r,) for r in "ab"], "record_id string")
    out = spark.createDataFrame([], "record_id string")
    v = ta.spark_verdicts({"view": inp}, {"view": out})["view"]
    assert (v.input, v.output, v.lost) == (2, 0, 2)
