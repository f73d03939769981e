"""kafkalab.experiments.transactions: the crash plan (pure) and, against the live cluster, the
claims of notebook 05 with other numbers than the notebook uses: exactly-once under crashes,
at-least-once duplicates, the last stable offset, the coordinator, fencing, the CLI."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from confluent_kafka import KafkaException, Producer

from kafkalab import admin, config, coordinators, programs
from kafkalab.experiments import transactions as tx
from kafkalab.admin import describe_config


def _program(name: str) -> programs.Program:
    return programs.from_notebook(tx.NOTEBOOK, name)


def _readers() -> tuple[programs.Program, programs.Program]:
    reader = _program("reader")
    return reader, tx.uncommitted_reader(reader)


def _transactional_producer(transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": config.bootstrap_servers(), "transactional.id": transactional_id,
                  "transaction.timeout.ms": 10000})
    p.init_transactions(30)
    return p

# ----------------------------------------------------------------------------- the crash plan (pure)


def test_crash_plan_spreads_crashes_over_the_input_and_cycles_the_points() -> None:
    plan = tx.crash_plan(600, 50, 3, ("after-produce", "after-offsets"))
    assert plan == [(3, "after-produce"), (3, "after-offsets"), (3, "after-produce")]


def test_crash_plan_crashes_in_the_first_batch_when_the_input_is_short() -> None:
    assert tx.crash_plan(60, 50, 3, ("after-produce",)) == [(1, "after-produce")] * 3


def test_crash_plan_refuses_more_after_commit_crashes_than_batches() -> None:
    with pytest.raises(ValueError, match="too few|nothing"):
        tx.crash_plan(100, 50, 3, ("after-commit",))


def test_crash_plan_rejects_unknown_points_and_bad_sizes() -> None:
    with pytest.raises(ValueError, match="unknown crash point"):
        tx.crash_plan(100, 10, 1, ("sometime",))
    with pytest.raises(ValueError):
        tx.crash_plan(0, 10, 1, ("after-produce",))
    assert tx.crash_plan(5, 10, 0, ()) == []


def test_input_records_are_unique_beyond_the_2000_flights_of_the_sample() -> None:
    ids = [r for _, _, r in tx.input_records(2100)]
    assert len(set(ids)) == 2100 and ids[2000].endswith("#1")
    assert json.loads(tx.input_records(1)[0][1])["record_id"] == ids[0]


# ----------------------------------------------------------------------------- live


@pytest.fixture
def run():
    r = tx.TxnRun(prefix="test-txn")
    yield r
    r.cleanup()


@pytest.mark.cluster
@pytest.mark.parametrize("messages, crashes, batch, partitions, points", [
    (137, 2, 20, 2, ("mid-produce", "after-commit")),
    (251, 5, 25, 3, None),  # the default cycle: after-produce, after-offsets, mid-produce, after-commit
])
def test_exactly_once_holds_for_other_message_and_crash_counts(run, messages, crashes, batch, partitions, points) -> None:
    r = tx.run_eos(run, _program("processor"), _readers(), messages=messages, crashes=crashes, batch=batch,
                   partitions=partitions, points=points)
    assert [i["returncode"] for i in r.incarnations] == [-9] * crashes + [0]
    assert r.exactly_once and r.output_read_committed == r.input == messages, r.to_json()
    assert r.aborted_reads == 0
    assert r.output_read_uncommitted == messages + r.uncommitted, "read_uncommitted also sees the aborted attempts"


@pytest.mark.cluster
def test_at_least_once_duplicates_what_was_produced_after_the_last_commit(run) -> None:
    r = tx.run_eos(run, _program("at_least_once"), _readers(), messages=160, crashes=2, batch=30, partitions=2,
                   points=("after-produce", "after-commit"))
    assert r.lost == 0 and r.duplicates == r.uncommitted > 0
    assert r.incarnations[1]["uncommitted"] == 0, "a crash right after a commit duplicates nothing"


@pytest.mark.cluster
def test_an_open_transaction_holds_read_committed_readers_at_the_last_stable_offset(run) -> None:
    topic = run.topic("lso")
    admin.create_topics({topic: 2})
    p = _transactional_producer(run.transactional_id("lso"))
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=f"done-{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=1)
    p.flush(10)
    reader = run.reader(_program("reader"), topic)
    assert sorted(r.value for r in reader.catch_up()) == [f"done-{i}" for i in range(4)]
    lso, hw = tx.end_offsets(topic, "read_committed"), tx.end_offsets(topic)
    assert lso[1] == reader.position[1] == 3 and hw[1] == 4, "partition 1 is held at the open transaction"
    assert lso[0] == hw[0], "partition 0 has no open transaction"
    p.abort_transaction(10)
    assert reader.catch_up(until_stable=True) == [] and reader.position[1] == 5, "past the record and its ABORT marker"


@pytest.mark.cluster
def test_the_coordinator_is_the_leader_of_the_hashed_transaction_state_partition(run) -> None:
    topic = run.topic("coord")
    tid = run.transactional_id("coord")
    # create_topic_led_by waits until the metadata names its leader; a second metadata request
    # may reach a broker that does not list the topic yet (a clean-clone run saw KeyError 0).
    topic_leader = tx.create_topic_led_by(topic, avoid_leader=coordinators.transaction_coordinator(tid)[1])
    p = _transactional_producer(tid)
    p.begin_transaction()
    p.produce(topic, value=b"x-0")
    p.commit_transaction(30)
    described = tx.describe_transaction(tid)
    _, leader = coordinators.transaction_coordinator(tid)
    assert int(described["CoordinatorId"]) == leader != topic_leader
    assert described["TransactionState"] == "CompleteCommit"


@pytest.mark.cluster
def test_a_second_producer_with_the_same_transactional_id_fences_the_first(run) -> None:
    topic = run.topic("fence")
    admin.create_topics({topic: 1})
    tid = run.transactional_id("fence")
    a = _transactional_producer(tid)
    a.begin_transaction()
    a.produce(topic, value=b"A-0")
    a.commit_transaction(30)
    b = _transactional_producer(tid)
    a.begin_transaction()
    a.produce(topic, value=b"A-zombie")
    with pytest.raises(KafkaException) as fenced:
        a.commit_transaction(30)
    err = fenced.value.args[0]
    assert (err.name(), err.fatal(), err.retriable()) == ("_FENCED", True, False)
    for retry in (lambda: a.commit_transaction(30), lambda: a.init_transactions(10)):
        with pytest.raises(KafkaException) as again:
            retry()
        assert again.value.args[0].fatal(), "a fatal error is final for this producer object"
    b.begin_transaction()
    b.produce(topic, value=b"B-0")
    b.commit_transaction(30)
    reader, uncommitted = _readers()
    views = tx.read_views(run, [reader, uncommitted], topic)
    assert [r.value for r in views["reader"]] == ["A-0", "B-0"]
    assert "A-zombie" not in [r.value for r in views["uncommitted_reader"]]
    data = {r.value: r for r in tx.control_records(topic) if r.kind == "data"}
    assert data["A-0"].producer_id == data["B-0"].producer_id
    assert (data["A-0"].producer_epoch, data["B-0"].producer_epoch) == (0, 1)


@pytest.mark.cluster
def test_an_edited_processor_that_commits_offsets_with_the_consumer_duplicates_a_batch(run) -> None:
    """The notebook's exercise 6: the processor as shown is exactly once under a crash at
    after-offsets; edited to commit the input offsets with the consumer after the transaction,
    the same crash duplicates the batch."""
    processor = _program("processor")
    edited = processor.replace(
        """            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())
            lab.crash_point("after-offsets")
            producer.commit_transaction()""",
        """            producer.commit_transaction()
            lab.crash_point("after-offsets")
            consumer.commit(offsets=offsets, asynchronous=False)""", name="offsets_by_consumer")
    shown, changed = tx.run_eos_concurrently(
        run, *[dict(program=p, readers=_readers(), messages=60, crashes=1, batch=20, partitions=1,
                    points=("after-offsets",), name=p.name) for p in (processor, edited)])
    assert shown.exactly_once and shown.duplicates == 0
    assert changed.lost == 0 and changed.duplicates == changed.batch == 20, changed.to_json()


@pytest.mark.cluster
def test_kafkalab_run_eos_prints_the_promised_json() -> None:
    from kafkalab.cli import main

    r = CliRunner().invoke(main, ["run", "eos", "--mode", "transactional", "--messages", "90", "--crashes", "2",
                                  "--batch", "20", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {"input", "output_read_committed", "output_read_uncommitted", "duplicates", "lost"} <= set(out)
    assert (out["input"], out["output_read_committed"], out["duplicates"], out["lost"]) == (90, 90, 0, 0)
    assert out["output_read_uncommitted"] > 90


def test_kafkalab_run_eos_says_when_the_crash_plan_does_not_fit() -> None:
    from kafkalab.cli import main

    r = CliRunner().invoke(main, ["run", "eos", "--messages", "2", "--crashes", "3", "--point", "after-commit"])
    assert r.exit_code == 2 and "too few" in r.output, r.output
    r = CliRunner().invoke(main, ["run", "eos", "--mode", "at-least-once", "--point", "after-offsets"])
    assert r.exit_code == 2 and "transactional crash point" in r.output, r.output


@pytest.mark.cluster
def test_an_abandoned_transaction_is_aborted_by_its_coordinator_after_its_timeout(run) -> None:
    short = _program("processor").replace('"transaction.timeout.ms": 60000', '"transaction.timeout.ms": 3000')
    ab = tx.abandon_transaction(run, short, records=5)
    reader = run.reader(_program("reader"), ab.output_topic)
    reader.catch_up()
    assert reader.position[0] == 0, "held at the open transaction"
    tx.wait_released(ab, timeout_s=30)
    report = tx.timeout_report(ab)
    assert report.described["TransactionState"] == "CompleteAbort"
    assert int(report.described["CoordinatorId"]) == coordinators.transaction_coordinator(ab.transactional_id)[1] != \
        coordinators.partition_leaders(ab.output_topic)[0]
    key = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    interval = int(describe_config("broker", 1, [key])[key].value)
    assert 3000 <= report.held_ms < 2 * (3000 + interval), \
        "at least the timeout, and at one of the coordinator's next checks, long before a second timeout"
    assert reader.catch_up() == [] and reader.position[0] == 6, "past 5 aborted records and the ABORT marker"


@pytest.mark.cluster
def test_a_processor_whose_transactional_id_a_second_instance_took_over_is_fenced_and_stops(run) -> None:
    """The zombie as the notebook's processor meets it: instance A is frozen (SIGSTOP) after its
    first commit; instance B starts with the same transactional.id and processes the input to the
    end; A, resumed, fails its next transactional call with the fatal _FENCED and stops (its
    ``raise``). The output is still exactly once. One record per transaction: A is far from the
    end of its 200 records when it is frozen, whatever the machine's speed."""
    from kafkalab.ledger import read_events
    from kafkalab.waiting import wait_until

    processor, (reader, _) = _program("processor"), _readers()
    tin, tout = run.topic("zin"), run.topic("zout")
    admin.create_topics({tin: 1, tout: 1})
    ids = tx.produce_input(tin, 200)
    options = dict(group_id=run.group("z"), transactional_id=run.transactional_id("z"), partitions=(0,), batch=1)
    # each its own sqlite file: A may be frozen inside its sqlite transaction, holding that file's lock
    a, a_ledger = run.start(processor, "transactions", "zombie", [tin, tout],
                            options={**options, "sink": str(run.dir / "zombie-sink.db")})
    def first_commit() -> bool:
        assert a.alive, a.log_tail()
        return os.path.exists(a_ledger) and any(e.kind == "committed" for e in read_events(a_ledger, growing=True))

    wait_until(first_commit, timeout_s=60, what="the first instance's first commit")
    a.pause()
    b, _ = run.start(processor, "transactions", "successor", [tin, tout],
                     options={**options, "sink": str(run.dir / "successor-sink.db")})
    assert b.wait(90) == 0, b.log_tail()
    a.resume()
    assert a.wait(60) == 1, a.log_tail()
    assert "_FENCED" in a.log_tail(40), a.log_tail(40)
    out = [json.loads(r.value)["record_id"] for r in tx.read_all(run, reader, tout)]
    assert sorted(out) == sorted(ids), "the zombie's last transaction was aborted: each input record once"
