"""kafkalab.dumplog: the one parser of ``kafka-dump-log`` output, on text captured from the tool
(Kafka 4.3.1) on this lab. Pure: no cluster (tests/test_segments_live.py runs the tool)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalab import dumplog

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


def test_parse_reads_every_batch_and_its_file() -> None:
    b = dumplog.parse(DUMP_SAMPLE).batches
    assert [x.file.split("/")[2] for x in b] == ["tour-red419a-py-0", "tour-red419a-java-0", "tour-red419a-java-0"]
    assert (b[0].producer_id, b[0].base_sequence, b[0].count, b[0].size) == (-1, -1, 59, 15768)
    assert (b[1].producer_id, b[1].producer_epoch, b[1].base_sequence, b[1].last_sequence) == (1001, 0, 0, 46)
    assert b[2].position == b[1].position + b[1].size  # batches sit back to back
    assert not any(x.is_transactional or x.is_control for x in b)
    assert {x.magic for x in b} == {2} and {x.compresscodec for x in b} == {"none"}


def test_parse_rejects_a_batch_line_it_does_not_understand() -> None:
    with pytest.raises(ValueError, match="producerId"):
        dumplog.parse("baseOffset: 0 lastOffset: 1 count: 2")


#: Shaped like kafka-dump-log --print-data-log output of Kafka 4.3.1 on this lab.
DUMP_DEEP = """\
Dumping /d/t-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 4008 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795250329967 size: 120 magic: 2 compresscodec: none crc: 4289770200 isvalid: true
| offset: 0 CreateTime: 1795250329967 keySize: 2 valueSize: 10 sequence: 0 headerKeys: [] key: k0 payload: value-0 ü
| offset: 1 CreateTime: 1795250329967 keySize: 12 valueSize: -1 sequence: 1 headerKeys: [h1,h2] key: a payload: b
baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: 4008 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true deleteHorizonMs: OptionalLong[1795250400000] position: 120 LogAppendTime: 1795250329991 size: 78 magic: 2 compresscodec: none crc: 2878027375 isvalid: false
| offset: 2 LogAppendTime: 1795250329991 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 3
Found 17 invalid bytes at the end of 00000000000000000000.log
Dumping /d/t-0/00000000000000000000.index
offset: 0 position: 0
Dumping /d/t-0/00000000000000000000.timeindex
timestamp: 1795250329967 offset: 1
"""


def test_parse_reads_batches_records_markers_and_index_lines() -> None:
    files = dumplog.parse(DUMP_DEEP).files
    log = files["/d/t-0/00000000000000000000.log"]
    b0, b1 = log.batches
    assert (b0.timestamp_type, b0.max_timestamp, b0.crc, b0.is_valid, b0.delete_horizon_ms) == (
        "CreateTime", 1795250329967, 4289770200, True, None)
    assert (b1.timestamp_type, b1.delete_horizon_ms, b1.is_valid, b1.is_control) == ("LogAppendTime", 1795250400000, False, True)
    r0, r1 = b0.records
    assert (r0.offset, r0.key, r0.value, r0.sequence, r0.header_keys) == (0, "k0", "value-0 ü", 0, ())
    # a key that contains " payload: " is cut at keySize characters, a null value has no payload
    assert (r1.key, r1.value, r1.header_keys, r1.value_size) == ("a payload: b", None, ("h1", "h2"), -1)
    (m,) = b1.records
    assert (m.control, m.coordinator_epoch, m.key, m.value) == ("ABORT", 3, None, None)
    assert log.trailing_bytes == 17
    assert files["/d/t-0/00000000000000000000.index"].index == [(0, 0)]
    assert files["/d/t-0/00000000000000000000.timeindex"].timeindex == [(1795250329967, 1)]
    assert dumplog.parse(DUMP_DEEP).batches == [b0, b1]


def test_parse_keeps_payload_spaces_and_cuts_a_non_ascii_key_at_its_byte_size() -> None:
    text = ("Dumping /d/t-0/00000000000000000000.log\n" + DUMP_DEEP.splitlines()[2] + "\n"
            "| offset: 0 CreateTime: 1 keySize: 14 valueSize: 3 sequence: -1 headerKeys: [] key: 数 payload: x payload: ab \n"
            "| offset: 1 CreateTime: 1 keySize: 0 valueSize: 0 sequence: -1 headerKeys: [] key:  payload: \n")
    r0, r1 = dumplog.parse(text).files["/d/t-0/00000000000000000000.log"].batches[0].records
    assert (r0.key, r0.value) == ("数 payload: x", "ab ")
    assert (r1.key, r1.value) == ("", "")


def test_parse_rejects_a_record_line_it_does_not_understand() -> None:
    with pytest.raises(ValueError, match="record line"):
        dumplog.parse("Dumping /x/00000000000000000000.log\n" + DUMP_SAMPLE.splitlines()[2] + "\n| offset: x\n")


#: Captured from ``kafka-dump-log --print-data-log`` (Kafka 4.3.1) on this lab: an idempotent
#: librdkafka producer; a record without key, one with a header, one without value.
DUMP_4_3 = """\
Dumping /work/main/.kafkalab/cluster/node-1/data/dumpcap-r810957-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 3049 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795251221048 size: 98 magic: 2 compresscodec: none crc: 3184948792 isvalid: true
| offset: 0 CreateTime: 1795251221048 keySize: -1 valueSize: 6 sequence: 0 headerKeys: [] payload: no-key
| offset: 1 CreateTime: 1795251221048 keySize: 2 valueSize: 11 sequence: 1 headerKeys: [h] key: k1 payload: with header
Dumping /work/main/.kafkalab/cluster/node-2/data/dumpcap-r810957-1/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: 3049 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795251221048 size: 70 magic: 2 compresscodec: none crc: 2098030991 isvalid: true
| offset: 0 CreateTime: 1795251221048 keySize: 2 valueSize: -1 sequence: 0 headerKeys: [] key: k2
"""

#: A librdkafka producer without idempotence (same tool, same version).
DUMP_PLAIN = """\
Dumping /d/lostack-rc7600e-flights-0/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795249666988 size: 103 magic: 2 compresscodec: none crc: 2075871002 isvalid: true
| offset: 0 CreateTime: 1795249666988 keySize: 6 valueSize: 29 sequence: -1 headerKeys: [] key: N14228 payload: flight-2013-01-01-UA-1545-EWR
"""


def test_records_carry_their_batchs_partition_and_producer() -> None:
    batches = dumplog.parse(DUMP_4_3).batches
    assert [(b.partition, b.base_offset, b.count, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.size)
            for b in batches] == [(0, 0, 2, 3049, 0, 0, 1, 98), (1, 0, 1, 3049, 0, 0, 0, 70)]
    r0, r1 = batches[0].records
    assert (r0.offset, r0.sequence, r0.key, r0.value) == (0, 0, None, "no-key")
    assert (r1.offset, r1.sequence, r1.key, r1.value) == (1, 1, "k1", "with header")
    [r2] = batches[1].records
    assert (r2.partition, r2.key, r2.value, r2.producer_id) == (1, "k2", None, 3049)
    assert batches[1].file.endswith("dumpcap-r810957-1/00000000000000000000.log")


def test_a_producer_without_idempotence_has_no_producer_id_or_sequence() -> None:
    [b] = dumplog.parse(DUMP_PLAIN).batches
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1) and not b.is_transactional
    assert b.records[0].value == "flight-2013-01-01-UA-1545-EWR" and b.records[0].sequence == -1


def test_parse_names_what_it_cannot_read_and_a_folder_that_is_no_partition() -> None:
    with pytest.raises(ValueError, match="producerId"):
        dumplog.parse("Dumping /d/t-0/0.log\nbaseOffset: 0 lastOffset: 0 count: 1\n")
    with pytest.raises(ValueError, match="before any batch"):
        dumplog.parse("| offset: 0 CreateTime: 1 keySize: -1 valueSize: 1 sequence: 0 headerKeys: [] payload: x\n")
    line = DUMP_PLAIN.splitlines()[2]
    assert dumplog.parse(f"Dumping /d/meta/00000000000000000000.log\n{line}\n").batches[0].partition is None
    assert dumplog.parse(f"Dumping /d/my-topic-12/00000000000000000000.log\n{line}\n").batches[0].partition == 12


def test_batches_table_has_the_header_fields() -> None:
    df = dumplog.batches_table(dumplog.parse(DUMP_4_3).batches)
    assert list(df.columns) == ["partition", "base_offset", "last_offset", "count", "producer_id", "producer_epoch",
                                "base_sequence", "last_sequence", "is_transactional", "position", "size"]
    assert df.producer_id.tolist() == [3049, 3049] and df.partition.tolist() == [0, 1]


def test_a_dump_finds_files_by_path_and_running_on_no_files_starts_no_tool() -> None:
    d = dumplog.parse(DUMP_DEEP)
    assert d.get(Path("/d/t-0/00000000000000000000.index")).index == [(0, 0)]
    assert d.get("/d/t-0/00000000000000000001.log") is None
    assert [r.offset for r in d.records] == [0, 1, 2] and [r.kind for r in d.records] == ["data", "data", "ABORT"]
    assert dumplog.run([]) == dumplog.Dump()


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
    recs = dumplog.parse(DUMP).records
    assert [(r.offset, r.kind) for r in recs] == [(0, "data"), (1, "data"), (2, "COMMIT"), (3, "data"),
                                                  (4, "ABORT"), (5, "data")]
    assert recs[1].value == "with: colon", "the payload is the rest of the line"
    assert recs[2].value is None and recs[2].timestamp == 1795250043997
    assert (recs[4].producer_id, recs[4].producer_epoch) == (3007, 1)
    assert (recs[5].producer_id, recs[5].is_transactional) == (-1, False)


def test_a_record_line_before_any_batch_is_an_error() -> None:
    with pytest.raises(ValueError, match="before any batch"):
        dumplog.parse("| offset: 0 CreateTime: 1 payload: x\n")


def test_batches_table_has_the_partition_of_each_batch() -> None:
    line = ("baseOffset: {b} lastOffset: {l} count: {c} baseSequence: -1 lastSequence: -1 producerId: -1 "
            "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
            "deleteHorizonMs: OptionalLong.empty position: {pos} CreateTime: 1 size: {s} magic: 2 "
            "compresscodec: none crc: 1 isvalid: true")
    text = "\n".join([
        "Dumping /d/t-x-0/00000000000000000000.log", line.format(b=0, l=9, c=10, pos=0, s=500),
        "Dumping /d/t-x-2/00000000000000000000.log", line.format(b=0, l=3, c=4, pos=0, s=200),
        line.format(b=4, l=4, c=1, pos=200, s=80)])
    df = dumplog.batches_table(dumplog.parse(text).batches)
    assert list(df["partition"]) == [0, 2, 2]
    assert df.groupby("partition")[["count", "size"]].sum().to_dict() == {"count": {0: 10, 2: 5}, "size": {0: 500, 2: 280}}


