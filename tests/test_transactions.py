"""kafkalab.experiments.transactions: the crash plan (pure) and, against the live cluster, what
notebook 05 and its solution do not show: `kafkalab run eos --json`, and a processor fenced by a
second instance while it still runs. Exactly-once under crashes, at-least-once duplicates, the
last stable offset, the coordinator, fencing and the abandoned transaction are asserted by the
notebook and its solution (issue 34)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from kafkalab import admin, programs
from kafkalab.experiments import transactions as tx


def _program(name: str) -> programs.Program:
    return programs.from_notebook(tx.NOTEBOOK, name)


def _readers() -> tuple[programs.Program, programs.Program]:
    reader = _program("reader")
    return reader, tx.uncommitted_reader(reader)


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
