"""Rebalance experiment (notebook 02): pure parts, no cluster needed.

Protocol settings (and that librdkafka accepts them), configuration checks, the CLI's
argument handling. (The ``__consumer_offsets`` decoder and the coordinator partition are
tested in tests/test_coordinators.py.)
"""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from kafkalab import programs
from kafkalab.cli import main
from kafkalab.errors import KafkalabError
from kafkalab.experiments import rebalance
from kafkalab.experiments.rebalance import PROTOCOLS, SCENARIOS, RebalanceConfig, RunRecord, Window
from kafkalab.experiments.rebalance_analysis import EXPECTED
from kafkalab.programs import program_settings


def consumer_conf_error(conf: dict) -> str | None:
    """librdkafka's error text if it refuses to build a ``Consumer`` with ``conf`` (plus a
    bootstrap address and a group id), else None: nothing is sent (no subscribe, no cluster)."""
    from confluent_kafka import Consumer, KafkaException

    try:
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "kafkalab-conf-check", "log_level": 3, **conf}).close()
    except KafkaException as e:
        return e.args[0].str()
    return None


def literal_settings(program) -> dict:
    """A program's settings with the expressions (the static member's group.instance.id) made a literal."""
    return {k: ("c0" if k == "group.instance.id" else v) for k, v in program_settings(program.source).items()}


def test_every_member_program_of_notebook_02_is_accepted_by_librdkafka() -> None:
    for name in [*rebalance.PROGRAMS.values(), *rebalance.SLOW_PROGRAMS.values()]:
        prog = programs.from_notebook(rebalance.NOTEBOOK, name)
        assert consumer_conf_error(literal_settings(prog)) is None, name


def test_each_protocol_is_what_its_notebook_program_asks_for() -> None:
    for name in PROTOCOLS:
        assert rebalance.Protocol.from_program(name, rebalance.member_program(name)) == PROTOCOLS[name], name


def test_program_settings_reads_the_dict_given_to_consumer_and_nothing_else() -> None:
    prog = programs.Program("p", """
from confluent_kafka import Consumer
from kafkalab.instruments import lab
other = {"session.timeout.ms": 1}
consumer = Consumer(lab.conf | {
    "session.timeout.ms": 7000,
    "group.instance.id": lab.name.split(".")[0],
    "enable.auto.commit": False,
})
""")
    assert program_settings(prog.source) == {"session.timeout.ms": 7000, "group.instance.id": "lab.name.split('.')[0]",
                                                "enable.auto.commit": False}
    p = rebalance.Protocol.from_program("x", prog)
    assert (p.group_protocol, p.strategy, p.static, p.session_timeout_ms, p.heartbeat_interval_ms) == \
        ("classic", "range,roundrobin", True, 7000, 3000), "librdkafka's defaults where the program sets nothing"


def test_kip848_program_leaves_liveness_and_assignment_to_the_broker() -> None:
    conf = program_settings(rebalance.member_program("consumer").source)
    assert conf["group.protocol"] == "consumer"
    assert not {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"} & set(conf)
    assert consumer_conf_error({**conf, "session.timeout.ms": 6000}) is not None


def test_static_program_names_its_pod_and_sets_the_session_timeout_a_restart_must_fit_in() -> None:
    static = program_settings(rebalance.member_program("static").source)
    assert static["group.instance.id"] == "lab.name.split('.')[0]", "the pod's name: c0 of the client id c0.1"
    assert "group.instance.id" not in program_settings(rebalance.member_program("eager").source)
    # the broker's group.min.session.timeout.ms (6000 by default, Kafka 4.3 Broker Configs) is the floor
    assert static["session.timeout.ms"] == PROTOCOLS["static"].session_timeout_ms >= 6000
    assert PROTOCOLS["cooperative"].incremental and PROTOCOLS["consumer"].incremental
    assert not PROTOCOLS["eager"].incremental and not PROTOCOLS["static"].incremental


def test_an_edited_program_is_a_new_protocol() -> None:
    edited = rebalance.member_program("static").replace('"session.timeout.ms": 6000', '"session.timeout.ms": 20000')
    cfg = RebalanceConfig("static20", 3, 6, ("crash",), program=edited)
    assert cfg.spec.session_timeout_ms == 20000 and cfg.spec.static and cfg.spec.name == "static20"


def test_the_static_setting_name_in_the_article_does_not_exist() -> None:
    assert consumer_conf_error({"instance.group.id": "c0"}) == 'No such configuration property: "instance.group.id"'


def test_config_rejects_what_cannot_rebalance() -> None:
    with pytest.raises(KafkalabError, match="at least 2 consumers"):
        RebalanceConfig("eager", consumers=1, partitions=4)
    with pytest.raises(KafkalabError, match="more partitions than consumers"):
        RebalanceConfig("eager", consumers=3, partitions=3)
    with pytest.raises(KafkalabError, match="unknown scenario"):
        RebalanceConfig("eager", scenarios=("drain",))
    with pytest.raises(KafkalabError, match="protocol must be one of"):
        RebalanceConfig("sticky")


def test_the_slow_consumer_outlasts_its_max_poll_interval_which_librdkafka_accepts() -> None:
    for name in rebalance.SLOW_PROGRAMS:
        c = RebalanceConfig(name, scenarios=("slow-consumer",))
        assert c.slow_max_poll_ms == program_settings(c.slow_program.source)["max.poll.interval.ms"]
        assert c.slow_process_ms >= c.slow_max_poll_ms  # then held until the group settled without it
        assert consumer_conf_error(program_settings(c.slow_program.source)) is None, name
    with pytest.raises(KafkalabError, match="slow-consumer program for eager, consumer only"):
        RebalanceConfig("cooperative", scenarios=("slow-consumer",))


def test_expected_verdicts_cover_every_protocol_and_scenario() -> None:
    assert {(p, s) for p in PROTOCOLS for s in SCENARIOS} == set(EXPECTED)


def test_run_record_survives_json() -> None:
    rec = RunRecord("r1", PROTOCOLS["static"], 3, 6, "t", "g", "/tmp/x", 1, [Window(0, "crash", 1, 2, 6, ["a"], [], {"k": 1})],
                    [{"run_id": "r1", "ts_ms": 1, "action": "start", "client_id": "c0.0"}],
                    [{"ts_ms": 1, "generation": 1, "kind": "classic", "offset": 3}])
    back = RunRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert back == rec


def test_cli_splits_lists_and_expands_all() -> None:
    assert rebalance._split(("eager,static", "eager"), list(PROTOCOLS), "--protocol") == ["eager", "static"]
    assert rebalance._split(("all",), list(PROTOCOLS), "--protocol") == list(PROTOCOLS)
    with pytest.raises(click.BadParameter, match="'sticky'"):
        rebalance._split(("sticky",), list(PROTOCOLS), "--protocol")


def test_cli_command_is_registered_and_checks_its_arguments_before_running() -> None:
    runner = CliRunner()
    r = runner.invoke(main, ["run", "rebalance", "--help"])
    assert r.exit_code == 0 and "--scenario" in r.output and "rolling-restart" in r.output
    r = runner.invoke(main, ["run", "rebalance", "--consumers", "3", "--partitions", "3"])
    assert r.exit_code == 2 and "more partitions than consumers" in r.output
    r = runner.invoke(main, ["run", "rebalance", "--scenario", "drain"])
    assert r.exit_code == 2 and "'drain'" in r.output


def test_rebalances_are_new_generations_first_written_inside_a_window() -> None:
    from kafkalab.experiments.rebalance_analysis import rebalances_of

    gens = [{"ts_ms": t, "generation": g} for t, g in [(100, 1), (900, 2), (1500, 2), (1600, 3), (2500, 4), (2600, 4)]]
    windows = [Window(0, "rolling-restart", 1000, 2000, 6, [], []), Window(1, "crash", 2000, 3000, 6, [], [])]
    rec = RunRecord("r", PROTOCOLS["eager"], 3, 6, "t", "g", ".", 0, windows, [], gens)
    got = rebalances_of(rec)
    assert [(x["index"], x["generation"], x["ts_ms"], x["since_ms"]) for x in got] == [(0, 3, 1600, 1000), (1, 4, 2500, 2000)], \
        "generation 2 was first written before the window (its rewrite at 1500 is no rebalance); 4 counts once"


def test_combine_keeps_each_analysis_in_order_and_concatenates_its_frames() -> None:
    import pandas as pd

    from kafkalab.experiments.rebalance_analysis import Analysis, combine

    a = Analysis(["a0"], pd.DataFrame({"run_id": ["a"]}), pd.DataFrame(), pd.DataFrame({"x": [1]}), pd.DataFrame())
    b = Analysis(["b0", "b1"], pd.DataFrame({"run_id": ["b"]}), pd.DataFrame(), pd.DataFrame({"x": [2]}), pd.DataFrame())
    both = combine([a, b])
    assert both.results == ["a0", "b0", "b1"]
    assert both.intervals["run_id"].tolist() == ["a", "b"] and both.rebalances["x"].tolist() == [1, 2]
    assert both.gaps.empty and both.windows.empty


def _pod_spec(tmp_path, gate):
    from kafkalab.worker import ProgramSpec

    return ProgramSpec("c0.1", "r", str(tmp_path / "c0.1.jsonl"), "pod", "eager_member", "", conf={"client.id": "c0.1"},
                       topics=["t"], options={"process_ms": 0.0, "work_until": None, "start_gate": str(gate)})


def test_a_pod_started_ahead_runs_its_program_only_once_its_gate_opens(tmp_path) -> None:
    import signal
    import threading

    from kafkalab.instruments.pod import PodLab, ready_path

    gate = tmp_path / "c0.1.go"
    opened: list[bool] = []

    def open_gate() -> None:  # the harness: waits until the pod is ready, then starts it
        from kafkalab.waiting import wait_until

        wait_until(ready_path(gate).exists, timeout_s=10, what="the pod ready")
        opened.append(True)
        gate.touch()

    previous = signal.getsignal(signal.SIGTERM)
    try:
        threading.Thread(target=open_gate, daemon=True).start()
        lab = PodLab(_pod_spec(tmp_path, gate))
        assert opened == [True], "the constructor returned only after the harness opened the gate"
        assert lab.options.process_ms == 0.0 and lab.conf == {"client.id": "c0.1"}, "the consumer role's instruments"
        lab.close()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_pod_stopped_before_its_gate_opened_exits_without_running_its_program(tmp_path) -> None:
    import os
    import signal
    import threading

    from kafkalab.instruments.pod import PodLab, ready_path

    gate = tmp_path / "c0.1.go"

    def stop() -> None:  # the harness's SIGTERM, once the pod waits at its gate
        from kafkalab.waiting import wait_until

        wait_until(ready_path(gate).exists, timeout_s=10, what="the pod ready")
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        threading.Thread(target=stop, daemon=True).start()
        with pytest.raises(SystemExit) as e:
            PodLab(_pod_spec(tmp_path, gate))
        assert e.value.code == 0 and not gate.exists()
    finally:
        signal.signal(signal.SIGTERM, previous)
