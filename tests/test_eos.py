"""Notebook 05's programs and their instruments (``kafkalab.instruments.transactions``): the
options, the crash points and the reader's ledger (pure, with stand-in messages), the settings
the harness reads from a program, and one live incarnation of the processor program (a worker
process) that stops exactly at its crash point."""

from __future__ import annotations

import json
import signal

import pytest

from kafkalab import admin, instruments, programs
from kafkalab.experiments import transactions as tx
from kafkalab.instruments.transactions import (CRASH_POINTS, END_OF_PARTITION, ProcessorOptions, ReaderLab,
                                               TransactionsLab, record_id)
from kafkalab.ledger import read_events
from kafkalab.worker import ProgramSpec, spec_from_json, spec_json


class Msg:
    """A stand-in for ``confluent_kafka.Message``."""

    def __init__(self, offset: int, value: bytes | None = b'{"record_id":"f-1"}', partition: int = 0, error=None):
        self._offset, self._value, self._partition, self._error = offset, value, partition, error

    def error(self):
        return self._error

    def topic(self):
        return "in"

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return b"N1"

    def value(self):
        return self._value


def _spec(tmp_path, role: str = "transactions", **options) -> ProgramSpec:
    base = {"group_id": "g", "transactional_id": "tid", "partitions": [0, 1], "batch": 4} if role == "transactions" else {}
    return ProgramSpec(name="p-0", run_id="r", ledger=str(tmp_path / "p-0.jsonl"), role=role, program_name="p",
                       source="pass\n", conf={"bootstrap.servers": "x:1", "client.id": "p-0"},
                       topics=["in", "out"], options={**base, **options})


def test_processor_options_reject_unknown_crash_points_and_empty_batches() -> None:
    with pytest.raises(ValueError, match="crash_point"):
        ProcessorOptions(group_id="g", crash_point="before-lunch")
    with pytest.raises(ValueError, match="batch"):
        ProcessorOptions(group_id="g", batch=0)
    assert CRASH_POINTS == ("mid-produce", "after-produce", "after-offsets", "after-commit")


def test_the_roles_of_notebook_05_are_registered(tmp_path) -> None:
    lab = instruments.install(_spec(tmp_path))
    try:
        assert isinstance(lab, TransactionsLab)
        assert (lab.input_topic, lab.output_topic, lab.group_id, lab.transactional_id, lab.batch) == ("in", "out", "g", "tid", 4)
        assert set(lab.conf) == {"bootstrap.servers", "client.id"}, "the harness adds addresses and names only"
    finally:
        lab.close()
    reader = instruments.install(_spec(tmp_path, role="reader", partitions=[0, 1, 2]))
    try:
        assert isinstance(reader, ReaderLab) and reader.partitions == [0, 1, 2] and reader.topic == "in"
    finally:
        reader.close()


def test_a_crash_point_elsewhere_or_in_another_batch_does_nothing(tmp_path) -> None:
    lab = TransactionsLab(_spec(tmp_path, crash_at=2, crash_point="after-offsets"))
    try:
        assert len(lab.consumed([Msg(0), Msg(1)])) == 2 and lab.batch_no == 1
        for point in CRASH_POINTS:
            lab.crash_point(point)  # batch 1: no crash anywhere
        lab.consumed([Msg(2)])
        lab.crash_point("after-produce")  # batch 2, another point: no crash
        with pytest.raises(ValueError, match="crash point"):
            lab.crash_point("sometime")
    finally:
        lab.close()


def test_consumed_drops_end_of_partition_events_and_counts_batches_of_records(tmp_path) -> None:
    from confluent_kafka import KafkaError

    lab = TransactionsLab(_spec(tmp_path))
    try:
        assert lab.consumed([Msg(5, error=KafkaError(KafkaError._PARTITION_EOF))]) == [] and lab.batch_no == 0
        with pytest.raises(RuntimeError, match="consumer error"):
            lab.consumed([Msg(5, error=KafkaError(KafkaError._TRANSPORT))])
    finally:
        lab.close()


def test_the_input_is_done_once_the_committed_offsets_reach_the_end_offsets(tmp_path) -> None:
    from confluent_kafka import TopicPartition

    class FakeConsumer:
        def get_watermark_offsets(self, tp, timeout, cached):
            return (0, 10 + tp.partition)

    lab = TransactionsLab(_spec(tmp_path))
    try:
        lab.assigned(FakeConsumer(), [TopicPartition("in", 0, -1001), TopicPartition("in", 1, 3)])
        assert lab.running()
        lab.committed([TopicPartition("in", 0, 10), TopicPartition("in", 1, -1001)])  # invalid offsets: no commit
        assert lab.running()
        lab.committed([TopicPartition("in", 1, 11)])
        assert not lab.running() and lab.done()
    finally:
        lab.close()
    kinds = [(e.kind, e.partition, e.offset) for e in read_events(tmp_path / "p-0.jsonl")]
    assert kinds == [("assigned", 0, 0), ("assigned", 1, 3), ("committed", 0, 10), ("committed", 1, 11)]


def test_a_reader_records_records_and_where_each_partition_ended(tmp_path) -> None:
    from confluent_kafka import KafkaError

    lab = ReaderLab(_spec(tmp_path, role="reader", partitions=[0]))
    try:
        lab.read(Msg(3, b"first-0"))
        lab.read(Msg(5, None, error=KafkaError(KafkaError._PARTITION_EOF)))
    finally:
        lab.close()
    events = read_events(tmp_path / "p-0.jsonl")
    assert [(e.offset, e.value, e.error) for e in events] == [(3, "first-0", None), (5, None, END_OF_PARTITION)]


def test_record_id_reads_json_values_and_keeps_other_text() -> None:
    assert record_id(b'{"record_id":"f-1","route":"JFK-LAX"}') == "f-1"
    assert record_id(b"A-0") == "A-0" and record_id(None) is None


def test_a_program_spec_round_trips_through_the_worker_json(tmp_path) -> None:
    s = _spec(tmp_path, crash_at=3, crash_point="mid-produce")
    assert json.loads(spec_json(s))["kind"] == "program"
    assert spec_from_json(spec_json(s)) == s


def test_the_harness_reads_the_settings_a_program_writes() -> None:
    reader = programs.from_notebook(tx.NOTEBOOK, "reader")
    assert tx.isolation_level(reader) == "read_committed"
    assert tx.isolation_level(tx.uncommitted_reader(reader)) == "read_uncommitted"
    assert tx.isolation_level(reader.replace('"isolation.level": "read_committed",', "")) == "read_committed"
    processor = programs.from_notebook(tx.NOTEBOOK, "processor")
    assert tx.is_transactional(processor) and not tx.is_transactional(programs.from_notebook(tx.NOTEBOOK, "at_least_once"))
    assert tx.program_setting(processor, "transaction.timeout.ms") == "60000"
    assert tx.program_setting(processor, "no.such.setting") is None


def test_the_processor_programs_have_every_crash_point_of_their_loop() -> None:
    processor = programs.from_notebook(tx.NOTEBOOK, "processor").source
    assert all(f'lab.crash_point("{p}"' in processor for p in CRASH_POINTS)
    assert "send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())" in processor
    alo = programs.from_notebook(tx.NOTEBOOK, "at_least_once").source
    assert 'lab.crash_point("after-offsets"' not in alo and "transactional.id" not in alo


@pytest.mark.cluster
def test_a_processor_incarnation_dies_exactly_at_its_crash_point_and_the_next_one_finishes(tmp_path) -> None:
    from kafkalab.experiments import transactions_analysis as ta

    processor = programs.from_notebook(tx.NOTEBOOK, "processor")
    reader = programs.from_notebook(tx.NOTEBOOK, "reader")
    run = tx.TxnRun(prefix="test-eosp")
    try:
        tin, tout = run.topic("in"), run.topic("out")
        admin.create_topics({tin: 2, tout: 2})
        tx.produce_input(tin, 30)
        options = dict(group_id=run.group("g"), transactional_id=run.transactional_id("p"), partitions=(0, 1),
                       batch=10, sink=str(run.dir / "sink.db"))
        first, ledger = run.start(processor, "transactions", "p-0", [tin, tout],
                                  options={**options, "crash_at": 2, "crash_point": "after-offsets"})
        assert first.wait(60) == -signal.SIGKILL, first.log_tail()
        (inc,) = ta.incarnations(read_events(ledger))
        assert inc.transactions == 1, "one batch committed, the crash came in the second"
        assert inc.produced == inc.consumed and inc.uncommitted > 0, (
            "every record read was produced, and the second batch (offsets sent) was never committed")
        second, _ = run.start(processor, "transactions", "p-1", [tin, tout], options=options)
        assert second.wait(60) == 0, second.log_tail()
        out = [json.loads(r.value)["record_id"] for r in tx.read_all(run, reader, tout)]
        assert sorted(out) == sorted(tx.input_records(30)[i][2] for i in range(30)), "each input record once"
    finally:
        run.cleanup()
