"""Notebook 08's pure code: settings, the classification of writes, availability from metadata
samples, ``kafka-topics --describe`` parsing, the verdict table and chart, the CLI's options.
No cluster needed."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest
from click.testing import CliRunner

from kafkalab.cli import main
from kafkalab.experiments import replication as repl
from kafkalab.experiments import replication_analysis as ra
from kafkalab.experiments import replication_plots as rp
from kafkalab.experiments import replication_scenarios as scenarios
from kafkalab.experiments.replication_scenarios import NOTEBOOK
from kafkalab.ledger import Event


def ev(kind: str, value: str, phase: str = "during", error: str | None = None, offset: int | None = None) -> Event:
    return Event(run_id="r1", kind=kind, ts_ms=0, seq=0, topic="t", partition=0, key=phase, value=value,
                 offset=offset, error=error)


def test_setting_label_round_trips_and_renders_topic_configs() -> None:
    s = repl.Setting("all", 2, False)
    assert s.label == "acks=all minISR=2 unclean=false"
    assert repl.Setting.parse(s.label) == s
    assert s.creation_configs() == {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert repl.Setting(1, 1, True).acks == "1"


@pytest.mark.parametrize("acks, min_isr", [("2", 1), ("all", 0), ("all", 4)])
def test_setting_rejects_what_kafka_would_not_take(acks: str, min_isr: int) -> None:
    with pytest.raises(ValueError):
        repl.Setting(acks, min_isr)


def test_the_cli_runs_the_notebooks_producer_edited_as_the_notebook_edits_it() -> None:
    shown = repl.programs.from_notebook(repl.NOTEBOOK, "producer")
    assert repl.program_acks(shown) == "1" and '"retries": 2147483647' in shown.source
    assert "lab.wait_for_fault()" in shown.source, "the gate is on screen, in the program"
    crash = repl.notebook_producer("leader-crash", "all")
    assert repl.program_acks(crash) == "all" and '"retries": 2147483647' in crash.source
    shrink = repl.notebook_producer("isr-shrink", "0")
    assert repl.program_acks(shrink) == "0" and '"retries": 0' in shrink.source
    assert repl.with_acks(shown, "1") is shown


def test_program_acks_reads_the_one_acks_setting() -> None:
    from kafkalab.programs import Program

    assert repl.program_acks(Program("p", 'p = Producer(lab.conf | {"acks": "-1"})')) == "all"
    assert repl.program_acks(Program("p", "conf = {'acks': 0}\np = Producer(conf)")) == "0", "single quotes, an int"
    for src in ("p = Producer({})", 'conf = {"acks": "1"}'):   # no acks; a dict no Producer gets
        with pytest.raises(ValueError):
            repl.program_acks(Program("p", src))


def test_scenarios_are_checked() -> None:
    with pytest.raises(ValueError):
        repl.check_scenario("split-brain")
    with pytest.raises(ValueError):
        repl.run_round("leader-crash", {})
    from kafkalab.programs import Program

    with pytest.raises(ValueError, match="acks"):  # the program must send its setting's acks
        repl.run_round("leader-crash", {repl.Setting("all", 2): Program("p", 'c = {"acks": "1"}')})


def test_classification_of_every_write() -> None:
    events = [
        ev("produced", "a"), ev("acked", "a", offset=3), ev("consumed", "a", offset=3),   # acked, present
        ev("produced", "b"), ev("acked", "b", offset=4),                                  # acked, lost
        ev("produced", "c"), ev("acked", "c", error="_MSG_TIMED_OUT"), ev("consumed", "c"),  # not acked, present
        ev("produced", "d"), ev("acked", "d", error="NOT_ENOUGH_REPLICAS"),               # not acked, absent
        ev("produced", "e"), ev("acked", "e"),                                            # acks=0: no offset, lost
        ev("produced", "w", "before"), ev("acked", "w", "before", offset=0), ev("consumed", "w", "before"),
        ev("produced", "x", "before"), ev("acked", "x", "before", offset=1),
    ]
    c = ra.classify_records(events)
    assert c == ra.Classification(produced=5, acked=3, acked_present=1, acked_lost=2, not_acked_present=1,
                                  not_acked_absent=1, before_produced=2, before_lost=1)
    assert c.not_acked == 2
    assert ra.record_classes(events)["e"] == ("during", "acked_lost")


def test_a_retry_that_succeeds_counts_as_acknowledged() -> None:
    events = [ev("produced", "a"), ev("acked", "a", error="REQUEST_TIMED_OUT"), ev("acked", "a", offset=0),
              ev("consumed", "a")]
    assert ra.classify_records(events).acked_present == 1


def test_unavailable_seconds_count_until_a_live_leader() -> None:
    tp, tq = ("t", 0), ("t", 1)
    samples = [
        (0.5, {tp: (1, [1, 2, 3]), tq: (1, [1])}),   # the dead broker is still named leader
        (6.0, {tp: (2, [2, 3]), tq: (-1, [])}),      # fenced: tp elected, tq offline
        (20.0, {tp: (2, [2, 3]), tq: (1, [1])}),     # broker 1 back at 19.5 s
    ]
    seconds, who = ra.unavailable_seconds(samples, killed=1, back_after_s=19.5)
    assert seconds == {tp: 6.0, tq: 20.0} and who == {tp: 2, tq: 1}
    seconds, who = ra.unavailable_seconds(samples[:2], killed=1, back_after_s=None)
    assert who[tq] == -1 and seconds[tq] == 6.0


DESCRIBE = """Topic: repl-r1-is-0\tTopicId: abc\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: min.insync.replicas=2
\tTopic: repl-r1-is-0\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1\tElr: 3\tLastKnownElr: 
\tTopic: repl-r1-is-0\tPartition: 1\tLeader: none\tReplicas: 1,2,3\tIsr: \tElr: \tLastKnownElr: 1
"""


def test_parse_describe_reads_leader_isr_and_elr() -> None:
    d = repl.parse_describe(DESCRIBE)
    assert d[("repl-r1-is-0", 0)] == {"leader": "1", "replicas": "1,2,3", "isr": "1", "elr": "3", "last_known_elr": ""}
    assert d[("repl-r1-is-0", 1)]["leader"] == "none" and d[("repl-r1-is-0", 1)]["isr"] == ""
    assert d[("repl-r1-is-0", 1)]["last_known_elr"] == "1"
    assert len(d) == 2


def fake_round() -> repl.RoundResult:
    def outcome(setting: str, p: int, c: ra.Classification, errors: dict, elected: int, down: float):
        return repl.PartitionOutcome("t", p, setting, c, errors, 3, 13, [1], elected, down, 13, 3, 3)

    lost = ra.Classification(produced=10, acked=10, acked_lost=10, before_produced=3)
    refused = ra.Classification(produced=10, not_acked_absent=10, before_produced=3)
    parts = [outcome("acks=1 minISR=1 unclean=true", 0, lost, {}, 2, 5.0),
             outcome("acks=1 minISR=1 unclean=true", 1, lost, {}, 2, 5.5),
             outcome("acks=all minISR=2 unclean=false", 0, refused, {"NOT_ENOUGH_REPLICAS": 10}, 3, 5.0)]
    return repl.RoundResult("r1", "isr-shrink", 10, 2, 3, 1, [2, 3],
                            {"acks=1 minISR=1 unclean=true": "t0", "acks=all minISR=2 unclean=false": "t1"},
                            parts, [(0.0, "start")], "/dev/null", "", 30.0)


def test_round_totals_per_setting_and_json() -> None:
    r = fake_round()
    by = r.by_setting()
    assert by["acks=1 minISR=1 unclean=true"].lost_acked == 20
    assert by["acks=1 minISR=1 unclean=true"].unavailable_s == 5.5
    assert by["acks=all minISR=2 unclean=false"].produce_errors == 10
    assert by["acks=all minISR=2 unclean=false"].error_codes == {"NOT_ENOUGH_REPLICAS": 10}
    j = json.loads(json.dumps(r.to_json()))
    assert j["settings"]["acks=1 minISR=1 unclean=true"]["acked"] == 20


def test_verdict_table_and_chart() -> None:
    table = ra.verdict_table([fake_round()])
    assert list(table.index) == [("isr-shrink", "acks=1 minISR=1 unclean=true"),
                                 ("isr-shrink", "acks=all minISR=2 unclean=false")]
    fig = rp.verdict_chart(table)
    assert len(fig.axes) == 2
    widths = [p.get_width() for p in fig.axes[0].patches]
    assert 20 in widths  # the lost bar of the first row
    with pytest.raises(ValueError):
        rp.verdict_chart(table.iloc[0:0])


def test_a_row_with_no_acknowledged_write_says_why_on_the_chart() -> None:
    table = ra.verdict_table([fake_round()])
    refused = table.loc[("isr-shrink", "acks=all minISR=2 unclean=false")]
    assert refused["acked"] == 0
    assert rp.empty_row_note(refused) == "no write acknowledged: all 10 refused (NOT_ENOUGH_REPLICAS)"
    texts = [t.get_text().strip() for t in rp.verdict_chart(table).axes[0].texts]
    assert texts == ["no write acknowledged: all 10 refused (NOT_ENOUGH_REPLICAS)"], "only the empty row is annotated"
    assert rp.empty_row_note({"produce_errors": 0, "error_codes": {}}) == "no write acknowledged"


def test_cli_lists_the_issues_options() -> None:
    out = CliRunner().invoke(main, ["run", "replication", "--help"]).output
    for opt in ("--scenario", "--acks", "--min-insync-replicas", "--unclean-leader-election", "--messages", "--json"):
        assert opt in out


def test_cli_rejects_an_unknown_acks_value() -> None:
    r = CliRunner().invoke(main, ["run", "replication", "--scenario", "leader-crash", "--acks", "2",
                                  "--min-insync-replicas", "2"])
    assert r.exit_code == 2 and "--acks" in r.output


def test_run_failure_budget_refuses_an_impossible_min_insync_replicas() -> None:
    from kafkalab.errors import KafkalabError

    with pytest.raises(KafkalabError, match="min_insync_replicas must be 1, 2 or 3"):
        scenarios.run_failure_budget(scenarios.programs.from_notebook(NOTEBOOK, "budget_writer"), min_insync_replicas=4)


def test_run_planned_shutdown_refuses_no_records_before_touching_the_cluster() -> None:
    from kafkalab.errors import KafkalabError

    with pytest.raises(KafkalabError, match="records must be at least 1"):
        scenarios.run_planned_shutdown({"acks=all": scenarios.programs.from_notebook(NOTEBOOK, "budget_writer")},
                                       records=0)
    with pytest.raises(KafkalabError, match="first_back must be broker 1 or 2"):
        scenarios.run_planned_shutdown({"acks=all": scenarios.programs.from_notebook(NOTEBOOK, "budget_writer")},
                                       first_back=3)


def test_run_throttled_follower_refuses_a_zero_rate_before_touching_the_cluster() -> None:
    from kafkalab.errors import KafkalabError

    with pytest.raises(KafkalabError, match="at least 1"):
        scenarios.run_throttled_follower(rate=0)


def test_the_planned_shutdown_edit_of_the_budget_writer_gives_acks_1() -> None:
    """Notebook 08's KAFKA-20554 section edits budget_writer's one acks line to "1"; the rest of
    its settings (retries=0: a refusal is the answer) stay as the failure budget explains them."""
    program = scenarios.programs.from_notebook(NOTEBOOK, "budget_writer")
    edited = program.replace('"acks": "all"', '"acks": "1"', name="budget_writer_acks_1")
    settings = scenarios.programs.program_settings(edited.source)
    assert settings["acks"] == "1" and settings["retries"] == 0


def test_the_budget_writer_is_on_screen_with_the_settings_the_notebook_explains() -> None:
    """Notebook 08's failure budget runs its budget_writer program; the Explain names its
    acks=all, retries=0 and request.timeout.ms=5000, read from the program's text."""
    program = scenarios.programs.from_notebook(NOTEBOOK, "budget_writer")
    settings = scenarios.programs.program_settings(program.source)
    assert {k: settings[k] for k in ("acks", "retries", "request.timeout.ms")} == {
        "acks": "all", "retries": 0, "request.timeout.ms": 5000}


def test_failure_budget_table_has_one_row_per_step_and_names_the_programs_acks() -> None:
    from kafkalab.experiments.replication_scenarios import FailureBudget, FailureStep

    b = FailureBudget("t", 2, [1, 2, 3], [FailureStep([], [1, 2, 3], None, 1), FailureStep([3], [1, 2], None, 2),
                                          FailureStep([3, 2], [1], "NOT_ENOUGH_REPLICAS", 2)])
    t = b.table()
    assert list(t["acks=all write"]) == ["acknowledged", "acknowledged", "NOT_ENOUGH_REPLICAS"]
    assert list(t.index) == [0, 1, 2] and b.to_json()["steps"][2]["isr"] == [1]
    edited = FailureBudget("t", 2, [1, 2, 3], b.steps, "budget_writer", {"acks": "1"})
    assert "acks=1 write" in edited.table(), "a learner's edit of acks shows in the table"


def test_fetch_brokers_reads_the_programs_statistics_lines() -> None:
    log = ("%7|123|INIT|rdkafka| something\nfetching from broker -1\nfetching from broker 1\n"
           "fetching from broker 3\nnot fetching from broker 2\n")
    assert scenarios.fetch_brokers(log) == [1, 3]


def test_the_rack_reader_is_on_screen_and_its_edit_drops_client_rack() -> None:
    shown = repl.programs.from_notebook(repl.NOTEBOOK, "rack_reader")
    assert '"client.rack": "rack-3"' in shown.source and "print(\"fetching from broker\"" in shown.source
    shown.replace('"client.rack": "rack-3"', '"client.rack": ""')  # the notebook's edit: occurs once


def test_failover_retry_table_has_one_row_per_attempt() -> None:
    r = scenarios.FailoverRetry("t", "p", 1, 2, ["r0"], [[0, "r0"]], 0, [["r0", 0, None]],
                                [scenarios.ProduceAttempt(1, 7, 0, 0, 1, "dropped", "NONE", 0),
                                 scenarios.ProduceAttempt(2, 7, 0, 0, 1, "forwarded", "NONE", 0)], [[0, 7, 0, 0, 1]], {})
    t = r.attempts_table()
    assert list(t["broker"]) == [1, 2] and list(t["answer"]) == ["dropped", "forwarded"]
    assert json.loads(json.dumps(r.to_json()))["attempts"][1]["broker"] == 2


def test_a_gated_program_says_it_is_ready_and_waits_for_the_go_file(tmp_path) -> None:
    import threading
    from types import SimpleNamespace

    from kafkalab.instruments import fault_gate

    spec = SimpleNamespace(name="p", conf={"client.id": "p"}, topics=["t"], ledger=str(tmp_path / "p.jsonl"),
                           run_id="r", options={"records": [["k", "v", 0]]})
    gated = fault_gate.GatedProducerLab(spec)
    assert gated.records() == [("k", "v", 0)]
    ready = fault_gate.ready_path(spec.ledger)
    go = fault_gate.go_path(spec.ledger)
    assert go == tmp_path / "fault.go" and not ready.exists()

    def harness() -> None:
        while not ready.exists():
            threading.Event().wait(0.01)
        go.touch()

    t = threading.Thread(target=harness)
    t.start()
    gated.wait_for_fault()  # returns once the "harness" saw the marker and opened the gate
    t.join(5)
    gated.close()
    assert ready.exists() and go.exists()


def test_cli_has_the_failover_twin() -> None:
    out = CliRunner().invoke(main, ["run", "failover-retry", "--help"]).output
    assert "--without-idempotence" in out and "idempotent_producer" in out
