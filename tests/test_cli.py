"""The ``kafkalab`` command line: the notebooks' twin for instructors at a terminal."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_unknown_experiment_option_is_a_usage_error() -> None:
    r = invoke("run", "assignment", "--consumers", "2", "--topic", "A:2", "--bogus")
    assert r.exit_code == 2 and "No such option: --bogus" in r.output


def test_topic_needs_a_partition_count() -> None:
    r = invoke("run", "assignment", "--consumers", "2", "--topic", "A")
    assert r.exit_code == 2 and "NAME:PARTITIONS" in r.output


def test_strategy_and_remote_assignor_do_not_mix() -> None:
    r = invoke("run", "assignment", "--consumers", "2", "--topic", "A:2", "--strategy", "range",
               "--group-protocol", "consumer")
    assert r.exit_code == 2 and "--remote-assignor" in r.output


def test_unknown_node_is_one_line_and_exit_1() -> None:
    r = invoke("kill", "9")
    assert r.exit_code == 1 and "no node 9" in r.output and "Traceback" not in r.output


def test_tool_list_names_kafkas_scripts() -> None:
    r = invoke("tool", "list")
    assert r.exit_code == 0
    assert "kafka-dump-log" in r.output and "org.apache.kafka.tools.DumpLogSegments" in r.output


def test_failure_budget_needs_a_valid_min_insync_replicas() -> None:
    r = invoke("run", "failure-budget", "--min-insync-replicas", "4")
    assert r.exit_code == 2 and "--min-insync-replicas" in r.output


def test_failure_budget_prints_each_step_and_its_json(monkeypatch) -> None:
    """``kafkalab run failure-budget`` (notebook 08's ``run_failure_budget``) runs notebook 08's
    ``budget_writer`` program as saved, shows it with ``--show``, and prints one line per step,
    or the result's JSON; the experiment and the precondition are stubbed here."""
    from kafkalab import programs, runscope
    from kafkalab.experiments import replication_scenarios as scenarios

    budget = scenarios.FailureBudget("failures-r1-t", 2, [1, 2, 3], [
        scenarios.FailureStep([], [1, 2, 3], None, 1),
        scenarios.FailureStep([3], [1, 2], None, 2),
        scenarios.FailureStep([3, 2], [1], "NOT_ENOUGH_REPLICAS", 2)])
    asked = []
    monkeypatch.setattr(runscope, "require_for_cli", lambda: None)
    monkeypatch.setattr(scenarios, "run_failure_budget",
                        lambda program, min_insync_replicas, timeout_s: asked.append(min_insync_replicas) or budget)
    r = invoke("run", "failure-budget", "--show")
    assert r.exit_code == 0 and asked == [2], "min.insync.replicas defaults to 2, as in notebook 08"
    writer = programs.from_notebook("08_replication", "budget_writer")
    assert writer.source.rstrip() in r.output and "%%program budget_writer (08_replication.ipynb" in r.output
    assert "2 down [3, 2]: ISR [1], acks=all write NOT_ENOUGH_REPLICAS, records read 2" in r.output
    assert "1 down [3]: ISR [1, 2], acks=all write acknowledged" in r.output
    d = json.loads(invoke("run", "failure-budget", "--min-insync-replicas", "1", "--json").output)
    assert asked == [2, 1] and d == budget.to_json()


def test_planned_shutdown_runs_the_budget_writer_with_both_acks_and_prints_each(monkeypatch) -> None:
    """``kafkalab run planned-shutdown`` (notebook 08's ``run_planned_shutdown``, KAFKA-20554)
    runs notebook 08's ``budget_writer`` as saved and edited to acks=1, shows both with
    ``--show``, and prints one line per setting, or the JSON; the experiment is stubbed here."""
    from kafkalab import runscope
    from kafkalab.experiments import replication_scenarios as scenarios

    result = scenarios.PlannedShutdown(20, 2, {
        "acks=1": scenarios.PlannedLoss("acks=1", "planned-r1-s0", 20, {}, 0, 20, 2, 0, 20),
        "acks=all": scenarios.PlannedLoss("acks=all", "planned-r1-s1", 0, {"NOT_ENOUGH_REPLICAS": 20}, 0, 0, 2, 0, 0),
    }, [])
    asked = []

    def fake(runs, records, first_back, timeout_s):
        asked.append((sorted(runs), {k: scenarios.programs.program_settings(p.source)["acks"] for k, p in runs.items()},
                      records, first_back))
        return result

    monkeypatch.setattr(runscope, "require_for_cli", lambda: None)
    monkeypatch.setattr(scenarios, "run_planned_shutdown", fake)
    r = invoke("run", "planned-shutdown", "--show")
    assert r.exit_code == 0, r.output
    assert asked == [(["acks=1", "acks=all"], {"acks=1": "1", "acks=all": "all"}, 20, 2)]
    assert "%%program budget_writer, edited as budget_writer_acks_1" in r.output \
        and "%%program budget_writer (08_replication.ipynb" in r.output
    assert "acks=1: acknowledged 20, refused 0, HW 0 LEO 20 before broker 1 stopped, broker 2 elected, " \
           "0 in the log, 20 lost" in r.output
    d = json.loads(invoke("run", "planned-shutdown", "--first-back", "1", "--json").output)
    assert asked[-1][3] == 1 and d == result.to_json()


def test_share_renew_shows_the_java_source_runs_both_ways_and_refuses_work_inside_the_lock(monkeypatch) -> None:
    """``kafkalab run share-renew`` (notebook 09's ``run_renew``, KIP-1222) shows the part of
    ShareRenewConsumer.java the notebook shows, passes --renew/--no-renew and the times, prints
    each acknowledgement and whether the broker took it, or the JSON; refuses work that does not
    outlast the lock before touching the cluster. The experiment is stubbed here."""
    from kafkalab import runscope
    from kafkalab.experiments import share_groups as sg

    def result(renew):
        acks = ([{"client": "java-0", "ack": "RENEW", "error": None, "ms": 2000},
                 {"client": "java-0", "ack": "ACCEPT", "error": None, "ms": 6000}] if renew else
                [{"client": "java-0", "ack": "ACCEPT", "error": "InvalidRecordStateException", "ms": 6000},
                 {"client": "java-1", "ack": "ACCEPT", "error": None, "ms": 10000}])
        deliveries = [{"client": "java-0", "delivery_count": 1, "ms": 0}] + \
            ([] if renew else [{"client": "java-1", "delivery_count": 2, "ms": 4000}])
        return sg.RenewResult(renew, "t", "g", 4000, 6000, deliveries, acks, len({d["client"] for d in deliveries}),
                              1, 1 if renew else 0)

    asked, checked = [], []
    monkeypatch.setattr(runscope, "require_for_cli", lambda: checked.append(1))
    monkeypatch.setattr(sg, "run_renew", lambda renew, lock_ms, work_ms, timeout_s:
                        asked.append((renew, lock_ms, work_ms)) or result(renew))
    r = invoke("run", "share-renew", "--show")
    assert r.exit_code == 0, r.output
    assert "Java kafka/src/main/java/kafkalab/clients/ShareRenewConsumer.java" in r.output
    assert "RENEW: lock 4000 ms, work 6000 ms; 1 deliveries to 1 member(s), 1 RENEWs taken, 1 ACCEPT taken" in r.output
    r = invoke("run", "share-renew", "--no-renew")
    assert "no RENEW" in r.output and "refused: InvalidRecordStateException" in r.output
    assert asked == [(True, 4000, 6000), (False, 4000, 6000)]
    d = json.loads(invoke("run", "share-renew", "--json").output)
    assert d == result(True).to_json()
    r = invoke("run", "share-renew", "--lock-ms", "5000", "--work-ms", "5000")
    assert r.exit_code == 2 and "must be above --lock-ms" in r.output and len(checked) == 3


def test_kafkalab_run_outbox_runs_the_notebook_programs_and_prints_each_line(monkeypatch) -> None:
    """``kafkalab run outbox`` runs notebook 12's programs as saved (the experiment stubbed here)
    and prints a line per crash, the end to end and the cost, or the JSON."""
    from kafkalab import runscope
    from kafkalab.experiments import outbox as ob

    ran = []
    monkeypatch.setattr(runscope, "require_for_cli", lambda: None)

    def crash(progs, part, name, point, after, requests):
        ran.append((sorted(progs), name, point, requests))
        return ob.Outcome(f"{name} @ {point}", name, point, after, "t", "", "", ["a"], ["a"])

    monkeypatch.setattr(ob, "run_crash", crash)
    monkeypatch.setattr(ob, "run_end_to_end", lambda s, r, c, requests: ob.EndToEnd({}, ["a"], ["a", "a"], ["a"], 2))
    monkeypatch.setattr(ob, "run_cost", lambda d, s, r: ob.Cost(500, 100.0, 300.0, 700.0, 500, 500))
    r = invoke("run", "outbox", "--show")
    assert r.exit_code == 0, r.output
    assert len(ran) == len(ob.CRASH_TABLE) and ran[0][0] == sorted(ob.PROGRAMS) and ran[0][3] == 60
    assert "%%program relay (12_exactly_once_database.ipynb" in r.output
    assert "relay @ after-mark (on passage 2): expected 1, seen 1, lost 0" in r.output
    assert "1 orders, 2 events (1 duplicates, 0 lost), 1 shipments (0 lost, 0 applied twice)" in r.output
    assert "outbox + relay 300 records/s (3.00x)" in r.output
    d = json.loads(invoke("run", "outbox", "--messages", "100", "--no-cost", "--json").output)
    assert d["cost"] is None and d["end_to_end"]["topic_counts"]["duplicates"] == 1 and ran[-1][3] == 100


@pytest.mark.cluster
def test_kafkalab_run_outbox_counts_what_notebook_12_asserts() -> None:
    """``kafkalab run outbox`` on the live cluster, without the cost: the dual write loses one
    event (or publishes one for a rolled-back order), the relay loses none at any crash point,
    the idempotent consumer applies nothing twice, and the pipeline with all three crashed
    neither loses nor applies twice."""
    r = invoke("run", "outbox", "--no-cost", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    counts = {o["label"]: o["counts"] for o in d["crashes"]}
    assert counts["dual_write @ after-db-commit"]["lost"] == 1
    assert counts["produce_then_commit @ after-produce"]["unexpected"] == 1
    assert all(c["lost"] == 0 and c["unexpected"] == 0 for label, c in counts.items() if not label.startswith(
        ("dual_write", "produce_then_commit"))), counts
    assert all(c["duplicates"] == 0 for label, c in counts.items() if label.startswith("idempotent_consumer")), counts
    assert d["end_to_end"]["applied"] == {"expected": 60, "seen": 60, "lost": 0, "unexpected": 0, "duplicates": 0}
    assert d["cost"] is None


def test_stalled_partition_runs_notebook_13s_programs_with_the_fix_and_timeout_asked(monkeypatch) -> None:
    """``kafkalab run stalled-partition`` (notebook 13's ``stalled_partition.run``) runs the
    notebook's ``payments_producer`` and ``orders_consumer`` as saved, or the producer with
    ``--timeout-ms`` as its ``transaction.timeout.ms``; prints the summary, or the JSON. The
    experiment and the precondition are stubbed here."""
    from types import SimpleNamespace

    from kafkalab import programs, runscope
    from kafkalab.experiments import stalled_partition as sp

    asked = []
    summary = {"fix": "abort", "read_committed lag while stalled": [55, 0, 0]}
    monkeypatch.setattr(runscope, "require_for_cli", lambda: None)
    monkeypatch.setattr(sp, "run", lambda producer, consumer, fix: asked.append((producer, consumer, fix)) or SimpleNamespace(
        summary=lambda: summary, to_json=lambda: {"fix": fix}))
    r = invoke("run", "stalled-partition", "--show")
    assert r.exit_code == 0, r.output
    producer = programs.from_notebook("13_stalled_partition", "payments_producer")
    consumer = programs.from_notebook("13_stalled_partition", "orders_consumer")
    assert asked[0] == (producer, consumer, "abort"), "the programs as saved, fixed with abort by default"
    assert producer.source.rstrip() in r.output and "read_committed lag while stalled: [55, 0, 0]" in r.output
    r = invoke("run", "stalled-partition", "--fix", "timeout", "--timeout-ms", "5000", "--json")
    assert r.exit_code == 0 and json.loads(r.output) == {"fix": "timeout"}, r.output
    edited, _, fix = asked[1]
    assert fix == "timeout" and programs.program_settings(edited.source)["transaction.timeout.ms"] == 5000


@pytest.mark.cluster
def test_failure_budget_with_min_insync_replicas_1_acknowledges_down_to_one_broker() -> None:
    """Notebook 08 asserts the budget at min.insync.replicas=2 (one failure); its Explain says
    that with 1 the write after the second failure is acknowledged too: checked here, through
    the command the notebook names."""
    r = invoke("run", "failure-budget", "--min-insync-replicas", "1", "--json")
    assert r.exit_code == 0, r.output
    steps = json.loads(r.output)["steps"]
    assert [s["isr"] for s in steps] == [[1, 2, 3], [1, 2], [1]], steps
    assert [s["write_error"] for s in steps] == [None, None, None], "every acks=all write acknowledged"
    assert [s["readable"] for s in steps] == [1, 2, 3], "and every acknowledged record read"


@pytest.mark.cluster
def test_status_json_has_brokers_controllers_and_bootstrap() -> None:
    d = json.loads(invoke("status", "--json").output)
    assert set(d) >= {"brokers", "controllers", "bootstrap_servers", "kafka_version"}
    assert all(b["alive"] for b in d["brokers"].values())


@pytest.mark.cluster
def test_run_assignment_json_reproduces_the_articles_range_example() -> None:
    r = invoke("run", "assignment", "--consumers", "3", "--topic", "A:2", "--topic", "B:2",
               "--strategy", "range", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    members = d["members"]
    assert len(members) == 3
    assert all(set(m) >= {"member_id", "group_instance_id", "partitions"} for m in members)
    assert all(t.endswith(("-A", "-B")) for m in members for t, _ in m["partitions"])
    assert sorted(len(m["partitions"]) for m in members) == [0, 2, 2], "range leaves one of 3 consumers idle"


@pytest.mark.cluster
def test_run_assignment_with_kip848_uniform_assignor_balances() -> None:
    r = invoke("run", "assignment", "--consumers", "3", "--topic", "A:2", "--topic", "B:2",
               "--group-protocol", "consumer", "--remote-assignor", "uniform", "--json")
    assert r.exit_code == 0, r.output
    counts = sorted(len(m["partitions"]) for m in json.loads(r.output)["members"])
    assert counts == [1, 1, 2]


# ----------------------------------------------------------------------------- the run precondition

#: Valid options for run subcommands with required options of a type that has no obvious
#: valid value; other required options get the first choice or the range minimum. A new
#: subcommand with such an option must be added here (the test says so), so every
#: ``kafkalab run NAME`` is covered.
REQUIRED_OPTIONS = {"assignment": ["--consumers", "2", "--topic", "A:2"]}


def _valid_value(param) -> str | None:
    import click

    if isinstance(param.type, click.Choice):
        return str(param.type.choices[0])
    if isinstance(param.type, (click.IntRange, click.FloatRange)) and param.type.min is not None:
        return str(max(param.type.min, 1))
    return None


def run_commands() -> dict[str, list[str]]:
    """Every ``kafkalab run`` subcommand -> valid arguments."""
    from kafkalab.cli import run

    out = {}
    for name, cmd in sorted(run.commands.items()):
        if name in REQUIRED_OPTIONS:
            out[name] = REQUIRED_OPTIONS[name]
            continue
        args: list[str] = []
        for p in cmd.params:
            if p.required:
                value = _valid_value(p)
                assert value is not None, f"kafkalab run {name} needs {p.opts}: add valid options to REQUIRED_OPTIONS"
                args += [p.opts[0], value]
        out[name] = args
    return out


def test_every_run_command_is_behind_the_whole_cluster_precondition() -> None:
    from kafkalab.cli import run

    assert len(run.commands) >= 9
    for name, cmd in run.commands.items():
        assert getattr(cmd.callback, "requires_whole_cluster", False), f"kafkalab run {name} skips the precondition"


def test_run_help_needs_no_cluster() -> None:
    for name in run_commands():
        r = invoke("run", name, "--help")
        assert r.exit_code == 0 and "Usage:" in r.output, (name, r.output)


@pytest.mark.subprocess
@pytest.mark.socket
def test_every_run_command_fails_fast_naming_kafkalab_up_when_the_cluster_is_down(tmp_path) -> None:
    """Issue 12: with the cluster down, every ``kafkalab run NAME`` (valid options) exits
    non-zero within the precondition's budget, with a message naming ``kafkalab up``. The
    budget is the check's: the command's Python start and imports, measured just before by
    ``kafkalab run NAME --help`` (the same imports, no check), come on top, so that a loaded
    machine's slow start is not counted against the check."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from kafkalab import cluster
    from kafkalab.runscope import PRECONDITION_BUDGET_S

    base = 31092  # a port plan where no cluster runs
    if not all(cluster.port_is_free(base + 100 * i) for i in range(3)):
        pytest.skip(f"something listens on the ports of KAFKALAB_PORT_BASE={base}")
    env = {k: v for k, v in os.environ.items() if k != "KAFKALAB_BOOTSTRAP"}
    env.update(KAFKALAB_PORT_BASE=str(base), KAFKALAB_STATE=str(tmp_path))
    exe = str(Path(sys.executable).with_name("kafkalab"))
    took = {}
    for name, args in run_commands().items():
        t0 = time.monotonic()
        subprocess.run([exe, "run", name, "--help"], env=env, capture_output=True, check=True, stdin=subprocess.DEVNULL)
        start = time.monotonic() - t0
        t0 = time.monotonic()
        try:
            cp = subprocess.run([exe, "run", name, *args], env=env, capture_output=True, text=True,
                                timeout=PRECONDITION_BUDGET_S + start, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kafkalab run {name} still ran {PRECONDITION_BUDGET_S} s after its start "
                        f"({start:.1f} s, measured by --help) with the cluster down")
        took[name] = round(max(0.0, time.monotonic() - t0 - start), 1)
        assert cp.returncode != 0, f"kafkalab run {name} exited 0 with the cluster down"
        assert "kafkalab up" in cp.stderr and "Traceback" not in cp.stderr, (name, cp.stderr)
    print(f"seconds to fail, cluster down: {took}")


@pytest.mark.cluster
def test_a_run_after_a_broker_was_killed_restores_it_and_passes() -> None:
    """Issue 12: a learner killed broker 2 in an exercise and forgot it; the next
    ``kafkalab run`` starts it again (saying so on stderr, so --json stays clean) and runs."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from kafkalab import cluster

    if cluster.cluster().backend != "local":
        pytest.skip("kills a node of the local backend")
    cluster.restore()
    cluster.kill(2)
    try:
        exe = str(Path(sys.executable).with_name("kafkalab"))
        t0 = time.monotonic()
        cp = subprocess.run([exe, "run", "assignment", "--consumers", "2", "--topic", "A:2", "--json"],
                            env=dict(os.environ), capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
        print(f"kafkalab run assignment with broker 2 killed: restored and passed in {time.monotonic() - t0:.1f} s")
        assert cp.returncode == 0, cp.stderr
        assert "broker 2 was down" in cp.stderr and "kafkalab start 2" in cp.stderr, cp.stderr
        assert len(json.loads(cp.stdout)["members"]) == 2, "stdout is the result, as JSON"
        st = cluster.status()
        assert st.all_alive and not cluster.under_replicated(), "the cluster is whole again"
    finally:
        cluster.restore()


@pytest.mark.cluster
def test_restore_resumes_a_paused_broker_and_starts_a_killed_one() -> None:
    from kafkalab import cluster

    if cluster.cluster().backend != "local":
        pytest.skip("kill and pause drive the local backend")
    cluster.kill(2)
    cluster.pause(3)
    try:
        r = invoke("restore")
    finally:
        cluster.restore()  # whatever the command did, the next test gets a whole cluster
    assert r.exit_code == 0, r.output
    assert "resumed [3], started [2]; whole in" in r.output
    st = cluster.status()
    assert st.all_alive and not any(b.paused for b in st.brokers.values())
    again = invoke("restore")
    assert "resumed none, started none" in again.output
