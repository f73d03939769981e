"""The exactly-once consume-transform-produce processor: a mode of the worker process.

``kafkalab.workloads.spawn(ProcessorSpec(...))`` starts one *incarnation* of the processor
as ``python -m kafkalab.worker SPEC_JSON`` and returns its handle (``Worker``: ``wait``,
``kill``, ``terminate``; killed at interpreter exit; dies with its parent like every worker).
Notebook 05 (``experiments/transactions.py``) plans its runs and crashes.

The loop, per batch of at most ``spec.batch`` input records (one batch = one transaction):

======================  ======================================================================
step                    transactional                          at-least-once
======================  ======================================================================
1 consume               ``consumer.consume(batch)`` (isolation.level=read_committed)
2 begin                 ``begin_transaction()``                (nothing)
3 produce               one output record per input record (crash point ``mid-produce``: half
                        of them produced and flushed)
4 sink (optional)       one sqlite row per record: ``insert`` (plain) or ``upsert`` keyed by
                        the record id, committed in sqlite's own transaction
5 flush                 every output record is in the broker's log (crash point
                        ``after-produce``)
6 offsets               ``send_offsets_to_transaction``        (not a step: offsets are
                        (crash point ``after-offsets``)         committed in step 7)
7 commit                ``commit_transaction()``               ``consumer.commit(offsets)``
                                                               (synchronous)
8 next batch            (crash point ``after-commit``: between transactions)
======================  ======================================================================

A crash is ``os.kill(getpid(), SIGKILL)`` at ``spec.crash_point`` during the
``spec.crash_at``-th batch of this incarnation: exact on every run, never left to timing.
Every crash point comes after a ``flush()``, so what was produced is in the log when the
process dies. The next incarnation, started with the same ``transactional.id``, calls
``init_transactions()``: the coordinator bumps the producer epoch (fencing the dead
incarnation) and aborts its open transaction; only then does the consumer fetch the
committed offsets (librdkafka asks with KIP-447's ``require_stable``, so offsets of a
transaction still being completed are never returned). The at-least-once loop is the same
without transactions (an idempotent producer, offsets committed after producing).

The processor owns every partition of the input topic (``assign``, not ``subscribe``): one
process, one ``transactional.id``, which alone identifies it and fences its zombies (the
KIP-98 model). With a consumer group of several processors, KIP-447 lets the consumer group
metadata passed to ``send_offsets_to_transaction`` fence zombies instead.

It stops by itself (exit code 0) once it has committed up to the end offsets the input
topic had when it started (the input is written before the processor starts). Exit code 3:
``spec.max_runtime_s`` passed first.

Ledger (``kafkalab.ledger``, written through: a SIGKILL loses no line), ``client_id`` = the
incarnation's name: ``assigned`` (per partition, offset = where it starts), ``consumed``
(input), ``produced`` and ``acked`` (output; ``acked`` carries partition and offset, also for
records of transactions later aborted), ``processed`` (a sink row written), ``committed``
(per partition, offset = next offset to read, after the commit returned).

Sources: KIP-98 (transactions, transactional.id, fencing, control records), KIP-447
(producer scalability for exactly-once: group metadata, require_stable offset fetch);
librdkafka INTRODUCTION.md "Transactional Producer" and CONFIGURATION.md
(``transactional.id``, ``transaction.timeout.ms``, ``isolation.level``); confluent-kafka
2.16 ``Producer.send_offsets_to_transaction``.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from . import consumers
from .data import record_id_of
from .errors import KafkalabError

#: Processing modes: with Kafka transactions, or the same loop committing offsets after producing.
MODES = ("transactional", "at-least-once")

#: Where a crash can be placed inside a batch, in loop order (see the module docstring).
CRASH_POINTS = ("mid-produce", "after-produce", "after-offsets", "after-commit")

#: sqlite sink modes (``kafkalab.sink.Sink``): a plain INSERT per record, or an upsert
#: keyed by the record id.
SINK_MODES = ("insert", "upsert")

#: Exit code when ``max_runtime_s`` ran out before the input was done.
EXIT_TIMED_OUT = 3


@dataclass
class ProcessorSpec:
    """What one incarnation of the processor does.

    Attributes:
        name: incarnation name (``client.id``, ledger ``client_id``), e.g. ``"eos-r1a2b3c-2"``.
        run_id: the experiment run (ledger ``run_id``).
        ledger: path of this incarnation's ledger file (one file per incarnation).
        input_topic, output_topic: topic names; the processor reads all partitions of the input.
        group_id: consumer group whose committed offsets say where to resume.
        mode: ``"transactional"`` or ``"at-least-once"`` (``MODES``).
        transactional_id: ``transactional.id`` (transactional mode); the same for every
            incarnation of one processor.
        batch: most input records per batch (= per transaction).
        crash_at: SIGKILL itself during its ``crash_at``-th batch (1 = the first); None: no crash.
        crash_point: where in that batch (``CRASH_POINTS``).
        transaction_timeout_ms: ``transaction.timeout.ms``, ms. librdkafka's and Java's default
            is 60000; short here so an abandoned transaction is aborted within a notebook.
        sink: path of a sqlite file written per record (step 4), or None.
        sink_mode: ``"insert"`` or ``"upsert"`` (``SINK_MODES``).
        max_runtime_s: give up (exit code 3) after this many seconds.
        conf: extra librdkafka producer settings.
        kind: the worker mode (``kafkalab.worker``); always ``"eos"``.
    """

    name: str
    run_id: str
    ledger: str
    input_topic: str
    output_topic: str
    group_id: str
    mode: str = "transactional"
    transactional_id: str | None = None
    batch: int = 50
    crash_at: int | None = None
    crash_point: str = "after-produce"
    transaction_timeout_ms: int = 10000
    sink: str | None = None
    sink_mode: str = "insert"
    max_runtime_s: float = 60.0
    conf: dict = field(default_factory=dict)
    kind: str = "eos"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.crash_point not in CRASH_POINTS:
            raise ValueError(f"crash_point must be one of {', '.join(CRASH_POINTS)}, not {self.crash_point!r}")
        if self.mode == "at-least-once" and self.crash_at is not None and self.crash_point == "after-offsets":
            raise ValueError("after-offsets is a transactional crash point (between send_offsets_to_transaction "
                             "and commit_transaction); the at-least-once loop commits offsets in one step")
        if self.mode == "transactional" and not self.transactional_id:
            raise ValueError("transactional mode needs a transactional_id")
        if self.sink_mode not in SINK_MODES:
            raise ValueError(f"sink_mode must be one of {', '.join(SINK_MODES)}, not {self.sink_mode!r}")
        if self.batch < 1:
            raise ValueError(f"batch must be at least 1, not {self.batch}")


# ----------------------------------------------------------------------------- the transform


def transform(value: bytes) -> bytes:
    """The processor's deterministic transform: an input flight (JSON with ``record_id``,
    ``origin``, ``dest``, ``dep_delay``) -> ``{"record_id", "route", "delayed"}`` as compact JSON.

    ``delayed`` is ``dep_delay > 15`` (minutes; the US DOT's definition of a delayed
    departure); a cancelled flight (``dep_delay`` null) is not delayed.

    Raises:
        ValueError: not JSON, or no ``record_id``.
    """
    d = json.loads(value)
    if "record_id" not in d:
        raise ValueError(f"input record without record_id: {value[:80]!r}")
    delay = d.get("dep_delay")
    out = {"record_id": d["record_id"], "route": f"{d.get('origin')}-{d.get('dest')}",
           "delayed": delay is not None and delay > 15}
    return json.dumps(out, separators=(",", ":")).encode()


# ----------------------------------------------------------------------------- the process


def run_processor(spec: ProcessorSpec) -> int:
    """Run one incarnation until the input is done (returns 0), ``max_runtime_s`` passes
    (returns ``EXIT_TIMED_OUT``) or its crash point kills it (never returns).

    Raises:
        confluent_kafka.KafkaException: a Kafka error the loop does not expect (e.g. the
            incarnation was fenced by a newer one: fatal ``_FENCED``).
    """
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    from . import config
    from .ledger import Ledger
    from .ledger import crash
    from .sink import Sink

    deadline = time.monotonic() + spec.max_runtime_s
    ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
    transactional = spec.mode == "transactional"

    def note(kind: str, **kw: Any) -> None:
        ledger.record(kind, client_id=spec.name, **kw)

    delivery_errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            delivery_errors.append(str(err))
        note("acked", topic=msg.topic(), partition=msg.partition(),
             offset=msg.offset() if err is None else None,
             key=msg.key().decode() if msg.key() else None, value=record_id_of(msg.value()),
             error=str(err) if err else None)

    pconf: dict[str, Any] = {"bootstrap.servers": config.bootstrap_servers(), "client.id": spec.name,
                             "log_level": 3, "linger.ms": 5}
    if transactional:
        pconf.update({"transactional.id": spec.transactional_id,
                      "transaction.timeout.ms": spec.transaction_timeout_ms})
    else:
        pconf["enable.idempotence"] = True  # per session only: it cannot help across a restart
    pconf.update(spec.conf)
    producer = Producer(pconf)
    consumer = Consumer({
        "bootstrap.servers": config.bootstrap_servers(), "group.id": spec.group_id, "client.id": spec.name,
        "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",  # librdkafka's default too; said for the reader
        "enable.partition.eof": True, "log_level": 3,
    })
    sink = Sink(spec.sink, spec.sink_mode) if spec.sink else None

    if transactional:
        # Fences every older incarnation (epoch + 1) and aborts its open transaction.
        producer.init_transactions(30)

    md = consumer.list_topics(spec.input_topic, timeout=10).topics[spec.input_topic]
    if md.error is not None:
        raise KafkalabError(f"input topic {spec.input_topic}: {md.error}")
    tps = [TopicPartition(spec.input_topic, p) for p in sorted(md.partitions)]
    committed = consumer.committed(tps, timeout=30)
    ends: dict[int, int] = {}
    position: dict[int, int] = {}
    for tp in committed:
        low, high = consumers.watermarks(consumer, tp.topic, tp.partition)
        ends[tp.partition] = high
        position[tp.partition] = tp.offset if tp.offset >= 0 else low
        note("assigned", topic=tp.topic, partition=tp.partition, offset=position[tp.partition])
    consumer.assign([TopicPartition(spec.input_topic, p, o) for p, o in position.items()])

    def done() -> bool:
        return all(position[p] >= ends[p] for p in ends)

    batch_no = 0
    try:
        while not done():
            if time.monotonic() > deadline:
                print(f"{spec.name}: max_runtime_s={spec.max_runtime_s} passed with positions {position} "
                      f"and ends {ends}", file=sys.stderr)
                return EXIT_TIMED_OUT
            msgs = []
            for m in consumer.consume(num_messages=spec.batch, timeout=0.5):
                if m.error() is None:
                    msgs.append(m)
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkalabError(f"{spec.name}: consumer error {m.error()}")
            if not msgs:
                continue
            batch_no += 1
            crash_here = spec.crash_at == batch_no
            point = spec.crash_point if crash_here else None
            if transactional:
                producer.begin_transaction()
            rows = []
            half = max(1, len(msgs) // 2)  # mid-produce: records [0, half) produced, then the crash
            for i, m in enumerate(msgs):
                rid = record_id_of(m.value())
                key = m.key().decode() if m.key() is not None else None
                note("consumed", topic=m.topic(), partition=m.partition(), offset=m.offset(), key=key, value=rid)
                if point == "mid-produce" and i == half:
                    producer.flush(30)
                    crash(ledger)
                out = transform(m.value())
                producer.produce(spec.output_topic, key=m.key(), value=out, on_delivery=on_delivery)
                note("produced", topic=spec.output_topic, key=key, value=rid)
                producer.poll(0)
                rows.append((rid, m.topic(), m.partition(), m.offset(), spec.name, out.decode()))
            if point == "mid-produce":  # reached only by a batch of one record: crash after its produce
                producer.flush(30)
                crash(ledger)
            if sink is not None:
                sink.write_batch(rows)
                for r in rows:
                    note("processed", topic=spec.input_topic, partition=r[2], offset=r[3], value=r[0])
            if producer.flush(30):
                raise KafkalabError(f"{spec.name}: output not delivered within 30 s")
            if delivery_errors:
                raise KafkalabError(f"{spec.name}: delivery failed: {delivery_errors[0]}")
            if point == "after-produce":
                crash(ledger)
            offsets: dict[int, int] = {}
            for m in msgs:
                offsets[m.partition()] = max(offsets.get(m.partition(), 0), m.offset() + 1)
            commit = [TopicPartition(spec.input_topic, p, o) for p, o in sorted(offsets.items())]
            if transactional:
                producer.send_offsets_to_transaction(commit, consumer.consumer_group_metadata(), 30)
                if point == "after-offsets":
                    crash(ledger)
                producer.commit_transaction(30)
            else:
                consumer.commit(offsets=commit, asynchronous=False)
            for tp in commit:
                note("committed", topic=tp.topic, partition=tp.partition, offset=tp.offset)
                position[tp.partition] = tp.offset
            if point == "after-commit":
                crash(ledger)
        return 0
    finally:
        if sink is not None:
            sink.close()
        consumer.close()
        ledger.close()
