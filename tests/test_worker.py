"""Worker processes: real producers and consumers that are killed like pods."""

from __future__ import annotations

import signal

import pytest

from kafkalab import admin, config, runscope, worker, workloads
from kafkalab.ledger import read_events
from kafkalab.waiting import wait_until
from kafkalab.worker import ExecSpec, ProgramSpec, spec_from_json, spec_json


#: A consumer program as a notebook would show it: a synchronous commit per record, batches of 5.
COMMIT_EACH = """
from confluent_kafka import Consumer
from kafkalab.instruments import lab

consumer = Consumer(lab.conf | {"auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.subscribe([lab.topic], on_assign=lab.on_assign, on_revoke=lab.on_revoke)
try:
    while lab.running():
        batch = consumer.consume(num_messages=5, timeout=0.5)
        lab.consumed(batch)
        for msg in batch:
            if msg.error():
                continue
            lab.processed(msg)
            lab.crash_point("after-process", msg)
            lab.commit_returned(consumer.commit(message=msg, asynchronous=False))
            lab.crash_point("after-commit", msg)
finally:
    consumer.close()
"""


def program_spec(name: str, run: str, ledger: str, source: str, **options) -> ProgramSpec:
    return ProgramSpec(name, run, ledger, "consumer", name.replace("-", "_"), source, topics=["t"], options=options)


def test_a_consumer_programs_crash_point_must_be_known() -> None:
    from kafkalab.instruments.consumer import ConsumerOptions

    with pytest.raises(ValueError, match="crash_point"):
        ConsumerOptions(crash_point="before-lunch")


@pytest.mark.subprocess
def test_a_program_that_raises_exits_1_with_its_own_lines_in_the_traceback(tmp_path) -> None:
    w = workloads.spawn(program_spec("broken", "r", str(tmp_path / "broken.jsonl"),
                                     "x = 1\nraise RuntimeError('the program failed')\n"))
    assert w.wait(30) == 1
    log = w.log_tail(20)
    assert 'File "<program broken>", line 2' in log and "RuntimeError: the program failed" in log, log


def test_an_unknown_role_is_refused() -> None:
    from kafkalab import instruments

    with pytest.raises(ValueError, match="unknown program role"):
        instruments.install(ProgramSpec("p", "r", "/tmp/p.jsonl", "poet", "p", "pass\n"))


def test_sink_modes_keep_drop_or_overwrite_a_replayed_record(tmp_path) -> None:
    from kafkalab.sink import Sink, sink_rows

    rows = [("a", "t", 0, 0, "p-0", '{"route":"JFK-LAX"}'), ("b", "t", 0, 1, "p-0", None)]
    expected = {"insert": [("a", 1), ("a", 1), ("b", 1), ("b", 1)], "ignore": [("a", 1), ("b", 1)],
                "upsert": [("a", 2), ("b", 2)]}
    for mode, rows_after in expected.items():
        sink = Sink(str(tmp_path / f"{mode}.db"), mode)
        sink.write_batch(rows)
        assert sink.write("a", "t", 0, 0, "p-1") is (mode != "ignore")  # the replay after a crash
        sink.write("b", "t", 0, 1, "p-1")
        sink.close()
        assert sorted(sink_rows(tmp_path / f"{mode}.db")) == rows_after, mode
    with pytest.raises(ValueError, match="sink mode"):
        Sink(str(tmp_path / "x.db"), "merge")


def test_every_spec_round_trips_through_the_one_entry_points_json() -> None:
    specs = [program_spec("c", "r", "/tmp/c.jsonl", COMMIT_EACH, process_ms=3, work_until="/tmp/w"),
             program_spec("p", "r", "/tmp/p.jsonl", COMMIT_EACH, crash_after=3, crash_point="after-process"),
             ExecSpec("x", "r", "/tmp/x.jsonl", ["/bin/true"], stdout="/tmp/x.out")]
    for spec in specs:
        assert spec_from_json(spec_json(spec)) == spec
    with pytest.raises(ValueError, match="unknown worker kind"):
        spec_from_json('{"kind": "poet"}')


@pytest.mark.subprocess
def test_an_exec_worker_becomes_the_program_and_dies_with_its_parent(tmp_path) -> None:
    """The child of a worker's parent is SIGKILLed when that parent dies: here the parent is a
    Python process that spawns an ``exec`` worker (``sleep``) and is then killed."""
    import subprocess
    import sys

    import psutil

    out = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import time
from kafkalab import workloads
from kafkalab.worker import ExecSpec
w = workloads.spawn(ExecSpec("sleeper", "r", {str(tmp_path / 'sleeper.jsonl')!r}, ["/bin/sleep", "600"]))
open({str(out)!r}, "w").write(str(w.pid))
time.sleep(600)
"""])
    try:
        wait_until(lambda: out.exists() and out.read_text(), timeout_s=30, what="the exec worker's pid")
        child = psutil.Process(int(out.read_text()))
        wait_until(lambda: child.cmdline()[:1] == ["/bin/sleep"], timeout_s=30, what="the worker to become /bin/sleep")
        parent.kill()
        parent.wait(10)
        wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, timeout_s=10,
                   what="the exec'd worker to die with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


@pytest.mark.cluster
def test_a_crashing_consumer_program_stops_exactly_at_k() -> None:
    run = runscope.run_id()
    topic = f"worker-{run}"
    admin.create_topics({topic: 3})
    d = workloads.run_dir(run)
    try:
        placed = workloads.produce(topic, [(f"k{i}".encode(), f"v{i}".encode(), i % 3, None) for i in range(60)])
        assert len(placed) == 60 and {p for p, _ in placed} == {0, 1, 2}

        # a program that commits each record synchronously dies after its 7th processed record, before its
        # commit (after-process): 6 commits, each its record's offset + 1
        c = workloads.spawn(ProgramSpec("consumer-1", run, str(d / "consumer-1.jsonl"), "consumer", "commit_each",
                                        COMMIT_EACH, conf={"bootstrap.servers": config.bootstrap_servers(),
                                                           "group.id": f"{run}-g", "client.id": "consumer-1"},
                                        topics=[topic], options={"crash_after": 7, "crash_point": "after-process"}))
        assert c.wait(60) == -signal.SIGKILL, c.log_tail()
        events = read_events(c.ledger)
        done = [e for e in events if e.kind == "processed"]
        commits = [e for e in events if e.kind == "committed" and e.error is None]
        assert len(done) == 7 and len(commits) == 6, "6 records committed, the 7th processed only: the crash point is exact"
        assert all(c.offset == p.offset + 1 for c, p in zip(commits, done)), "each commit is its record's offset + 1"
        assert {e.partition for e in events if e.kind == "assigned"} == {0, 1, 2}
    finally:
        admin.delete_topics([topic])


@pytest.mark.cluster
def test_terminated_worker_exits_cleanly_and_none_is_left() -> None:
    run = runscope.run_id()
    topic = f"worker-{run}"
    admin.create_topics({topic: 1})
    try:
        c = workloads.spawn(ProgramSpec("consumer-0", run, str(workloads.run_dir(run) / "c.jsonl"), "consumer", "commit_each",
                                        COMMIT_EACH, conf={"bootstrap.servers": config.bootstrap_servers(),
                                                           "group.id": f"{run}-g", "client.id": "consumer-0"},
                                        topics=[topic]))
        wait_until(lambda: c.ledger.exists() and any(e.kind == "assigned" for e in read_events(c.ledger)), timeout_s=30,
                   what="consumer-0 to be assigned its partition")
        assert c.terminate(30) == 0
        assert not c.alive
        assert c not in workloads.live_workers() and c.pid not in workloads.worker_processes()
    finally:
        admin.delete_topics([topic])


def test_lab_conf_is_one_builder_of_addresses_and_names() -> None:
    assert worker.lab_conf("c", bootstrap_servers="h:1") == {"bootstrap.servers": "h:1", "client.id": "c"}
    assert worker.lab_conf("c", "g", "h:1", tls_ca="/ca.pem") == {
        "bootstrap.servers": "h:1", "client.id": "c", "group.id": "g", "ssl.ca.location": "/ca.pem"}
    assert set(worker.lab_conf("c", "g")) <= set(worker.LAB_CONF_KEYS)


@pytest.mark.parametrize("hidden", [{"session.timeout.ms": 6000}, {"group.instance.id": "i"}, {"log_level": 3},
                                    {"linger.ms": 0}, {"enable.idempotence": True}])
def test_a_program_spec_refuses_a_setting_the_program_would_not_show(hidden: dict) -> None:
    conf = worker.lab_conf("c", "g", "h:1") | hidden
    with pytest.raises(ValueError, match="write such settings in the program"):
        worker.ProgramSpec("c", "r", "/tmp/l.jsonl", "consumer", "p", "pass\n", conf=conf)
    spec = worker.ProgramSpec("c", "r", "/tmp/l.jsonl", "consumer", "p", "pass\n", conf=worker.lab_conf("c", "g", "h:1"),
                              instance_id="g-instance-0")
    assert worker.spec_from_json(worker.spec_json(spec)).instance_id == "g-instance-0"


def test_no_experiment_writes_a_lab_conf_by_hand() -> None:
    """Every ProgramSpec's conf comes from a builder (worker.lab_conf and the helpers that call it),
    never from a dict literal, so the allow-list has one home."""
    import ast
    from pathlib import Path

    root = Path(worker.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "ProgramSpec":
                found += [f"{path.name}:{node.lineno}" for k in node.keywords if k.arg == "conf" and isinstance(k.value, ast.Dict)]
    assert not found, f"lab.conf written by hand (use worker.lab_conf): {found}"


def test_no_module_wraps_lab_conf_in_a_function_of_its_own() -> None:
    """A function whose whole body is ``return lab_conf(...)`` of its own parameters is a second
    name for the one builder: call ``worker.lab_conf`` where the conf is needed instead."""
    import ast
    from pathlib import Path

    root = Path(worker.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
            if not (isinstance(call, ast.Call)
                    and getattr(call.func, "id", getattr(call.func, "attr", None)) == "lab_conf"):
                continue
            params = {a.arg for a in node.args.args + node.args.kwonlyargs}
            passed = [*call.args, *(k.value for k in call.keywords)]
            if all(isinstance(a, ast.Name) and a.id in params for a in passed):
                found.append(f"{path.name}:{node.lineno} {node.name}")
    assert not found, f"thin wrappers around worker.lab_conf: {found}"
