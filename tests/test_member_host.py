"""The host worker (``worker.HostSpec``): many client programs in one process, each in its own
thread with its own ``lab`` (``instruments.ThreadLabs``), started and stopped through files.
No cluster: the programs here only write their ledgers."""

from __future__ import annotations

import threading

import pytest

from kafkalab import instruments, workloads
from kafkalab.ledger import read_events
from kafkalab.waiting import wait_until
from kafkalab.worker import HostSpec, ProgramSpec, spec_from_json, spec_json

#: A program that writes its own name to its ledger, then waits until asked to stop.
NAMED = """
import threading
from kafkalab.instruments import lab
lab.produced("k", lab.name + ":" + lab.topic, 0)   # the lab of this thread: its own name and topic
pause = threading.Event()
while lab.running():
    pause.wait(0.01)
lab.produced("k", "stopped", 0)
"""


def _spec(tmp_path, name: str, source: str = NAMED, role: str = "producer") -> ProgramSpec:
    return ProgramSpec(name, "r", str(tmp_path / f"{name}.jsonl"), role, "named", source,
                       conf={"client.id": name}, topics=[f"topic-of-{name}"])


def _start(inbox, key: str, spec: ProgramSpec) -> None:
    (inbox / f"{key}.json.part").write_text(spec_json(spec))
    (inbox / f"{key}.json.part").rename(inbox / f"{key}.json")


def test_a_host_spec_round_trips_through_the_entry_points_json(tmp_path) -> None:
    spec = HostSpec("members", "r", str(tmp_path / "host.jsonl"), str(tmp_path / "inbox"))
    assert spec_from_json(spec_json(spec)) == spec


def test_thread_labs_give_each_thread_its_own_instruments() -> None:
    labs = instruments.ThreadLabs()

    class Fake:
        def __init__(self, name):
            self.name = name

    seen = {}

    def run(name):
        labs.bind(Fake(name))
        seen[name] = labs.name

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": "a", "b": "b", "c": "c"}
    with pytest.raises(AttributeError, match="no program"):
        labs.name  # this thread bound nothing


def test_bind_thread_needs_a_host() -> None:
    saved = instruments.lab
    try:
        instruments.lab = None
        with pytest.raises(RuntimeError, match="install_per_thread"):
            instruments.bind_thread(object())
    finally:
        instruments.lab = saved


@pytest.mark.subprocess
def test_a_host_runs_programs_in_threads_each_with_its_own_lab_and_stops_one_on_request(tmp_path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    host = workloads.spawn(HostSpec("host", "r", str(tmp_path / "host.jsonl"), str(inbox)))
    try:
        for name in ("consumer-0", "consumer-1"):
            _start(inbox, name, _spec(tmp_path, name))
        _start(inbox, "broken", _spec(tmp_path, "broken", source="raise ValueError('on purpose')\n"))
        first = lambda n: [e.value for e in read_events(tmp_path / f"{n}.jsonl", growing=True)]  # noqa: E731
        wait_until(lambda: all((tmp_path / f"{n}.jsonl").exists() and first(n) for n in ("consumer-0", "consumer-1")),
                   timeout_s=60, what="both programs to write their first line")
        assert first("consumer-0") == ["consumer-0:topic-of-consumer-0"]
        assert first("consumer-1") == ["consumer-1:topic-of-consumer-1"]
        wait_until(lambda: (inbox / "broken.end").exists(), timeout_s=30, what="the broken program to end")
        assert "ValueError: on purpose" in (inbox / "broken.end").read_text()

        (inbox / "consumer-0.stop").touch()
        wait_until(lambda: (inbox / "consumer-0.end").exists(), timeout_s=30, what="consumer-0 to stop")
        assert (inbox / "consumer-0.end").read_text() == "", "it returned"
        assert first("consumer-0")[-1] == "stopped"
        assert not (inbox / "consumer-1.end").exists(), "the other program runs on"
        assert host.alive
    finally:
        rc = host.terminate(timeout_s=30)
    assert rc == 0, host.log_tail()
    assert first("consumer-1")[-1] == "stopped", "SIGTERM stops every program, and the host waits for them"
