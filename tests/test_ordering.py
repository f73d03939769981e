"""Notebook 07's family: its programs' settings and the unkeyed result (pure), and one
`kafkalab run ordering --json` for each of its two paths (a group's order, `--retry-reorder`) on
the live cluster. The verdicts themselves are asserted by notebook 07 and its solution (issue 34)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab import defaults
from kafkalab.cli import main


def run_ordering(*args: str) -> dict:
    result = CliRunner().invoke(main, ["run", "ordering", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{"):])


def test_the_ordering_command_is_registered() -> None:
    result = CliRunner().invoke(main, ["run", "ordering", "--help"])
    assert result.exit_code == 0 and "--retry-reorder" in result.output and "--max-in-flight" in result.output


@pytest.mark.cluster
@pytest.mark.parametrize("partitions,consumers,keys,messages", [(4, 2, 7, 300)])  # the CLI's smoke: notebook 07 cell 7
def test_a_group_breaks_global_order_but_keeps_key_and_partition_order(partitions, consumers, keys, messages) -> None:
    r = run_ordering("--partitions", str(partitions), "--consumers", str(consumers), "--keys", str(keys),
                     "--messages", str(messages))
    if keys:  # the keys must reach several partitions, or there is nothing to interleave
        assert len({defaults.librdkafka_partition(f"k{i}".encode(), partitions) for i in range(keys)}) > 1
    assert r["consumed"] == messages and r["redelivered"] == 0
    assert r["partitions_used"] > 1 and r["witness"] is not None and r["global_inversions"] >= 1
    assert r["per_key_inversions"] == 0 and r["per_partition_inversions"] == 0


@pytest.mark.cluster
@pytest.mark.parametrize("idempotence,max_in_flight,expected", [("off", None, 1)])  # the CLI's smoke: notebook 07 cell 34
def test_a_retry_reorders_only_without_idempotence_and_with_several_in_flight(idempotence, max_in_flight, expected) -> None:
    args = ["--retry-reorder", "--idempotence", idempotence, "--messages", "6"]
    if max_in_flight:
        args += ["--max-in-flight", max_in_flight]
    r = run_ordering(*args)
    assert r["dropped_requests"] == 1 and r["duplicates"] == 0 and sorted(r["log_order"]) == list(range(6))
    assert r["per_partition_inversions"] == r["per_key_inversions"] == r["global_inversions"] == expected
    if expected:
        assert r["log_order"] == [1, 2, 3, 4, 5, 0], "the dropped record's retry landed last"


def test_unkeyed_runs_are_stretches_of_one_partition_in_send_order() -> None:
    from kafkalab.experiments.ordering import UNKEYED_CLIENTS, UnkeyedResult

    landed = {UNKEYED_CLIENTS[0]: [2, 2, 2, 5, 5, 2], UNKEYED_CLIENTS[1]: [0, 1, 2, 3, 4, 5],
              UNKEYED_CLIENTS[2]: [4, 4, 4, 4, 4, 4]}
    r = UnkeyedResult("t", 6, 6, 100, landed)
    assert r.runs(UNKEYED_CLIENTS[0]) == [(2, 3), (5, 2), (2, 1)]
    assert r.runs(UNKEYED_CLIENTS[2]) == [(4, 6)]
    t = r.table()
    assert list(t["stretches"]) == [3, 6, 1] and list(t["partitions used"]) == [2, 6, 1]


def test_run_unkeyed_refuses_values_too_short_for_its_numbering() -> None:
    from kafkalab.errors import KafkalabError
    from kafkalab.experiments.ordering import run_unkeyed

    with pytest.raises(KafkalabError, match="value_bytes >= 40"):
        run_unkeyed({}, value_bytes=10)


def test_the_notebooks_programs_write_the_settings_the_lessons_are_about() -> None:
    from kafkalab.experiments import ordering

    keyed = ordering.notebook_program("keyed_producer")
    assert '"partitioner": "consistent_random"' in keyed.source and '"enable.idempotence": True' in keyed.source
    assert "key=" not in ordering.without_key(keyed).source.split("produce(", 1)[1].split(")")[0]
    assert '"partitioner": "murmur2_random"' in ordering.notebook_program("murmur2_producer").source
    variants = ordering.unkeyed_variants(ordering.notebook_program("unkeyed_producer"))
    assert list(variants) == [c for c in ordering.UNKEYED_CLIENTS if c != ordering.UNKEYED_CLIENTS[2]]
    murmur2 = variants["librdkafka murmur2, sticky off"].source
    assert '"partitioner": "murmur2",' in murmur2 and '"sticky.partitioning.linger.ms": 0,' in murmur2
    assert '"partitioner": "random",' in variants["librdkafka random, sticky 60 s"].source
    plain = ordering.notebook_program("plain_producer").source
    assert '"max.in.flight.requests.per.connection": 1000000,' in plain and '"enable.idempotence": False,' in plain
    assert '"max.in.flight.requests.per.connection": 1,' in ordering.notebook_program("one_in_flight_producer").source
    assert "lab.wait_for_fault()" in ordering.notebook_program("idempotent_producer").source
    assert '"max.in.flight.requests.per.connection": 2,' in ordering.retry_program(False, 2).source
    assert '"max.in.flight.requests.per.connection": 3, "enable.idempotence": True,' in ordering.retry_program(True, 3).source


def test_received_orders_each_consume_call_as_one_batch_by_when_it_returned() -> None:
    from kafkalab.experiments.ordering import received
    from kafkalab.ledger import Event

    def ev(client: str, ts: int, seq: int, value: int, partition: int, offset: int, kind: str = "consumed",
           error: str | None = None) -> Event:
        return Event("r", kind, ts, seq, "t", partition, offset, f"k{value % 3}", str(value), client_id=client, error=error)

    events = [ev("consumer-1", 10, 0, 1, 1, 0), ev("consumer-0", 10, 0, 0, 0, 0), ev("consumer-0", 10, 1, 2, 0, 1),
              ev("consumer-0", 12, 2, 4, 0, 2), ev("consumer-1", 11, 1, 3, 1, 1),
              ev("consumer-0", 9, 3, 0, 0, 0, kind="assigned"), ev("consumer-1", 9, 2, 0, 0, 0, error="boom")]
    got = received(events)
    assert [(r.consumer, r.seq, r.batch) for r in got] == [
        ("consumer-0", 0, 0), ("consumer-0", 2, 0), ("consumer-1", 1, 1), ("consumer-1", 3, 2), ("consumer-0", 4, 3)]
    assert [r.index for r in got] == [0, 1, 2, 3, 4] and got[0].key == "k0"


def test_the_group_reader_holds_its_partitions_until_the_group_has_formed() -> None:
    from kafkalab.experiments import ordering
    from kafkalab.programs import program_settings

    reader = ordering.notebook_program("group_reader").source
    assert "consumer.pause(partitions)" in reader and "lab.group_formed()" in reader and "consumer.resume(held)" in reader
    settings = program_settings(reader)
    assert settings["partition.assignment.strategy"] == "range" and settings["auto.offset.reset"] == "earliest"


def test_a_consumer_labs_group_formed_reads_its_file_and_one_call_shares_one_time(tmp_path) -> None:
    from kafkalab.instruments.consumer import ConsumerLab
    from kafkalab.ledger import read_events
    from kafkalab.worker import ProgramSpec

    formed = tmp_path / "formed"
    spec = ProgramSpec("c", "r", str(tmp_path / "c.jsonl"), "consumer", "p", "", topics=["t"],
                       options={"group_formed": str(formed)})
    lab = ConsumerLab(spec)
    assert not lab.group_formed()
    formed.touch()
    assert lab.group_formed()

    class Msg:
        def __init__(self, offset: int):
            self._offset = offset

        def error(self):
            return None

        def topic(self):
            return "t"

        def partition(self):
            return 0

        def offset(self):
            return self._offset

        def key(self):
            return None

        def value(self):
            return str(self._offset).encode()

    lab.consumed([Msg(i) for i in range(50)])
    lab.close()
    events = read_events(spec.ledger)
    assert len(events) == 50 and len({e.ts_ms for e in events}) == 1, "one consume() call, one time"
    other = ConsumerLab(ProgramSpec("d", "r", str(tmp_path / "d.jsonl"), "consumer", "p", ""))
    assert other.group_formed(), "without the option a group is always formed"
    other.close()
