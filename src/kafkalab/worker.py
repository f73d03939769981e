"""Producer and consumer *processes*: restarted, stopped and killed like pods.

``python -m kafkalab.worker SPEC_JSON`` runs one worker; ``kafkalab.workloads.spawn``
starts it and returns a handle. Each worker appends what it did to its own ledger file
(``Ledger(write_through=True)``: a SIGKILL from outside loses no line) and dies with its
parent (Linux ``PR_SET_PDEATHSIG``), so no worker outlives the notebook that started it.

Consumer: records ``assigned``/``revoked`` per partition from its rebalance callbacks,
``consumed`` for every record handed over by ``poll``/``consume``, ``processed`` once the
side effect ran (a row in sqlite when ``sink`` is set), ``committed`` from the commit
callback. ``commit_mode`` decides when offsets are committed (librdkafka CONFIGURATION.md:
``enable.auto.commit``, ``enable.auto.offset.store``, ``auto.commit.interval.ms``):

- ``auto``: librdkafka's defaults: the offset is stored when a record is handed to the
  application and a timer commits stored offsets;
- ``store-after-process``: ``enable.auto.offset.store=false`` and ``store_offsets`` after
  processing (librdkafka's at-least-once recipe), the timer commits;
- ``sync-per-message``: auto-commit off, ``commit(message, asynchronous=False)`` after each;
- ``async``: auto-commit off, ``commit(message, asynchronous=True)`` after each;
- ``none``: auto-commit off, nothing committed.

``crash_after=K`` SIGKILLs the worker itself right after its K-th processed record:
the crash point is exact on every run.

Producer: sends ``count`` records (or until SIGTERM) at ``rate`` records/s, round-robin over
``partitions`` (explicit partition numbers), values are flight record ids; records
``produced`` and ``acked`` (the delivery report, with partition and offset or the error).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

COMMIT_MODES = ("auto", "store-after-process", "sync-per-message", "async", "none")


@dataclass
class ConsumerSpec:
    """What a consumer worker does. ``conf`` is passed to ``confluent_kafka.Consumer`` after
    the commit-mode settings, so it can override them. Times in ms."""

    name: str
    run_id: str
    ledger: str
    group_id: str
    topics: list[str]
    conf: dict = field(default_factory=dict)
    commit_mode: str = "none"
    batch: int = 1
    process_ms: float = 0.0
    crash_after: int | None = None
    sink: str | None = None
    dedupe: bool = False
    poll_timeout_ms: int = 100
    kind: str = "consumer"


@dataclass
class ProducerSpec:
    """What a producer worker does. ``count`` None: until SIGTERM. ``rate``: records/s (0 = as
    fast as possible). ``partitions``: produce to partitions 0..partitions-1 in turn."""

    name: str
    run_id: str
    ledger: str
    topic: str
    partitions: int
    count: int | None = None
    rate: float = 0.0
    conf: dict = field(default_factory=dict)
    kind: str = "producer"


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits (prctl PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def commit_mode_conf(mode: str) -> dict:
    """librdkafka settings for a commit mode (see the module docstring)."""
    if mode not in COMMIT_MODES:
        raise ValueError(f"commit_mode must be one of {', '.join(COMMIT_MODES)}, not {mode!r}")
    if mode == "auto":
        return {"enable.auto.commit": True, "enable.auto.offset.store": True}
    if mode == "store-after-process":
        return {"enable.auto.commit": True, "enable.auto.offset.store": False}
    return {"enable.auto.commit": False, "enable.auto.offset.store": False}


class Sink:
    """The side effect of processing: one row per processed record in sqlite. With
    ``dedupe`` the record id is the primary key and repeats are ignored (article 000's idea:
    deduplicate on the consumer by a key carried in the message)."""

    def __init__(self, path: str, dedupe: bool):
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        pk = "PRIMARY KEY" if dedupe else ""
        self.db.execute(f"CREATE TABLE IF NOT EXISTS processed (record_id TEXT {pk}, topic TEXT, "
                        "partition INTEGER, offset INTEGER, consumer TEXT, ts_ms INTEGER)")
        self.verb = "INSERT OR IGNORE" if dedupe else "INSERT"

    def write(self, record_id: str, topic: str, partition: int, offset: int, consumer: str) -> bool:
        """Insert the row; returns False if ``dedupe`` ignored it as a repeat."""
        cur = self.db.execute(f"{self.verb} INTO processed VALUES (?, ?, ?, ?, ?, ?)",
                              (record_id, topic, partition, offset, consumer, int(time.time() * 1000)))
        return cur.rowcount == 1


def run_consumer(spec: ConsumerSpec) -> None:
    from confluent_kafka import Consumer, KafkaError

    from . import config
    from .ledger import Ledger

    ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    member = {"id": None}
    instance = spec.conf.get("group.instance.id")

    def note(kind: str, **kw) -> None:
        ledger.record(kind, client_id=spec.name, member_id=member["id"], group_instance_id=instance, **kw)

    def on_commit(err, partitions) -> None:
        for p in partitions or []:
            note("committed", topic=p.topic, partition=p.partition, offset=p.offset,
                 error=str(err) if err else (str(p.error) if p.error else None))

    conf = {"bootstrap.servers": config.bootstrap_servers(), "group.id": spec.group_id, "client.id": spec.name,
            "auto.offset.reset": "earliest", "on_commit": on_commit, "log_level": 3,
            **commit_mode_conf(spec.commit_mode), **spec.conf}
    consumer = Consumer(conf)

    def on_assign(c, partitions) -> None:
        member["id"] = c.memberid()
        for p in partitions:
            note("assigned", topic=p.topic, partition=p.partition)

    def on_revoke(c, partitions) -> None:
        for p in partitions:
            note("revoked", topic=p.topic, partition=p.partition)

    consumer.subscribe(spec.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    sink = Sink(spec.sink, spec.dedupe) if spec.sink else None
    processed = 0
    try:
        while not stop.is_set():
            if spec.batch > 1:
                msgs = consumer.consume(num_messages=spec.batch, timeout=spec.poll_timeout_ms / 1000)
            else:
                m = consumer.poll(spec.poll_timeout_ms / 1000)
                msgs = [m] if m is not None else []
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        note("consumed", topic=m.topic() or "", error=str(m.error()))
                    continue
                value = m.value().decode() if m.value() is not None else None
                key = m.key().decode() if m.key() is not None else None
                note("consumed", topic=m.topic(), partition=m.partition(), offset=m.offset(), key=key, value=value)
            for m in msgs:
                if m.error() is not None:
                    continue
                if spec.process_ms:
                    time.sleep(spec.process_ms / 1000)  # the work itself (simulated), not a wait on Kafka
                value = m.value().decode() if m.value() is not None else None
                if sink is not None:
                    sink.write(value, m.topic(), m.partition(), m.offset(), spec.name)
                note("processed", topic=m.topic(), partition=m.partition(), offset=m.offset(), value=value)
                if spec.commit_mode == "store-after-process":
                    consumer.store_offsets(message=m)
                elif spec.commit_mode in ("sync-per-message", "async"):
                    try:
                        consumer.commit(message=m, asynchronous=spec.commit_mode == "async")
                    except Exception as e:  # a failed sync commit is recorded, not fatal
                        note("committed", topic=m.topic(), partition=m.partition(), offset=m.offset() + 1, error=str(e))
                processed += 1
                if spec.crash_after is not None and processed >= spec.crash_after:
                    ledger.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
    finally:
        consumer.close()  # leaves the group (a dynamic member) and commits stored offsets (auto modes)
        ledger.close()


def run_producer(spec: ProducerSpec) -> None:
    from confluent_kafka import Producer

    from . import config
    from .data import flights
    from .ledger import Ledger

    ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    producer = Producer({"bootstrap.servers": config.bootstrap_servers(), "client.id": spec.name,
                         "log_level": 3, **spec.conf})
    rows = flights()

    def report(err, msg) -> None:
        ledger.record("acked", topic=spec.topic, partition=msg.partition(), client_id=spec.name,
                      offset=msg.offset() if err is None else None,
                      key=msg.key().decode() if msg.key() else None,
                      value=msg.value().decode(), error=str(err) if err else None)

    i = 0
    t0 = time.monotonic()
    try:
        while not stop.is_set() and (spec.count is None or i < spec.count):
            f = rows[i % len(rows)]
            value = f.record_id if i < len(rows) else f"{f.record_id}#{i // len(rows)}"
            partition = i % spec.partitions
            ledger.record("produced", topic=spec.topic, partition=partition, key=f.key, value=value, client_id=spec.name)
            producer.produce(spec.topic, key=f.key.encode(), value=value.encode(), partition=partition, on_delivery=report)
            producer.poll(0)
            i += 1
            if spec.rate:
                # pace to `rate` records/s while serving delivery reports
                while not stop.is_set() and time.monotonic() < t0 + i / spec.rate:
                    producer.poll(min(0.05, max(0.0, t0 + i / spec.rate - time.monotonic())))
        producer.flush(30)
    finally:
        ledger.close()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m kafkalab.worker SPEC_JSON")
    die_with_parent()
    spec = json.loads(argv[0])
    kind = spec.pop("kind")
    if kind == "consumer":
        run_consumer(ConsumerSpec(**spec))
    elif kind == "producer":
        run_producer(ProducerSpec(**spec))
    else:
        sys.exit(f"unknown worker kind {kind!r}")


def spec_json(spec: ConsumerSpec | ProducerSpec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
