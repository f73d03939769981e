"""Notebook 05: transactions, read_committed and exactly-once consume-transform-produce.

The client code of every experiment is a program in the notebook (``%%program`` cells:
``processor``, ``at_least_once``, ``reader``; sections 1, 2, 5 and 10 call the producer API in the
notebook itself); this module runs those programs in worker processes (``TxnRun.start``, the
instruments of ``kafkalab.instruments.transactions``) and reads what they did.
``run_eos`` is also ``kafkalab run eos``, with the programs read from the saved notebook.

======================================  ==========================================================
``TxnRun.start``, ``program_setting``   run a program in a worker process; read a setting it
                                        writes (``isolation.level``, ``transaction.timeout.ms``)
``Reader`` / ``read_all`` / ``read_views``  a reader program over a topic: records, positions
                                        (sections 1, 2, 3, 5, 6, 7)
``end_offsets`` / ``offsets_table``     high watermark and last stable offset (ListOffsets with
                                        each isolation level) (section 2)
``control_records``, ``txn_index_files``  the COMMIT/ABORT markers and aborted-transaction
                                        indexes in the partition leaders' files (sections 1, 5, 6)
``abandon_transaction``                 the processor SIGKILLed mid-transaction, never restarted
                                        (section 3)
``describe_transaction``                the transaction coordinator's view of a transactional.id
                                        (section 4; computing the coordinator: ``kafkalab.coordinators``)
``wait_released`` / ``timeout_report``  what the coordinator did at transaction.timeout.ms (6)
``run_eos``                             a processor program under K crashes (sections 7, 8;
                                        audited by ``transactions_analysis.spark_audit``)
======================================  ==========================================================

Client facts used throughout (librdkafka 2.16 via confluent-kafka 2.16.1):

- ``isolation.level`` defaults to ``read_committed`` in librdkafka, ``read_uncommitted`` in the
  Java consumer (librdkafka CONFIGURATION.md; Java ConsumerConfig) and so in Spark's Kafka source.
- ``transaction.timeout.ms`` defaults to 60000 in both clients; the broker caps it with
  ``transaction.max.timeout.ms`` (900000) and looks for expired transactions every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10000).
- librdkafka speaks the original transaction protocol (KIP-98, with KIP-360/KIP-447
  additions), not KIP-890's "transactions V2": the producer epoch changes only at
  ``init_transactions``, not at every commit, even on this cluster whose
  ``transaction.version`` feature is 2.

Sources: KIP-98 (exactly-once delivery and transactional messaging), KIP-447, KIP-890, Kafka
documentation 4.3 (Design > Message Delivery Semantics; Broker Configs), librdkafka
INTRODUCTION.md ("Transactional Producer", "Exactly Once Semantics") and CONFIGURATION.md.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import click

from .. import admin, cluster, coordinators, dumplog, programs, runscope, workloads
from ..instruments.transactions import CRASH_POINTS, ProcessorOptions
from ..programs import Program
from ..worker import ProgramSpec, lab_conf
from ..dumplog import DumpedRecord
from ..data import record_id_of
from ..errors import KafkalabError
from ..waiting import wait_until
from ..sink import sink_rows
from . import transactions_analysis as ta
from ..runscope import RunScope

if TYPE_CHECKING:
    import pandas as pd

#: The notebook whose programs ``kafkalab run eos`` runs (``programs.from_notebook``).
NOTEBOOK = "05_transactions"
#: Processing mode -> the notebook's program for it.
MODES = {"transactional": "processor", "at-least-once": "at_least_once"}

#: Processor batches (records per transaction) in the experiments, unless given.
DEFAULT_BATCH = 50

#: Crash points cycled through by ``crash_plan`` for each mode (``CRASH_POINTS``, the
#: ``lab.crash_point`` lines of the processor programs).
DEFAULT_CRASH_CYCLE = {
    "transactional": ("after-produce", "after-offsets", "mid-produce", "after-commit"),
    "at-least-once": ("after-produce", "mid-produce", "after-commit"),
}


# ----------------------------------------------------------------------------- this run's names


class TxnRun(RunScope):
    """Names of one run's topics, groups and transactional ids (``txn-<run id>-<name>``), its
    folder for ledgers and sinks (``.kafkalab/runs/txn-<run id>/``), and its cleanup: every
    program process it started is killed, then topics and groups are deleted (also at
    interpreter exit if the notebook stopped early). Transactional ids cannot be deleted; the
    broker forgets them after ``transactional.id.expiration.ms`` (7 days by default)."""

    def __init__(self, prefix: str = "txn"):
        super().__init__(prefix=prefix)
        self.dir = workloads.run_dir(self.prefix)
        self.processes: list[workloads.Worker] = []
        self._names: dict[str, int] = {}

    def transactional_id(self, name: str) -> str:
        """A transactional.id for this run."""
        return self.name(name)

    def unique(self, name: str) -> str:
        """``name``, or ``name-2``, ``name-3``... the second time it is asked: a process name
        (and ledger file) of this run."""
        n = self._names[name] = self._names.get(name, 0) + 1
        return name if n == 1 else f"{name}-{n}"

    def start(self, program: Program, role: str, name: str, topics: Sequence[str], conf: dict | None = None,
              options: dict | None = None) -> tuple[workloads.Worker, str]:
        """Run ``program`` as it is in a worker process (``worker.ProgramSpec``) with the
        instruments of ``role``; ``conf`` added to ``bootstrap.servers`` and ``client.id``
        (``lab.conf``). The process is killed at cleanup. Returns its handle and ledger path."""
        ledger = str(self.dir / f"{name}.jsonl")
        spec = ProgramSpec(name=name, run_id=self.run_id, ledger=ledger, role=role, program_name=program.name,
                           source=program.source, conf=lab_conf(name, (conf or {}).get("group.id")), topics=list(topics),
                           options=options or {})
        p = workloads.spawn(spec)
        self.processes.append(p)
        return p, ledger

    def reader(self, program: Program, topic: str) -> "Reader":
        """A ``Reader`` of ``topic`` running ``program``, stopped at cleanup."""
        return Reader(self, program, topic)

    def cleanup(self, timeout_s: float = 30.0) -> list[str]:
        """SIGKILL this run's program processes still running, then delete its topics and
        groups (``RunScope.cleanup``). Returns the topics deleted.

        Raises:
            WaitTimeout: a topic is still in the metadata after ``timeout_s``.
        """
        for p in self.processes:
            if p.alive:
                p.kill()
        return super().cleanup(timeout_s)


# ----------------------------------------------------------------------------- programs


def program_setting(program: Program, key: str) -> str | None:
    """The value a program gives its clients for setting ``key``, as text
    (``programs.program_settings``, read with ast); None if the program does not set it.

    >>> program_setting(Program("p", 'c = Consumer({"isolation.level": "read_committed", "x.ms": 5})'), "x.ms")
    '5'
    """
    value = programs.program_settings(program.source).get(key)
    return None if value is None else str(value)


def uncommitted_reader(reader: Program) -> Program:
    """Reader program ``reader`` edited to ``isolation.level=read_uncommitted`` (the edit
    notebook 05 shows), named ``uncommitted_reader``.

    Raises:
        ProgramError: ``reader`` does not set ``"isolation.level": "read_committed"`` once.
    """
    return reader.replace('"isolation.level": "read_committed"', '"isolation.level": "read_uncommitted"',
                          name="uncommitted_reader")


def isolation_level(program: Program) -> str:
    """The ``isolation.level`` a reader program sets, or ``read_committed`` (librdkafka's
    default, CONFIGURATION.md) if it sets none."""
    return program_setting(program, "isolation.level") or "read_committed"


def is_transactional(program: Program) -> bool:
    """Whether a processor program sets ``transactional.id``."""
    return '"transactional.id"' in program.source


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Read:
    """One record a reader received: where it is and its value as text."""

    partition: int
    offset: int
    key: str | None
    value: str


def _partitions(client, topic: str) -> list[int]:
    md = client.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        raise KafkalabError(f"topic {topic!r} is not in the metadata: {md.error if md else 'missing'}")
    return sorted(md.partitions)


class Reader:
    """A reader program (role ``reader``) running in its own process over every partition of
    ``topic``, and what its ledger says it read: ``records`` and ``position`` per partition
    (the offset after its last record, or where its last end-of-partition event was).

    Args:
        run: the run (names, cleanup).
        program: the reader program (e.g. notebook 05's ``reader``).
        topic: topic name.
    """

    def __init__(self, run: TxnRun, program: Program, topic: str):
        self.topic = topic
        self.program = program
        self.isolation_level = isolation_level(program)
        self.partitions = _partitions(workloads.admin(), topic)
        name = run.unique(f"{run.prefix}-{program.name}")
        self.process, self.ledger = run.start(program, "reader", name, [topic], {"group.id": run.group(name)},
                                              {"partitions": self.partitions})
        self.position: dict[int, int] = {p: 0 for p in self.partitions}
        self.records: list[Read] = []
        self._seen = 0

    def _read_ledger(self) -> list[Read]:
        from ..instruments.transactions import END_OF_PARTITION
        from ..ledger import read_events

        events = read_events(self.ledger, growing=True, missing_ok=True)
        new, self._seen = events[self._seen:], len(events)
        out = []
        for e in new:
            if e.error == END_OF_PARTITION:
                self.position[e.partition] = max(self.position[e.partition], e.offset)
            elif e.error is not None:
                raise KafkalabError(f"reader {self.program.name} of {self.topic}: {e.error}")
            else:
                out.append(Read(e.partition, e.offset, e.key, e.value or ""))
                self.position[e.partition] = max(self.position[e.partition], e.offset + 1)
        return out

    def catch_up(self, timeout_s: float = 30.0, until_stable: bool = False) -> list[Read]:
        """Until this reader's position in every partition reaches the end offset its isolation
        level allows (the last stable offset for read_committed, the high watermark for
        read_uncommitted, asked with ListOffsets at every round). Control records are skipped
        by the client; the position moves past them. Returns the records read since the last
        call.

        ``until_stable=True`` waits for the high watermark whatever the level: for a
        read_committed reader, until no transaction is open in the topic and every marker is
        written. ``commit_transaction()`` returns once the decision is logged by the
        coordinator; the markers reach the partitions a moment later (KIP-98), and until then
        the last stable offset has not moved.

        Raises:
            WaitTimeout: the position did not reach the end within ``timeout_s``.
            KafkalabError: the reader's process ended, or its ledger has an error.
        """
        level = "read_uncommitted" if until_stable or self.isolation_level == "read_uncommitted" else "read_committed"
        new: list[Read] = []
        target: dict[int, int] = {}

        def reached() -> bool:
            if not self.process.alive:
                raise KafkalabError(f"reader {self.program.name} exited {self.process.returncode}:\n"
                                    f"{self.process.log_tail()}")
            new.extend(self._read_ledger())
            target.update(end_offsets(self.topic, level))
            return all(self.position[p] >= target[p] for p in self.partitions)

        wait_until(reached, timeout_s=timeout_s, interval_s=0.05,
                   what=f"{self.isolation_level} reader of {self.topic} at the {level} end offsets",
                   on_timeout=lambda: f"positions {self.position}, end offsets {target}")
        self.records.extend(new)
        return new

    def close(self) -> None:
        """Stop the reader's process (SIGTERM: it closes its consumer). Idempotent."""
        self.process.terminate(10)


def read_all(run: TxnRun, program: Program, topic: str, timeout_s: float = 30.0) -> list[Read]:
    """Every record of ``topic`` that reader ``program`` receives, reading all partitions from
    the beginning to the high watermark, once no transaction is open
    (``Reader.catch_up(until_stable=True)``).

    Raises:
        WaitTimeout: not at the end within ``timeout_s`` (for read_committed: a transaction
            stayed open).
    """
    return read_views(run, [program], topic, timeout_s)[program.name]


def read_views(run: TxnRun, readers: Sequence[Program], topic: str, timeout_s: float = 30.0
               ) -> dict[str, list[Read]]:
    """``read_all`` of ``topic`` with each reader program at the same time (their processes
    start side by side): reader name -> records."""
    started = [run.reader(p, topic) for p in readers]
    try:
        return {r.program.name: r.catch_up(timeout_s, until_stable=True) for r in started}
    finally:
        for r in started:
            r.close()


def end_offsets(topic: str, isolation_level: str = "read_uncommitted") -> dict[int, int]:
    """Partition -> the latest offset ListOffsets returns for ``isolation_level``: the high
    watermark for ``read_uncommitted``, the last stable offset (LSO) for ``read_committed``.

    Source: KIP-98 ("last stable offset"); Kafka protocol ListOffsets (IsolationLevel field).
    """
    got = admin.list_offsets([(topic, p) for p in _partitions(workloads.admin(), topic)],
                             isolation_level=isolation_level)
    return {p: offset for (_, p), offset in got.items()}


def offsets_table(topic: str, readers: Sequence[Reader] = ()) -> "pd.DataFrame":
    """Per partition: high watermark, last stable offset, and for each reader its position and
    lag (high watermark minus position, the lag a monitoring tool reports)."""
    import pandas as pd

    hw, lso = end_offsets(topic, "read_uncommitted"), end_offsets(topic, "read_committed")
    rows = []
    for p in sorted(hw):
        row: dict[str, Any] = {"partition": p, "high watermark": hw[p], "last stable offset": lso[p]}
        for r in readers:
            row[f"{r.isolation_level} position"] = r.position[p]
            row[f"{r.isolation_level} lag"] = hw[p] - r.position[p]
        rows.append(row)
    return pd.DataFrame(rows).set_index("partition")


def control_records(topic: str, status: cluster.ClusterStatus | None = None) -> list[DumpedRecord]:
    """Every record, data and control, of each partition of ``topic``, read from the partition
    leader's ``.log`` files (``coordinators.leader_log_files``) with Kafka's ``kafka-dump-log
    --print-data-log`` (one JVM for all partitions). Sorted by (file, offset).

    Control records (commit and abort markers) are written by the transaction coordinator to
    the partition leaders after ``EndTxn`` and replicated like data; read after a reader has
    seen the LSO move, they are on disk. Source: KIP-98 "Control messages".
    """
    files = coordinators.leader_log_files(topic, len(coordinators.partition_leaders(topic)), status)
    return dumplog.run(files, print_data=True).records


def txn_index_files(topic: str, status: cluster.ClusterStatus | None = None) -> dict[int, list[str]]:
    """Partition -> names of the ``.txnindex`` files in the partition leader's folder: the
    index of aborted transactions (offset ranges) a leader keeps per segment, so that
    read_committed fetches can drop aborted records. Source: KIP-98 ("Aborted transaction
    index"); storage ``TransactionIndex``."""
    from .. import segments

    status = status or cluster.status()
    out = {}
    for p, leader in coordinators.partition_leaders(topic).items():
        d = segments.partition_dirs(status.brokers[leader].data_dir, topic).get(p)
        out[p] = sorted(f.name for f in d.glob("*.txnindex")) if d else []
    return out


# ----------------------------------------------------------------------------- section 3: abandoned


@dataclass
class Abandoned:
    """A transaction left open by a processor that was SIGKILLed and not restarted."""

    transactional_id: str
    output_topic: str
    records: int
    timeout_ms: int
    crashed_at_ms: int  # wall clock, ms since the epoch, when the process was seen dead
    returncode: int


def input_records(n: int, offset: int = 0) -> list[tuple[bytes, bytes, str]]:
    """``n`` input records ``(key, value, record_id)``, workload records ``offset..offset+n-1``
    (``kafkalab.data.workload_record``): key = aircraft tail number, value = the flight as
    JSON with its unique ``record_id`` (``data.record_json``)."""
    from ..data import record_json, workload_record

    out = []
    for i in range(offset, offset + n):
        f, rid = workload_record(i)
        out.append((f.key.encode(), record_json(f, rid), rid))
    return out


def produce_input(topic: str, n: int) -> list[str]:
    """Write ``n`` input records to ``topic`` with an idempotent producer (so a retry cannot
    put a record twice in the input), wait for every ack; returns their record ids."""
    recs = input_records(n)
    workloads.produce(topic, [(k, v) for k, v, _ in recs], conf={"enable.idempotence": True})
    return [r for _, _, r in recs]


def create_topic_led_by(topic: str, avoid_leader: int, timeout_s: float = 30.0) -> int:
    """Create one-partition ``topic`` with 3 replicas whose preferred leader (the first replica)
    is a live broker other than ``avoid_leader``; wait until it is the leader. Returns it.

    Raises:
        KafkalabError: fewer than two live brokers, or the topic could not be created.
        WaitTimeout: the chosen broker did not become leader within ``timeout_s``.
    """
    a = workloads.admin()
    live = sorted(a.list_topics(timeout=10).brokers)
    others = [b for b in live if b != avoid_leader]
    if not others:
        raise KafkalabError(f"no live broker other than {avoid_leader} (live: {live})")
    replicas = [others[0]] + [b for b in live if b != others[0]][:2]
    admin.create_placed_topics({topic: {}}, replicas, timeout_s=timeout_s)
    wait_until(lambda: coordinators.partition_leaders(topic).get(0) == others[0]
               if topic in a.list_topics(timeout=5).topics else False,
               timeout_s=timeout_s, what=f"broker {others[0]} leading {topic}-0")
    return others[0]


def abandon_transaction(run: TxnRun, program: Program, name: str = "abandoned", records: int = 20) -> Abandoned:
    """The processor ``program`` reads ``records`` input records, produces their output in one
    transaction, flushes, and is SIGKILLed before committing (crash point ``after-produce``);
    nobody restarts it. The transaction stays open until the coordinator aborts it,
    ``transaction.timeout.ms`` (as the program sets it) after it began, at its next check for
    expired transactions (every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``).

    Topics ``<name>-in`` and ``<name>-out`` (one partition each) are created for it. The
    output partition is placed (``create_topic_led_by``) so that its leader is not the
    transaction coordinator of the transactional id: chosen by design, not found by luck.

    Raises:
        KafkalabError: the program sets no literal ``transaction.timeout.ms``, the processor
            did not die by its planned SIGKILL, or fewer than two brokers are up.
    """
    timeout = program_setting(program, "transaction.timeout.ms")
    if timeout is None:
        raise KafkalabError(f"program {program.name} sets no transaction.timeout.ms")
    tin, tout = run.topic(f"{name}-in"), run.topic(f"{name}-out")
    tid = run.transactional_id(name)
    admin.create_topics({tin: 1})
    create_topic_led_by(tout, avoid_leader=coordinators.transaction_coordinator(tid)[1])
    produce_input(tin, records)
    options = ProcessorOptions(group_id=run.group(name), transactional_id=tid, partitions=(0,), batch=records,
                               crash_at=1, crash_point="after-produce", sink=str(run.dir / f"{name}-sink.db"))
    p, _ = run.start(program, "transactions", f"{run.prefix}-{name}-0", [tin, tout], options=asdict(options))
    rc = p.wait(60)
    if rc != -signal.SIGKILL:
        raise KafkalabError(f"{program.name} exited {rc}, not by its planned SIGKILL:\n{p.log_tail()}")
    return Abandoned(tid, tout, records, int(timeout), int(time.time() * 1000), rc)


def wait_released(abandoned: Abandoned, timeout_s: float = 40.0) -> int:
    """Until the last stable offset of the abandoned transaction's output partition reaches
    its high watermark (the coordinator aborted the transaction and the abort marker is
    written); returns the wall clock then, ms since the epoch.

    Raises:
        WaitTimeout: still held back after ``timeout_s``.
    """
    def released() -> bool:
        return end_offsets(abandoned.output_topic, "read_committed") == end_offsets(abandoned.output_topic)

    wait_until(released, timeout_s=timeout_s, interval_s=0.2,
               what=f"the last stable offset of {abandoned.output_topic} to reach its high watermark",
               on_timeout=lambda: f"LSO {end_offsets(abandoned.output_topic, 'read_committed')}, "
                                  f"HW {end_offsets(abandoned.output_topic)}")
    return int(time.time() * 1000)


@dataclass
class TimeoutReport:
    """What the coordinator did with an abandoned transaction, after the fact.

    ``described``: ``describe_transaction`` (CoordinatorId, state, epoch, start time...);
    ``log``: the output partition's records and markers (``records_table``); ``held_ms``: from
    the transaction's start (``CurrentTransactionStartTimeMs``) to the ABORT marker's timestamp,
    both stamped by the brokers.
    """

    described: dict[str, str]
    log: "pd.DataFrame"
    held_ms: int


def timeout_report(abandoned: Abandoned) -> TimeoutReport:
    """Run ``kafka-transactions describe`` and ``kafka-dump-log`` on the abandoned transaction
    (two JVMs, started side by side) once its readers are released (``wait_released`` first).

    Raises:
        KafkalabError: no ABORT marker in the output partition.
    """
    with ThreadPoolExecutor(max_workers=2) as pool:
        d = pool.submit(describe_transaction, abandoned.transactional_id)
        recs = pool.submit(control_records, abandoned.output_topic)
        described, records = d.result(), recs.result()
    aborts = [r for r in records if r.kind == "ABORT"]
    if not aborts:
        raise KafkalabError(f"no ABORT marker in {abandoned.output_topic}")
    held = aborts[0].timestamp - int(described["CurrentTransactionStartTimeMs"])
    return TimeoutReport(described, ta.records_table(records), held)


# ----------------------------------------------------------------------------- section 4: the coordinator


def describe_transaction(transactional_id: str) -> dict[str, str]:
    """Kafka's ``kafka-transactions describe --transactional-id ID`` (asks the coordinator),
    parsed: ``CoordinatorId``, ``ProducerId``, ``ProducerEpoch``, ``TransactionState``
    (Empty, Ongoing, PrepareCommit, CompleteCommit, PrepareAbort, CompleteAbort...),
    ``TransactionTimeoutMs``, ``CurrentTransactionStartTimeMs``, ``TopicPartitions``.

    Raises:
        KafkalabError: the tool failed (e.g. unknown transactional id).
    """
    return ta.parse_transactions_describe(
        cluster.tool("kafka-transactions", "describe", "--transactional-id", transactional_id).stdout)


# ----------------------------------------------------------------------------- sections 6-7: the processor


def crash_plan(messages: int, batch: int, crashes: int, points: Sequence[str]) -> list[tuple[int, str]]:
    """``(crash_at, crash_point)`` for each of ``crashes`` incarnations, ``points`` cycled.

    Every incarnation crashes in its batch number ``c = max(1, ceil(messages / batch) //
    (crashes + 1))``, so the crashes spread over the input and the last, crash-free
    incarnation still has work. Batches may hold fewer than ``batch`` records (what
    ``consume`` returned), which only leaves more input for the crashes.

    Raises:
        ValueError: the input is too small to reach every crash: an incarnation would find
            no batch ``c`` left (e.g. more ``after-commit`` crashes than batches).
    """
    if crashes < 0 or messages < 1 or batch < 1:
        raise ValueError("crashes >= 0, messages >= 1 and batch >= 1 are needed")
    if crashes and not points:
        raise ValueError("crash points are needed when crashes > 0")
    for p in points:
        if p not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {p!r}: one of {', '.join(CRASH_POINTS)}")
    total = -(-messages // batch)
    c = max(1, total // (crashes + 1))
    plan = [(c, points[i % len(points)]) for i in range(crashes)]
    remaining = messages
    for at, point in plan:
        if remaining <= (at - 1) * batch:
            raise ValueError(f"{messages} messages in batches of {batch} are too few for {crashes} crashes "
                             f"({', '.join(p for _, p in plan)}): an incarnation would find no batch {at} to crash in")
        remaining -= (at - 1) * batch + (batch if point == "after-commit" else 0)
    if remaining <= 0:
        raise ValueError(f"{messages} messages in batches of {batch} leave nothing after {crashes} crashes "
                         "for the final incarnation")
    return plan


@dataclass
class EosResult:
    """One ``run_eos``: the processor run to the end under a crash plan, its output audited.

    The first five fields are what ``kafkalab run eos --json`` promises: ``input`` (records in),
    ``output_read_committed`` / ``output_read_uncommitted`` (output records a consumer with that
    isolation level reads), ``duplicates`` and ``lost`` (on the read_committed view: extra
    copies, and input records missing; see ``transactions_analysis.Verdict``).

    ``aborted_reads``: records the crashed incarnations left uncommitted that a read_committed
    reader nevertheless returned (by partition and offset; Jepsen G1a); transactional mode only.
    ``uncommitted``: output records the crashed incarnations produced after their last commit
    (ledger). ``incarnations``: per process, its exit code, what its ledger counts, and
    ``first_commit_ms``, from its start (spawn) to its first commit (None if it never
    committed). ``sink``: the sqlite sink's own verdict when the program wrote one.
    ``transaction_timeout_ms``: the ``transaction.timeout.ms`` the program sets (None: not
    set as a literal). ``program``: its name; ``lab_conf``: what the harness gave it besides
    the program's own settings (``lab.conf`` of the last incarnation, and the names in
    ``lab``: group, transactional id, topics, batch).
    """

    input: int
    output_read_committed: int
    output_read_uncommitted: int
    duplicates: int
    lost: int
    mode: str
    exactly_once: bool
    duplicated_ids: int
    unexpected: int
    aborted_reads: int
    crashes: int
    crash_plan: list[tuple[int, str]]
    batch: int
    uncommitted: int
    incarnations: list[dict]
    input_topic: str
    output_topic: str
    group_id: str
    transactional_id: str | None
    ledgers: list[str]
    elapsed_ms: int
    sink: dict | None = None
    sink_path: str | None = None
    transaction_timeout_ms: int | None = None
    program: str = ""
    lab_conf: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The result as a JSON-ready dict (``kafkalab run eos --json``)."""
        return asdict(self)


def run_eos(run: TxnRun, program: Program, readers: Sequence[Program], messages: int = 500, crashes: int = 3,
            batch: int = DEFAULT_BATCH, partitions: int = 3, points: Sequence[str] | None = None,
            name: str | None = None, timeout_s: float = 60.0) -> EosResult:
    """Run the consume-transform-produce ``program`` over ``messages`` input records, SIGKILLing
    ``crashes`` incarnations at planned points (its ``lab.crash_point`` lines) and restarting it
    each time with the same ``transactional.id`` and consumer group, then audit the output
    topic as each reader program reads it.

    Args:
        run: names and cleanup (``TxnRun``); topics ``<name>-in``/``<name>-out`` are created.
        program: the processor (role ``transactions``); transactional if it sets
            ``transactional.id`` (``is_transactional``), else at-least-once.
        readers: two reader programs (role ``reader``): one read_committed, one
            read_uncommitted (``isolation_level``).
        messages: input records (flights).
        crashes: incarnations that crash; one more runs to the end.
        batch: most records per batch (= per transaction; ``lab.batch``).
        partitions: partitions of the input and output topics.
        points: crash points to cycle (default ``DEFAULT_CRASH_CYCLE[mode]``).
        name: topic/group name stem (default ``"eos-<mode>"``).
        timeout_s: longest wait for one incarnation, s.

    Returns:
        An ``EosResult``.

    Raises:
        ValueError: a crash plan that does not fit (``crash_plan``); ``after-offsets`` for an
            at-least-once program; readers not one of each isolation level.
        KafkalabError: an incarnation did not end as planned (its log tail is in the message).
    """
    mode = "transactional" if is_transactional(program) else "at-least-once"
    views = {isolation_level(r): r for r in readers}
    if set(views) != {"read_committed", "read_uncommitted"}:
        raise ValueError(f"one read_committed and one read_uncommitted reader are needed, not {sorted(views)}")
    t0 = time.monotonic()
    points = tuple(points) if points is not None else DEFAULT_CRASH_CYCLE[mode]
    plan = crash_plan(messages, batch, crashes, points)
    if mode == "at-least-once" and any(p == "after-offsets" for _, p in plan):
        raise ValueError("after-offsets is a transactional crash point; the at-least-once loop commits offsets in one step")
    name = name or f"eos-{mode}"
    tin, tout = run.topic(f"{name}-in"), run.topic(f"{name}-out")
    group = run.group(name)
    tid = run.transactional_id(name) if mode == "transactional" else None
    admin.create_topics({tin: partitions, tout: partitions})
    ids = produce_input(tin, messages)
    sink_path = str(run.dir / f"{name}-sink.db")
    ledgers, incs = [], []
    for i, (at, point) in enumerate([*plan, (None, "after-produce")]):
        options = ProcessorOptions(group_id=group, transactional_id=tid, partitions=tuple(range(partitions)),
                                   batch=batch, crash_at=at, crash_point=point, sink=sink_path,
                                   max_runtime_s=timeout_s)
        started_ms = int(time.time() * 1000)
        p, ledger = run.start(program, "transactions", f"{name}-{i}", [tin, tout], options=asdict(options))
        rc = p.wait(timeout_s + 15)
        expected = -signal.SIGKILL if at is not None else 0
        if rc != expected:
            raise KafkalabError(f"{name}-{i} exited {rc}, expected {expected} "
                                f"({'its planned SIGKILL at ' + point if at else 'the end of the input'}):\n{p.log_tail()}")
        ledgers.append(ledger)
        incs.append((f"{name}-{i}", rc, started_ms))
    from ..ledger import read_events

    events = [e for path in ledgers for e in read_events(path)]
    by_name = {inc.name: inc for inc in ta.incarnations(events)}
    read = read_views(run, [views["read_committed"], views["read_uncommitted"]], tout)
    rc_reads, ru_reads = read[views["read_committed"].name], read[views["read_uncommitted"].name]
    verdict = ta.audit_ids(ids, (record_id_of(r.value.encode()) for r in rc_reads))
    left = {o for inc in by_name.values() for o in inc.uncommitted_offsets}
    aborted_reads = len(left & {(r.partition, r.offset) for r in rc_reads}) if mode == "transactional" else 0
    sink = None
    if os.path.exists(sink_path):
        sink = ta.audit_ids(ids, (r for r, _ in sink_rows(sink_path))).to_json()
    first_commit = {}
    for e in events:
        if e.kind == "committed" and e.client_id not in first_commit:
            first_commit[e.client_id] = e.ts_ms
    incarnations = []
    for (n, rc, started_ms) in incs:
        inc = by_name.get(n, ta.Incarnation(n))
        incarnations.append({"name": n, "returncode": rc, "consumed": inc.consumed, "produced": inc.produced,
                             "transactions": inc.transactions, "uncommitted": inc.uncommitted,
                             "sink_writes": inc.sink_writes, "uncommitted_sink_writes": inc.uncommitted_sink_writes,
                             "first_commit_ms": first_commit[n] - started_ms if n in first_commit else None})
    timeout = program_setting(program, "transaction.timeout.ms")
    return EosResult(
        input=verdict.input, output_read_committed=len(rc_reads), output_read_uncommitted=len(ru_reads),
        duplicates=verdict.duplicates, lost=verdict.lost, mode=mode, exactly_once=verdict.exactly_once,
        duplicated_ids=verdict.duplicated_ids, unexpected=verdict.unexpected, aborted_reads=aborted_reads,
        crashes=crashes, crash_plan=plan, batch=batch, uncommitted=sum(i["uncommitted"] for i in incarnations),
        incarnations=incarnations, input_topic=tin, output_topic=tout, group_id=group, transactional_id=tid,
        ledgers=ledgers, elapsed_ms=int((time.monotonic() - t0) * 1000), sink=sink,
        sink_path=sink_path if sink else None, transaction_timeout_ms=int(timeout) if timeout else None,
        program=program.name,
        lab_conf={**lab_conf(incs[-1][0]), "lab.group_id": group, "lab.transactional_id": tid,
                  "lab.input_topic": tin, "lab.output_topic": tout, "lab.batch": batch},
    )


def run_eos_concurrently(run: TxnRun, *configs: dict) -> list[EosResult]:
    """``run_eos(run, **config)`` for each config at the same time (one thread each; the
    processors are separate processes on separate topics, so the runs do not interact).
    Returns the results in the order given; the first exception is raised after all ended."""
    with ThreadPoolExecutor(max_workers=max(1, len(configs)), thread_name_prefix="eos") as pool:
        futures = [pool.submit(run_eos, run, **c) for c in configs]
        return [f.result() for f in futures]


def incarnations_table(result: EosResult) -> "pd.DataFrame":
    """One row per incarnation: its planned crash, exit code and what the ledger says it did."""
    import pandas as pd

    plan = [f"batch {at}, {p}" for at, p in result.crash_plan] + ["(none: runs to the end)"]
    rows = [{**inc, "planned crash": plan[i]} for i, inc in enumerate(result.incarnations)]
    return pd.DataFrame(rows).set_index("name")


# ----------------------------------------------------------------------------- the CLI


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("eos")
@click.option("--mode", type=click.Choice(list(MODES)), default="transactional", show_default=True,
              help="transactional: notebook 05's program `processor`; at-least-once: its program `at_least_once` "
                   "(the same loop committing offsets after producing).")
@click.option("--messages", type=click.IntRange(1, 100_000), default=500, show_default=True, help="Input records.")
@click.option("--crashes", type=click.IntRange(0, 50), default=3, show_default=True,
              help="Incarnations SIGKILLed at planned points (one more runs to the end).")
@click.option("--batch", type=click.IntRange(1, 10_000), default=DEFAULT_BATCH, show_default=True,
              help="Most records per batch (= per transaction).")
@click.option("--partitions", type=click.IntRange(1, 12), default=3, show_default=True,
              help="Partitions of the input and output topics.")
@click.option("--point", "points", multiple=True, type=click.Choice(list(CRASH_POINTS)),
              help="Crash points to cycle through (repeat); default depends on --mode.")
@click.option("--keep", is_flag=True, help="Keep this run's topics (for a look with Spark or kafka-dump-log).")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def cli_command(mode: str, messages: int, crashes: int, batch: int, partitions: int, points: tuple[str, ...],
                keep: bool, as_json: bool) -> None:
    """The consume-transform-produce processor under planned SIGKILLs, audited:
    output set = input set, no duplicates (read_committed view). Runs the programs of
    notebooks/05_transactions.ipynb as saved (the processor, and its `reader` with
    isolation.level read_committed and, edited as the notebook does, read_uncommitted)."""
    try:
        crash_plan(messages, batch, crashes, points or DEFAULT_CRASH_CYCLE[mode])
        if mode == "at-least-once" and "after-offsets" in points:
            raise ValueError("--point after-offsets is a transactional crash point")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    runscope.require_for_cli()
    run = TxnRun()
    try:
        program = programs.from_notebook(NOTEBOOK, MODES[mode])
        reader = programs.from_notebook(NOTEBOOK, "reader")
        readers = (reader, uncommitted_reader(reader))
        show_programs(program, *readers)
        r = run_eos(run, program, readers, messages=messages, crashes=crashes,
                    batch=batch, partitions=partitions, points=points or None)
    finally:
        if keep:
            run.keep()
        else:
            run.cleanup()
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"{mode}: {r.input} records in, {crashes} crashes ({', '.join(p for _, p in r.crash_plan) or 'none'})")
    click.echo(f"  output read_committed {r.output_read_committed}, read_uncommitted {r.output_read_uncommitted}")
    click.echo(f"  duplicates {r.duplicates}, lost {r.lost}, aborted reads {r.aborted_reads}: "
               f"{'exactly once' if r.exactly_once else 'NOT exactly once'} ({r.elapsed_ms} ms)")
