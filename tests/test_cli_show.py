"""``kafkalab run NAME --show``: every run prints, before it runs, the source of each client
program it executes, as the notebook saves it (issue 35: the CLI runs the notebooks' programs,
and shows them). The experiments and the cluster precondition are stubbed here, as in
tests/test_cli.py; one test at the end runs a command on the live cluster."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from kafkalab import programs, runscope
from kafkalab.errors import KafkalabError
from kafkalab.cli import main, run


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def no_cluster(monkeypatch):
    """The whole-cluster precondition, stubbed: these tests run no experiment."""
    monkeypatch.setattr(runscope, "require_for_cli", lambda: None)


def result(payload: dict):
    """A stand-in for an experiment's result: what ``--json`` prints."""
    return SimpleNamespace(to_json=lambda: payload)


def shown(program: programs.Program | programs.JavaSource) -> str:
    """The block ``--show`` prints for one program: its heading line, then its text as saved."""
    from kafkalab.clickutil import program_heading

    text = program.text if isinstance(program, programs.JavaSource) else program.source
    return f"# {program_heading(program)}\n{text.rstrip()}\n"


def test_every_run_command_offers_show() -> None:
    assert len(run.commands) >= 17
    for name in run.commands:
        r = invoke("run", name, "--help")
        assert r.exit_code == 0 and "--show" in r.output, f"kafkalab run {name} has no --show"


def test_every_run_command_that_sends_records_takes_messages() -> None:
    """``--messages N`` is the common name of the number of records a run sends. The runs
    without it send none of their own choosing (assignment; failure-budget writes one record
    per step; rebalance's records are per partition; late-txn and segments_demo follow a fixed
    schedule and recipe; share-renew's one record is the point of it; stalled-partition writes its
    traffic in fixed rounds)."""
    without = {"assignment", "failure-budget", "rebalance", "late-txn", "segments_demo", "share-renew",
               "stalled-partition"}
    for name, cmd in run.commands.items():
        opts = {o for p in cmd.params for o in p.opts}
        assert ("--messages" in opts) == (name not in without), name


def test_headings_name_the_notebook_and_the_cell() -> None:
    from kafkalab.clickutil import program_heading
    from kafkalab.experiments.transactions import uncommitted_reader

    reader = programs.from_notebook("05_transactions", "reader")
    assert program_heading(reader).startswith("notebook 05 %%program reader (05_transactions.ipynb, code cell ")
    assert program_heading(uncommitted_reader(reader)).startswith(
        "notebook 05 %%program reader, edited as uncommitted_reader (05_transactions.ipynb, code cell ")
    java = programs.java_source("kafkalab/clients/LateTxnProducer.java", "Properties props", "log.close()")
    assert program_heading(java) == f"Java kafka/src/main/java/kafkalab/clients/LateTxnProducer.java, from line {java.first_line}"


def test_eos_show_prints_the_processor_and_both_readers_as_saved(no_cluster, monkeypatch) -> None:
    from kafkalab.experiments import transactions

    asked = []
    monkeypatch.setattr(transactions, "run_eos", lambda run, program, readers, **kw: asked.append(
        (program, readers, kw)) or result({"exactly_once": True}))
    r = invoke("run", "eos", "--messages", "40", "--show", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"exactly_once": True}, "with --json stdout stays JSON"
    processor = programs.from_notebook("05_transactions", "processor")
    reader = programs.from_notebook("05_transactions", "reader")
    (program, readers, kw), = asked
    assert program == processor and readers[0] == reader and kw["messages"] == 40
    for p in (processor, *readers):
        assert shown(p) in r.stderr, f"{p.name} is shown, on stderr with --json"
    assert "# notebook 05 %%program processor (05_transactions.ipynb, code cell " in r.stderr


def test_show_prints_nothing_unless_asked(no_cluster, monkeypatch) -> None:
    from kafkalab.experiments import transactions

    monkeypatch.setattr(transactions, "run_eos", lambda *a, **kw: result({"exactly_once": True}))
    r = invoke("run", "eos", "--json")
    assert r.exit_code == 0 and r.stderr == "" and "%%program" not in r.output


def test_tour_takes_messages_and_its_old_name_flights(no_cluster, monkeypatch) -> None:
    from kafkalab.experiments import tour

    asked = []

    def stopped(n, producer, reader):
        asked.append((n, producer, reader))
        raise KafkalabError("stub: the run stops here")

    monkeypatch.setattr(tour, "run_tour", stopped)
    r = invoke("run", "tour", "--messages", "30", "--show")
    assert r.exit_code == 1 and "stub: the run stops here" in r.stderr, r.output
    producer = programs.from_notebook("00_cluster_tour", "flight_producer")
    reader = programs.from_notebook("00_cluster_tour", "flight_reader")
    assert asked[0] == (30, producer, reader), "the programs shown are the programs run"
    assert r.stdout == shown(producer) + "\n" + shown(reader) + "\n", "without --json on stdout, before the run"
    assert invoke("run", "tour", "--flights", "7").exit_code == 1 and asked[1][0] == 7, "--flights still works"


def test_lost_ack_show_with_json_keeps_stdout_json(monkeypatch) -> None:
    """lost-ack printed its program to stdout even with --json before the shared --show."""
    from kafkalab.experiments import idempotence

    monkeypatch.setattr(runscope, "require_for_cli", lambda: None)
    monkeypatch.setattr(idempotence, "run_lost_ack", lambda prog, *a, **kw: result({"program": prog.name}))
    r = invoke("run", "lost-ack", "--idempotence", "on", "--show", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"program": "idempotent_producer"}
    assert shown(programs.from_notebook("04_idempotent_producer", "idempotent_producer")) in r.stderr


def test_late_txn_java_show_prints_the_java_source_the_notebook_shows(no_cluster, monkeypatch) -> None:
    from kafkalab.experiments import late_txn

    monkeypatch.setattr(late_txn, "run_java", lambda: SimpleNamespace(to_json=lambda: {"client": "java"}))
    r = invoke("run", "late-txn", "--client", "java", "--show", "--json")
    assert r.exit_code == 0, r.output
    java = programs.java_source("kafkalab/clients/LateTxnProducer.java", start="Properties props", end="log.close()")
    assert shown(java) in r.stderr and "%%program" not in r.stderr
    assert json.loads(r.stdout) == [{"client": "java"}]


def test_replication_show_prints_the_producer_edited_for_the_scenario(no_cluster, monkeypatch) -> None:
    from kafkalab.experiments import replication

    monkeypatch.setattr(replication, "run_replication", lambda *a, **kw: {"round": {}, "setting": "acks=1"})
    r = invoke("run", "replication", "--scenario", "isr-shrink", "--acks", "1", "--min-insync-replicas", "1",
               "--show", "--json")
    assert r.exit_code == 0, r.output
    program = replication.notebook_producer("isr-shrink", "1")
    assert '"retries": 0' in program.source and shown(program) in r.stderr
    assert "# notebook 08 %%program producer, edited as " in r.stderr


@pytest.mark.cluster
def test_show_on_the_live_cluster_prints_the_programs_then_runs_them() -> None:
    """``kafkalab run tour --messages 20 --show --json`` on the cluster: the notebook's two
    programs on stderr, the result of running them on stdout."""
    r = invoke("run", "tour", "--messages", "20", "--show", "--json")
    assert r.exit_code == 0, r.output
    for name in ("flight_producer", "flight_reader"):
        assert shown(programs.from_notebook("00_cluster_tour", name)) in r.stderr, name
    d = json.loads(r.stdout)
    assert d["produced"] == d["consumed"] > 0 and d["each_record_once"], d
