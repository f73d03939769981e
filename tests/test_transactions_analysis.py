"""kafkalab.experiments.transactions_analysis: the exactly-once audit, ledger reading, parsers
of Kafka's tools, the coordinator hash. Pure code on planted data (Spark tests use the shared
session)."""

from __future__ import annotations

import pytest

from kafkalab.experiments import transactions_analysis as ta
from kafkalab.ledger import Event

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

#: kafka-dump-log --print-data-log, Kafka 4.3.1, on this lab: a committed and an aborted
#: transaction of one producer (id 3007, epoch 0), then a plain record.
DUMP = """\
Dumping /data/txn-r1-basics-2/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 3007 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795250043857 size: 88 magic: 2 compresscodec: none crc: 3541626378 isvalid: true
| offset: 0 CreateTime: 1795250043857 keySize: -1 valueSize: 2 sequence: 0 headerKeys: [] payload: c0
| offset: 1 CreateTime: 1795250043857 keySize: -1 valueSize: 9 sequence: 1 headerKeys: [] payload: with: colon
baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: 3007 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 88 CreateTime: 1795250043997 size: 78 magic: 2 compresscodec: none crc: 1436259909 isvalid: true
| offset: 2 CreateTime: 1795250043997 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 0
baseOffset: 3 lastOffset: 3 count: 1 baseSequence: 2 lastSequence: 2 producerId: 3007 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty position: 166 CreateTime: 1795250043976 size: 70 magic: 2 compresscodec: none crc: 975332815 isvalid: true
| offset: 3 CreateTime: 1795250043976 keySize: -1 valueSize: 2 sequence: 2 headerKeys: [] payload: a0
baseOffset: 4 lastOffset: 4 count: 1 baseSequence: -1 lastSequence: -1 producerId: 3007 producerEpoch: 1 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty position: 236 CreateTime: 1795250054071 size: 78 magic: 2 compresscodec: none crc: 452533043 isvalid: true
| offset: 4 CreateTime: 1795250054071 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 0
baseOffset: 5 lastOffset: 5 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 314 CreateTime: 1795250044115 size: 70 magic: 2 compresscodec: none crc: 4180596086 isvalid: true
| offset: 5 CreateTime: 1795250044115 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: n0
"""


def test_dump_records_tell_data_from_commit_and_abort_markers() -> None:
    recs = ta.parse_dump_records(DUMP)
    assert [(r.offset, r.kind) for r in recs] == [(0, "data"), (1, "data"), (2, "COMMIT"), (3, "data"),
                                                  (4, "ABORT"), (5, "data")]
    assert recs[1].payload == "with: colon", "the payload is the rest of the line"
    assert recs[2].payload is None and recs[2].timestamp == 1795250043997
    assert (recs[4].producer_id, recs[4].producer_epoch) == (3007, 1)
    assert (recs[5].producer_id, recs[5].transactional) == (-1, False)


def test_records_table_indexes_by_partition_from_the_folder_name() -> None:
    t = ta.records_table(ta.parse_dump_records(DUMP))
    assert list(t.index[:2]) == [(2, 0), (2, 1)]
    assert list(t["kind"]) == ["data", "data", "COMMIT", "data", "ABORT", "data"]


def test_a_record_line_before_any_batch_is_an_error() -> None:
    with pytest.raises(ValueError, match="before any batch"):
        ta.parse_dump_records("| offset: 0 CreateTime: 1 payload: x\n")


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


# ----------------------------------------------------------------------------- the coordinator


@pytest.mark.parametrize("s, expected", [
    # values printed by Java 17's String.hashCode() for these strings
    ("hello", 99162322), ("", 0), ("polygenelubricants", -2147483648),
    ("txn-r1a2b3c-abandoned-0", -870728823), ("트랜잭션", 1653850671), ("orders-7", 1234322255),
])
def test_java_string_hashcode_matches_java(s: str, expected: int) -> None:
    assert ta.java_string_hashcode(s) == expected


@pytest.mark.parametrize("tid, partitions, expected", [
    ("hello", 10, 2), ("polygenelubricants", 10, 0), ("txn-r1a2b3c-abandoned-0", 10, 3),
    ("트랜잭션", 50, 21), ("orders-7", 50, 5),
])
def test_transaction_state_partition_is_kafkas_partition_for(tid: str, partitions: int, expected: int) -> None:
    # Utils.abs(hashCode) % partitions, Utils.abs(Integer.MIN_VALUE) == 0 (computed with Java 17)
    assert ta.transaction_state_partition(tid, partitions) == expected


def test_transaction_state_partition_needs_partitions() -> None:
    with pytest.raises(ValueError):
        ta.transaction_state_partition("x", 0)


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
    v = ta.spark_verdict(inp, out)
    assert (v.input, v.output, v.lost) == (2, 0, 2)
