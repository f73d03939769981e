"""Worker processes: real producers and consumers that are killed like pods."""

from __future__ import annotations

import signal

import pytest

from kafkalab import admin, runscope, workloads
from kafkalab.ledger import read_events
from kafkalab.waiting import wait_until
from kafkalab.worker import ConsumerSpec, ProducerSpec, commit_mode_conf

pytestmark = pytest.mark.cluster


def test_commit_modes_map_to_librdkafka_settings() -> None:
    assert commit_mode_conf("auto") == {"enable.auto.commit": True, "enable.auto.offset.store": True}
    assert commit_mode_conf("store-after-process")["enable.auto.offset.store"] is False
    with pytest.raises(ValueError, match="commit_mode"):
        commit_mode_conf("sometimes")


def test_producer_worker_acks_every_record_and_a_crashing_consumer_stops_exactly_at_k() -> None:
    run = runscope.run_id()
    topic = f"worker-{run}"
    admin.create_topics({topic: 3})
    d = workloads.run_dir(run)
    try:
        p = workloads.spawn(ProducerSpec("producer-0", run, str(d / "producer-0.jsonl"), topic, partitions=3, count=60))
        assert p.wait(60) == 0, p.log_tail()
        acked = [e for e in read_events(p.ledger) if e.kind == "acked"]
        assert len(acked) == 60 and not [e for e in acked if e.error]
        assert {e.partition for e in acked} == {0, 1, 2}

        c = workloads.spawn(ConsumerSpec("consumer-0", run, str(d / "consumer-0.jsonl"), f"{run}-g", [topic],
                                         commit_mode="store-after-process", crash_after=25,
                                         sink=str(d / "sink.db")))
        assert c.wait(60) == -signal.SIGKILL, c.log_tail()
        events = read_events(c.ledger)
        assert sum(e.kind == "processed" for e in events) == 25, "the crash point is exact"
        assert {e.partition for e in events if e.kind == "assigned"} == {0, 1, 2}
    finally:
        admin.delete_topics([topic])


def test_terminated_worker_exits_cleanly_and_none_is_left() -> None:
    run = runscope.run_id()
    topic = f"worker-{run}"
    admin.create_topics({topic: 1})
    try:
        c = workloads.spawn(ConsumerSpec("consumer-0", run, str(workloads.run_dir(run) / "c.jsonl"), f"{run}-g", [topic]))
        wait_until(lambda: c.ledger.exists() and any(e.kind == "assigned" for e in read_events(c.ledger)), timeout_s=30,
                   what="consumer-0 to be assigned its partition")
        assert c.terminate(30) == 0
        assert not c.alive
    finally:
        admin.delete_topics([topic])
