"""Offset commits: when a consumer crash loses a record, and when it repeats one.

A consumer *commits* an offset to tell its group "every record below this offset is done";
the group coordinator keeps it in the internal topic ``__consumer_offsets`` and a restarted
consumer resumes from it. Where the committed offset stands at the moment of a crash decides
everything (Kafka documentation, Design > "Consumer Position" and "Offset management"):

- records the consumer had been *handed* but not yet processed, below the committed offset,
  are never read again: **lost writes** (Jepsen's term);
- records it had already processed, at or above the committed offset, are read and
  processed again: **duplicates**.

One run of this experiment (``RunConfig``) produces ``messages`` records to a fresh topic
(from the calling process), starts a consumer *process* that processes each record (``process_ms`` of simulated work,
then a row in sqlite: a real side effect) and SIGKILLs itself right after its
``crash_after``-th record, restarts it with the same ``group.instance.id`` (KIP-345 static
membership: the restart takes over at once, no session timeout to wait out), drains the
topic and counts what was lost and what was processed twice. The outcome is set by
configuration, not by luck: consume in batches of ``batch``, ``auto.commit.interval.ms``
far shorter than the time spent processing one batch, and an exact crash point.

Commit modes, librdkafka 2.16 via confluent-kafka 2.16.1 (librdkafka CONFIGURATION.md:
``enable.auto.commit``, ``enable.auto.offset.store``, ``auto.commit.interval.ms``):

======================  ===============================================================
``auto``                librdkafka's defaults: the offset of a record is *stored* when
                        ``consume()`` hands it to the application, and a background timer
                        commits stored offsets every ``auto.commit.interval.ms``
``store-after-process`` ``enable.auto.offset.store=false``; ``store_offsets()`` after each
                        processed record; the timer commits (librdkafka's at-least-once recipe)
``sync-per-message``    auto-commit off; ``commit(message, asynchronous=False)`` after each
``async``               auto-commit off; ``commit(message, asynchronous=True)`` after each
======================  ===============================================================

With ``client="java"`` the consumer is Apache Kafka's own Java ``KafkaConsumer``
(kafka-clients 4.4.0, classic group protocol, the default in 4.4), a small program in
``kafka/src`` that ``make jars`` compiles (``JAVA_CLASS``): ``auto``
(``enable.auto.commit=true``: ``ConsumerCoordinator.poll`` commits, inside the *next*
``poll()``, the positions reached by the previous one), ``sync-per-message``
(``commitSync(Map.of(tp, offset + 1))``) and ``commit-sync-no-args`` (``commitSync()`` with
no argument after each record, as article 002's snippet does: it commits the position of
the whole last ``poll()``, not the record), and ``commit-async-no-args`` (``commitAsync()``
after each record, article 002's other snippet: the same positions, without waiting).

The crash point (``crash_point``): ``after-process`` kills the consumer right after the
side effect of its K-th record, before that record's offset is stored or committed (the
worst case for at-least-once modes); ``after-commit`` right after the store or commit call
returned, or in ``auto`` mode (no call of its own) once the group coordinator reports as
committed what librdkafka stored on hand-over (``kafkalab.worker``): the timer's commit seen,
not raced.

Notebook ``03_offset_commit.ipynb`` and ``kafkalab run offset-commit`` call the same code
and run the same client programs. Each librdkafka mode is a program written in the notebook,
a ``%%program`` cell (``kafkalab.programs``; ``MODE_PROGRAMS`` names them): plain
confluent-kafka code with its settings, its loop and its commit written out, plus the lab's
instruments (``kafkalab.instruments.consumer``: ledger, simulated work, crash points).
``RunConfig.program`` is the program a run runs (by default the notebook's, read from the
saved notebook); the harness runs it as it is in a worker process (``worker.ProgramSpec``)
and adds only the run's addresses and names (``worker.lab_conf``). The Java consumer runs
through the same entry point (``worker.ExecSpec``), so both die with the notebook.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import click
from confluent_kafka import Producer

from .. import admin, config, coordinators, java_api, programs, runscope, worker, workloads
from ..data import workload_record
from ..instruments import consumer as consumer_instruments
from ..ledger import Ledger, now_ms, read_events
from .offset_commit_analysis import OffsetCommitResult, end_offsets, last_batch, read_sink, summarize, verdicts
from ..errors import KafkalabError, WaitTimeout
from ..runscope import RunScope
from ..waiting import wait_until

#: librdkafka commit modes (module docstring).
LIBRDKAFKA_MODES: tuple[str, ...] = ("auto", "store-after-process", "sync-per-message", "async")
#: Java KafkaConsumer commit modes (module docstring).
JAVA_MODES: tuple[str, ...] = ("auto", "sync-per-message", "commit-sync-no-args", "commit-async-no-args")
CLIENTS: tuple[str, ...] = ("librdkafka", "java")
#: Where the consumer dies: at the program's ``lab.crash_point("after-process", ...)`` line (right
#: after the K-th side effect) or its ``"after-commit"`` line (``kafkalab.instruments.consumer``).
CRASH_POINTS: tuple[str, ...] = consumer_instruments.CRASH_POINTS

#: ``session.timeout.ms`` of every consumer here: the broker's minimum
#: (``group.min.session.timeout.ms``, default 6000 ms), so a static member that stopped is
#: gone from its group 6 s later and the group can be deleted.
SESSION_TIMEOUT_MS = 6000

#: The notebook whose ``%%program`` cells are this experiment's librdkafka consumers.
NOTEBOOK = "03_offset_commit"
#: The program of each librdkafka commit mode in ``NOTEBOOK`` (``dedupe``: ``DEDUPE_PROGRAM``).
MODE_PROGRAMS: dict[str, str] = {"auto": "auto_commit", "store-after-process": "store_after_process",
                                 "sync-per-message": "commit_sync", "async": "commit_async"}
#: The store-after-process consumer whose side effect is keyed by record id (``INSERT OR IGNORE``).
DEDUPE_PROGRAM = "dedupe"
#: The consumer configured with nothing about commits (``DefaultsProbe``).
DEFAULTS_PROGRAM = "configured_with_nothing"


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class RunConfig:
    """One crash-and-restart run. Times in ms.

    Attributes:
        mode: commit mode, one of ``LIBRDKAFKA_MODES`` or (``client="java"``) ``JAVA_MODES``.
        client: ``"librdkafka"`` (confluent-kafka) or ``"java"`` (kafka-clients 4.4.0).
        messages: records produced before the consumer starts.
        crash_after: the consumer dies at its crash point on its ``crash_after``-th processed
            record.
        batch: ``max.poll.records`` of the Java consumer. A librdkafka program sets its own
            (``consume(num_messages=...)``, on screen).
        process_ms: simulated work per record in the crashing consumer.
        auto_commit_interval_ms: ``auto.commit.interval.ms`` of the Java consumer. A librdkafka
            program sets its own.
        crash_point: one of ``CRASH_POINTS``: which of the program's ``lab.crash_point`` lines
            kills it.
        dedupe: the run is the deduplicating consumer: its sqlite table is keyed by record id
            (``INSERT OR IGNORE``), article 000's primary-key idea (librdkafka only: the Java
            consumer has no sqlite driver). Selects ``DEDUPE_PROGRAM`` and its verdict.
        program: the ``kafkalab.programs.Program`` a librdkafka run runs (a notebook cell, or
            an edited copy); None: the notebook's program for ``mode`` (``MODE_PROGRAMS``).
        partitions: partitions of the topic (records are spread round-robin).
        drain_process_ms: work per record after the restart; 0 makes the drain's
            records/s a measure of what the commit mode itself costs.
        label: name in tables and plots (default: ``mode``, prefixed ``java`` and suffixed
            ``+ dedupe`` when they apply).

    Raises:
        KafkalabError: an invalid combination (the message says which).
    """

    mode: str = "auto"
    client: str = "librdkafka"
    messages: int = 300
    crash_after: int = 30
    batch: int = 20
    process_ms: float = 25.0
    auto_commit_interval_ms: int = 50
    crash_point: str = "after-process"
    dedupe: bool = False
    partitions: int = 3
    drain_process_ms: float = 0.0
    label: str | None = None
    group_protocol: str = "classic"
    program: Any = None

    def __post_init__(self) -> None:
        if self.client not in CLIENTS:
            raise KafkalabError(f"client must be one of {', '.join(CLIENTS)}, not {self.client!r}")
        modes = LIBRDKAFKA_MODES if self.client == "librdkafka" else JAVA_MODES
        if self.mode not in modes:
            raise KafkalabError(f"mode {self.mode!r} is not a {self.client} commit mode; choose one of {', '.join(modes)}")
        if self.crash_point not in CRASH_POINTS:
            raise KafkalabError(f"crash_point must be one of {', '.join(CRASH_POINTS)}, not {self.crash_point!r}")
        if self.messages < 1 or self.batch < 1 or self.partitions < 1:
            raise KafkalabError("messages, batch and partitions must be at least 1")
        if not 1 <= self.crash_after <= self.messages:
            raise KafkalabError(f"crash_after must be between 1 and messages ({self.messages}), not {self.crash_after}")
        if self.auto_commit_interval_ms < 1:
            raise KafkalabError("auto_commit_interval_ms must be at least 1 (0 disables auto-commit in both clients)")
        if self.process_ms < 0 or self.drain_process_ms < 0:
            raise KafkalabError("process times cannot be negative")
        if self.dedupe and self.client != "librdkafka":
            raise KafkalabError("dedupe needs the sqlite sink, which only the librdkafka consumer writes")
        if self.group_protocol not in ("classic", "consumer"):
            raise KafkalabError(f"group_protocol must be classic or consumer, not {self.group_protocol!r}")
        if self.group_protocol == "consumer" and self.client != "java":
            raise KafkalabError("group_protocol=consumer is run for the Java consumer only (notebook 03, section 5)")
        if self.program is not None:
            if self.client != "librdkafka":
                raise KafkalabError("a program is run for the librdkafka consumer; the Java consumer is "
                                    "kafka/src/main/java/kafkalab/clients/OffsetCommitConsumer.java")
            if not isinstance(self.program, programs.Program):
                raise KafkalabError(f"program must be a kafkalab.programs.Program (a %%program cell), "
                                    f"not {type(self.program).__name__}")

    @property
    def default_program(self) -> str:
        """Name of the notebook's program for this run's mode (``MODE_PROGRAMS``, ``DEDUPE_PROGRAM``)."""
        return DEDUPE_PROGRAM if self.dedupe else MODE_PROGRAMS[self.mode]

    def resolved_program(self) -> "programs.Program":
        """``program``, or the notebook's program for ``mode`` as saved in ``NOTEBOOK``.

        Raises:
            ProgramError: the notebook has no such program.
        """
        return self.program if self.program is not None else programs.from_notebook(NOTEBOOK, self.default_program)

    @property
    def name(self) -> str:
        """``label`` or ``"auto"``, ``"java auto"``, ``"store-after-process + dedupe"``...; a run
        of a program other than its mode's is named after the program."""
        if self.label:
            return self.label
        if self.program is not None and self.program.name != self.default_program:
            return self.program.name
        name = f"java {self.mode}" if self.client == "java" else self.mode
        if self.group_protocol == "consumer":
            name += " (KIP-848)"
        return name + (" + dedupe" if self.dedupe else "")


#: How each run commits, in one line (tables in notebook 03).
MODE_DESCRIPTIONS: dict[tuple[str, str], str] = {
    ("librdkafka", "auto"): "enable.auto.commit + enable.auto.offset.store (librdkafka defaults): offset stored "
                            "when consume() hands the record over, a background timer commits",
    ("librdkafka", "store-after-process"): "enable.auto.offset.store=false, store_offsets() after processing, "
                                           "the timer commits",
    ("librdkafka", "sync-per-message"): "enable.auto.commit=false, commit(message, asynchronous=False) after each",
    ("librdkafka", "async"): "enable.auto.commit=false, commit(message, asynchronous=True) after each",
    ("java", "auto"): "enable.auto.commit=true: the next poll() commits what the previous polls returned",
    ("java", "sync-per-message"): "commitSync(Map.of(tp, offset + 1)) after each record",
    ("java", "commit-async-no-args"): "commitAsync() after each record (article 002's other snippet): commits "
                                      "the position of the whole last poll(), without waiting",
    ("java", "commit-sync-no-args"): "commitSync() after each record (article 002's snippet): commits the "
                                     "position of the whole last poll()",
}


def describe_mode(cfg: RunConfig) -> str:
    """One line: how run ``cfg`` commits (``MODE_DESCRIPTIONS``), with ``dedupe`` noted."""
    text = MODE_DESCRIPTIONS[(cfg.client, cfg.mode)]
    return text + ("; sqlite keyed by record id (INSERT OR IGNORE)" if cfg.dedupe else "")


def java_conf(cfg: RunConfig, group_id: str, client_id: str, instance_id: str) -> dict[str, str]:
    """The Java consumer's properties. Java defaults (ConsumerConfig, kafka-clients 4.3):
    ``enable.auto.commit=true``, ``auto.commit.interval.ms=5000``, ``max.poll.records=500``,
    ``group.protocol=classic``. With ``group.protocol=consumer`` (KIP-848) the client refuses
    ``session.timeout.ms`` (the broker's ``group.consumer.session.timeout.ms`` applies), and
    both incarnations are dynamic members: a KIP-848 coordinator refuses a static member whose
    ``group.instance.id`` a crashed member still holds (UNRELEASED_INSTANCE_ID, seen here), so
    the restart waits for the crashed member's session to expire instead."""
    conf = {
        "bootstrap.servers": config.bootstrap_servers(),
        "group.id": group_id,
        "client.id": client_id,
        "group.instance.id": instance_id,
        "group.protocol": cfg.group_protocol,
        "session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "true" if cfg.mode == "auto" else "false",
        "auto.commit.interval.ms": str(cfg.auto_commit_interval_ms),
        "max.poll.records": str(cfg.batch),
    }
    if cfg.group_protocol == "consumer":
        del conf["session.timeout.ms"], conf["group.instance.id"]
    return conf


# ----------------------------------------------------------------------------- the Java consumer

#: Apache Kafka's Java consumer, driven like the Python one: the same ledger lines, the same
#: crash points. Its source is ``kafka/src/main/java/kafkalab/clients/OffsetCommitConsumer.java``;
#: ``make jars`` compiles it against the pinned kafka-clients into ``java_api.CLIENTS_JAR``.
JAVA_CLASS = "kafkalab.clients.OffsetCommitConsumer"


def spawn_java_consumer(cfg: RunConfig, name: str, run_id: str, ledger: Path, topic: str, group_id: str,
                        instance_id: str, crash_after: int | None, process_ms: float) -> workloads.Worker:
    """Start the Java consumer (``JAVA_CLASS``) as a process; ``crash_after`` None drains the
    topic and exits 0 once its position reaches the end of every assigned partition.

    Raises:
        JarsMissing: ``make jars`` has not built the consumer (``java_api.program_classpath``).
    """
    props = ledger.with_suffix(".properties")
    props.parent.mkdir(parents=True, exist_ok=True)
    props.write_text("".join(f"{k}={v}\n" for k, v in java_conf(cfg, group_id, name, instance_id).items()))
    argv = java_api.java_command(java_api.program_classpath(JAVA_CLASS), JAVA_CLASS, str(props), run_id, topic,
                                 str(ledger), cfg.mode, str(int(process_ms)), str(crash_after or 0), cfg.crash_point)
    return workloads.spawn(worker.ExecSpec(name, run_id, str(ledger), argv))


def _java_defaults_argv() -> list[str]:
    return java_api.java_command(java_api.program_classpath(JAVA_CLASS), JAVA_CLASS, "--defaults", heap_mb=64)


def _java_defaults_result(returncode: int, stdout: str, stderr: str) -> dict[str, str]:
    if returncode != 0:
        raise KafkalabError(f"the Java defaults probe exited {returncode}:\n{stderr.strip()[-2000:]}")
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def java_consumer_defaults(timeout_s: float = 60.0) -> dict[str, str]:
    """The Java consumer's defaults as kafka-clients 4.4.0 itself reports them: a
    ``ConsumerConfig`` built with nothing but bootstrap servers, a ``group.id`` (without one,
    ConsumerConfig switches auto-commit off) and deserializers, read back
    (``enable.auto.commit``, ``auto.commit.interval.ms``, ``max.poll.records``,
    ``group.protocol``, ``kafka-clients``: the jar's version, and
    ``enable.auto.commit.without.group.id``: the same without a ``group.id``).

    Raises:
        JarsMissing: ``make jars`` has not built the consumer (``java_api.program_classpath``).
        KafkalabError: the JVM failed (its stderr in the message).
    """
    cp = subprocess.run(_java_defaults_argv(), capture_output=True, text=True, timeout=timeout_s)
    return _java_defaults_result(cp.returncode, cp.stdout, cp.stderr)


# ----------------------------------------------------------------------------- running


@dataclass
class CrashSnapshot:
    """A crashed consumer, before the restart (``CrashAndRestart.at_crash``).

    Attributes:
        handed_over: records ``consume``/``poll`` returned to it.
        processed: records whose side effect it ran.
        last_batch, processed_from_last_batch: size of its last batch, and how much of it
            it processed.
        sink_rows: rows in its sqlite sink (None for the Java consumer).
        committed: partition -> the group's committed offset, read after the crash.
        in_hand_ids: ids of the records handed over but not processed (sorted).
    """

    label: str
    handed_over: int
    processed: int
    last_batch: int
    processed_from_last_batch: int
    sink_rows: int | None
    committed: dict[int, int]
    in_hand_ids: list[str]

    @property
    def in_hand(self) -> int:
        """Records handed over but not processed when it died."""
        return self.handed_over - self.processed


@dataclass
class _Run:
    cfg: RunConfig
    run_id: str
    topic: str
    group_id: str
    dir: Path
    procs: list = field(default_factory=list)
    acked: list = field(default_factory=list)
    committed_at_crash: dict = field(default_factory=dict)
    crash_exit: int | None = None
    crashed_ledger: Path | None = None
    drained_ledger: Path | None = None
    program: Any = None

    @property
    def sink(self) -> Path | None:
        return self.dir / "sink.db" if self.cfg.client == "librdkafka" else None

    @property
    def instance_id(self) -> str:
        return f"{self.group_id}-instance-0"


class CrashAndRestart:
    """Runs of the experiment side by side, one step at a time, each with its own topic,
    group, producer and consumer processes (names unique per run). Steps run the processes
    of every run concurrently. A context manager; ``close()`` kills what still runs and
    deletes the topics and groups.

    Example::

        with CrashAndRestart([RunConfig("auto"), RunConfig("store-after-process")]) as lab:
            lab.produce(); lab.crash(); lab.restart()
            results = lab.results()

    Processes are started from the calling thread (see ``workloads.Worker``).
    """

    def __init__(self, configs: Sequence[RunConfig]):
        if not configs:
            raise KafkalabError("no run configured")
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise KafkalabError(f"run labels must differ: {names}")
        if any(c.client == "java" for c in configs):
            java_api.program_classpath(JAVA_CLASS)  # fail at once, before any topic exists, if `make jars` has not built it
        self.runs: dict[str, _Run] = {}
        self.scope = RunScope("offset-commit")  # cleanup; each run names its own topic and group
        for cfg in configs:
            run = runscope.run_id()
            topic = self.scope.add_topic(f"offset-commit-{run}")
            prog = cfg.resolved_program() if cfg.client == "librdkafka" else None
            self.runs[cfg.name] = _Run(cfg, run, topic, self.scope.add_group(f"{topic}-group"), workloads.run_dir(run),
                                       program=prog)
        self.stage = "new"
        self.closed = False
        self.scope.on_cleanup(self._kill_processes)
        admin.create_topics({r.topic: r.cfg.partitions for r in self.runs.values()})

    def __enter__(self) -> "CrashAndRestart":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, label: str) -> _Run:
        return self.runs[label]

    _STEPS = ("new", "produce", "crash", "restart")

    def _expect(self, step: str) -> None:
        """Steps run once each, in the order produce, crash, restart."""
        if self.closed:
            raise KafkalabError("this experiment is closed")
        before = self._STEPS[self._STEPS.index(step) - 1]
        if self.stage != before:
            done = "nothing yet" if self.stage == "new" else f"{self.stage}() last"
            raise KafkalabError(f"{step}() runs right after {before}() ({done})" if before != "new"
                                else f"{step}() runs first, once ({done})")
        self.stage = step

    def produce(self, timeout_s: float = 60.0) -> None:
        """Produce every run's records from this process (one confluent-kafka producer for
        all runs, with librdkafka's defaults: ``acks=all``, CONFIGURATION.md) and wait for
        every acknowledgement. Record ``i`` of a run goes to partition ``i % partitions``; its
        value is a flight id, as ``kafkalab.worker``'s producer sends them. Each run's
        ``producer-0.jsonl`` ledger gets a ``produced`` and an ``acked`` event per record.

        Raises:
            KafkalabError: a record was not acknowledged within ``timeout_s``.
        """
        self._expect("produce")
        producer = Producer({"bootstrap.servers": config.bootstrap_servers(), "client.id": "producer-0",
                             "log_level": 3})
        books = {name: Ledger(r.dir / "producer-0.jsonl", r.run_id) for name, r in self.runs.items()}
        try:
            for name, r in self.runs.items():
                book = books[name]

                def report(err, msg, book=book, r=r) -> None:
                    r.acked.append(book.record(
                        "acked", topic=r.topic, partition=msg.partition(), client_id="producer-0",
                        offset=msg.offset() if err is None else None, key=msg.key().decode(),
                        value=msg.value().decode(), error=str(err) if err else None))

                for i in range(r.cfg.messages):
                    f, value = workload_record(i)
                    book.record("produced", topic=r.topic, partition=i % r.cfg.partitions, key=f.key, value=value,
                                client_id="producer-0")
                    producer.produce(r.topic, key=f.key.encode(), value=value.encode(), partition=i % r.cfg.partitions,
                                     on_delivery=report)
                    producer.poll(0)
            left = producer.flush(timeout_s)
        finally:
            for book in books.values():
                book.close()
        for name, r in self.runs.items():
            good = [e for e in r.acked if e.error is None]
            if left or len(good) != r.cfg.messages:
                errors = sorted({e.error for e in r.acked if e.error})
                raise KafkalabError(f"{name}: {len(good)}/{r.cfg.messages} records acknowledged "
                                    f"({left} still in flight after {timeout_s:.0f} s); errors: {errors[:3]}")

    def _spawn(self, r: _Run, name: str, crash_after: int | None, process_ms: float) -> workloads.Worker:
        ledger = r.dir / f"{name}.jsonl"
        if r.cfg.client == "java":
            p = spawn_java_consumer(r.cfg, name, r.run_id, ledger, r.topic, r.group_id, r.instance_id,
                                    crash_after, process_ms)
        else:
            prog = r.program
            p = workloads.spawn(worker.ProgramSpec(
                name, r.run_id, str(ledger), "consumer", prog.name, prog.source,
                conf=worker.lab_conf(name, r.group_id), instance_id=r.instance_id, topics=[r.topic],
                options=dict(process_ms=process_ms, crash_after=crash_after, crash_point=r.cfg.crash_point,
                             sink=str(r.sink))))
        r.procs.append(p)
        return p

    def crash(self, timeout_s: float = 60.0) -> None:
        """Start every run's consumer; each dies right after its ``crash_after``-th record.
        Then read each group's committed offsets (``committed_at_crash``).

        Raises:
            WaitTimeout: a consumer did not reach its crash point in ``timeout_s``.
            KafkalabError: a consumer exited some other way (its log is in the message).
        """
        self._expect("crash")
        procs = {name: self._spawn(r, "consumer-0", r.cfg.crash_after, r.cfg.process_ms) for name, r in self.runs.items()}
        deadline = time.monotonic() + timeout_s
        for name, p in procs.items():
            r = self.runs[name]
            rc = p.wait(max(0.1, deadline - time.monotonic()))
            expected = 137 if r.cfg.client == "java" else -signal.SIGKILL
            if rc != expected:
                raise KafkalabError(f"{name}: the consumer exited {rc}, not by its crash ({expected}); "
                                    f"its log:\n{p.log_tail()}")
            r.crash_exit = rc
            r.crashed_ledger = p.ledger
            r.committed_at_crash = coordinators.committed_offsets(r.group_id)

    def describe(self, label: str) -> coordinators.GroupDescribe:
        """``kafka-consumer-groups --describe`` of run ``label``'s group, as it stands now."""
        return coordinators.describe_group_offsets(self.runs[label].group_id)

    def at_crash(self, label: str) -> CrashSnapshot:
        """What run ``label``'s crashed consumer left behind (after ``crash``): records handed
        to it, records it processed, rows in its sink, and the group's committed offsets."""
        r = self.runs[label]
        if r.crashed_ledger is None:
            raise KafkalabError(f"run {label!r} has not crashed yet: call crash() first")
        events = read_events(r.crashed_ledger)
        batch, batch_done = last_batch(events)
        rows = read_sink(r.sink)
        consumed = {e.value for e in events if e.kind == "consumed" and e.offset is not None}
        done = {e.value for e in events if e.kind == "processed"}
        return CrashSnapshot(label, sum(1 for e in events if e.kind == "consumed" and e.offset is not None),
                             sum(1 for e in events if e.kind == "processed"), len(batch), len(batch_done),
                             None if rows is None else len(rows),
                             dict(r.committed_at_crash), sorted(consumed - done))

    def restart(self, timeout_s: float = 60.0, one_at_a_time: bool = False) -> None:
        """Restart every run's consumer with the same ``group.instance.id``, no crash point and
        ``drain_process_ms`` of work, and let it drain the topic: until the group's committed
        offsets reach the end of every partition (then SIGTERM: the consumer finishes the batch
        in hand and closes), or, for the Java consumer, until it exits by itself.

        Args:
            timeout_s: for all runs together (``one_at_a_time``: for each run).
            one_at_a_time: drain the runs one after the other, so each drain's records/s is
                measured without the others competing for the CPU.

        Raises:
            WaitTimeout: not drained within ``timeout_s`` (the message names the run).
            KafkalabError: a restarted consumer died or exited with an error.
        """
        self._expect("restart")
        if one_at_a_time:
            for name, r in self.runs.items():
                self._finish_drain(name, self._spawn(r, "consumer-1", None, r.cfg.drain_process_ms),
                                   time.monotonic() + timeout_s)
            return
        procs = {name: self._spawn(r, "consumer-1", None, r.cfg.drain_process_ms) for name, r in self.runs.items()}
        deadline = time.monotonic() + timeout_s
        for name, p in procs.items():
            self._finish_drain(name, p, deadline)

    def _finish_drain(self, name: str, p: workloads.Worker, deadline: float) -> None:
        r = self.runs[name]
        ends = end_offsets(r.acked)
        left = max(0.1, deadline - time.monotonic())
        if r.cfg.client == "java":
            rc = p.wait(left)
            if rc != 0:
                raise KafkalabError(f"{name}: the restarted Java consumer exited {rc}; its log:\n{p.log_tail()}")
        else:
            def drained() -> bool:
                if not p.alive:
                    raise KafkalabError(f"{name}: the restarted consumer died; its log:\n{p.log_tail()}")
                return coordinators.committed_offsets(r.group_id) == ends

            wait_until(drained, timeout_s=left, interval_s=0.05,
                       what=f"run {name!r}: committed offsets of {r.group_id} at the end of every partition {ends}",
                       on_timeout=lambda: f"committed now: {coordinators.committed_offsets(r.group_id)}")
            rc = p.terminate(30)
            if rc != 0:
                raise KafkalabError(f"{name}: the restarted consumer exited {rc} on SIGTERM; its log:\n{p.log_tail()}")
        r.drained_ledger = p.ledger

    def results(self) -> list[OffsetCommitResult]:
        """One ``OffsetCommitResult`` per run, in configuration order (after ``restart``)."""
        if self.stage != "restart":
            raise KafkalabError(f"results() needs restart() first ({self.stage}() last)")
        out = []
        for r in self.runs.values():
            crashed = read_events(r.crashed_ledger)
            drained = read_events(r.drained_ledger)
            ledgers = [str(r.dir / "producer-0.jsonl"), str(r.crashed_ledger), str(r.drained_ledger)]
            cfg = replace(r.cfg, program=r.program) if r.program is not None else r.cfg  # the program that ran
            out.append(summarize(cfg, r.run_id, r.topic, r.group_id, r.acked, crashed, drained,
                                 r.committed_at_crash, r.sink, r.crash_exit, ledgers))
        return out

    def sink_rows(self, label: str) -> list[tuple[str, int, int]]:
        """Rows of run ``label``'s sqlite table ``processed``: ``(record_id, partition, offset)``,
        one per applied side effect (empty for the Java consumer, which writes none)."""
        return read_sink(self.runs[label].sink) or []

    def ledgers(self) -> list[str]:
        """Every ledger file of every run (producer, crashed and restarted consumers)."""
        return [str(p) for r in self.runs.values() for p in sorted(r.dir.glob("*.jsonl"))]

    def close(self, group_timeout_s: float = 20.0) -> None:
        """Kill every process still running, delete the groups (once their static member has
        timed out: ``SESSION_TIMEOUT_MS`` after it stopped), then the topics. Idempotent.

        Raises:
            WaitTimeout: a group could still not be deleted after ``group_timeout_s`` (it stays
                registered: ``kafkalab.runscope.cleanup_all`` retries it, at exit too).
        """
        if self.closed and self.scope.cleaned:
            return
        self.scope.cleanup(group_timeout_s=group_timeout_s)
        if self.scope.pending_groups:
            raise WaitTimeout(f"timed out after {group_timeout_s:.1f} s waiting for consumer groups "
                              f"{self.scope.pending_groups} deleted")

    def _kill_processes(self) -> None:
        self.closed = True
        for r in self.runs.values():
            for p in r.procs:
                if p.alive:
                    p.kill()


class DefaultsProbe:
    """A librdkafka consumer configured with *nothing* about commits (librdkafka's defaults:
    ``enable.auto.commit=true``, ``enable.auto.offset.store=true``,
    ``auto.commit.interval.ms=5000``), in its own group on an existing topic: the program
    ``DEFAULTS_PROGRAM`` of the notebook (or ``program``). It is handed records and never
    calls ``store_offsets`` or ``commit``: whatever its group commits, the defaults committed. A process, started at once; ``observe`` waits for its first commit.
    Alongside, a JVM reads the Java consumer's defaults (``java_consumer_defaults``).

    Source: librdkafka CONFIGURATION.md (2.16), ``enable.auto.commit``,
    ``enable.auto.offset.store``, ``auto.commit.interval.ms``.
    """

    def __init__(self, topic: str, program: "programs.Program | None" = None):
        self.scope = RunScope("defaults")  # cleanup of the probe's group
        self.run_id = self.scope.run_id
        self.topic = topic
        self.group_id = self.scope.add_group(f"{topic}-defaults-{self.run_id}")
        self.dir = workloads.run_dir(self.run_id)
        self.program = program or programs.from_notebook(NOTEBOOK, DEFAULTS_PROGRAM)
        conf = worker.lab_conf("defaults-probe", self.group_id)  # a dynamic member, default session
        spec = worker.ProgramSpec("defaults-probe", self.run_id, str(self.dir / "defaults-probe.jsonl"), "consumer",
                                  self.program.name, self.program.source, conf=conf, topics=[topic])
        self.started_ms = now_ms()
        self.proc = workloads.spawn(spec)
        self.java_out = self.dir / "java-defaults.out"
        self.java = workloads.spawn(worker.ExecSpec("java-defaults", self.run_id, str(self.dir / "java-defaults.jsonl"),
                                                    _java_defaults_argv(), stdout=str(self.java_out)))
        self.closed = False
        self.scope.on_cleanup(self._stop_processes)

    def observe(self, timeout_s: float = 20.0) -> "DefaultsObserved":
        """Wait until the probe's first auto-commit is reported (its ``on_commit`` callback),
        then stop it and report.

        Raises:
            WaitTimeout: no commit within ``timeout_s`` (the default interval is 5000 ms).
        """
        def committed():
            if not self.proc.alive:
                raise KafkalabError(f"the defaults probe died; its log:\n{self.proc.log_tail()}")
            if not self.proc.ledger.exists():
                return None
            events = read_events(self.proc.ledger)
            return events if any(e.kind == "committed" and e.error is None for e in events) else None

        events = wait_until(committed, timeout_s=timeout_s, interval_s=0.2,
                            what=f"the first auto-commit of the defaults probe (group {self.group_id})")
        group_committed = coordinators.committed_offsets(self.group_id)
        rc = self.java.wait(timeout_s)
        java = _java_defaults_result(rc, self.java_out.read_text(), self.java.log_tail(40))
        self.close()
        handed = [e.ts_ms for e in events if e.kind == "consumed" and e.offset is not None]
        first = min(e.ts_ms for e in events if e.kind == "committed" and e.error is None)
        return DefaultsObserved(handed_over=len(handed), started_ms=self.started_ms, first_handed_ms=min(handed),
                                first_commit_ms=first, committed=group_committed, java=java)

    def close(self) -> None:
        """Stop the probe (SIGTERM: it closes and leaves its group) and delete its group."""
        if not self.scope.cleaned:
            self.scope.cleanup()

    def _stop_processes(self) -> None:
        self.closed = True
        if self.proc.alive:
            self.proc.terminate(30)
        if self.java.alive:
            self.java.kill()


@dataclass
class DefaultsObserved:
    """What ``DefaultsProbe`` saw. Times are wall clock, ms since the epoch.

    Attributes:
        handed_over: records ``consume`` returned to the probe.
        started_ms: when the probe process was started (before its consumer existed).
        first_handed_ms: when the first record was handed over.
        first_commit_ms: when its first successful commit was reported (the ``on_commit``
            callback, served by the next ``consume`` call: at most its 500 ms timeout later).
        committed: the group's committed offsets (partition -> offset) afterwards.
        java: the Java consumer's defaults (``java_consumer_defaults``), read by a JVM
            started alongside.

    librdkafka starts the auto-commit timer when the consumer is created and fires it every
    ``auto.commit.interval.ms`` (rdkafka_cgrp.c, ``rd_kafka_cgrp_new``): the first commit can
    come no sooner than one interval after ``started_ms``, and no later than one interval
    (plus the callback's delay) after the records were handed over.
    """

    handed_over: int
    started_ms: int
    first_handed_ms: int
    first_commit_ms: int
    committed: dict[int, int]
    java: dict[str, str]

    @property
    def commit_after_start_ms(self) -> int:
        """First commit minus process start: at least one timer interval."""
        return self.first_commit_ms - self.started_ms

    @property
    def commit_after_handover_ms(self) -> int:
        """First commit minus first hand-over: at most one interval plus the callback delay."""
        return self.first_commit_ms - self.first_handed_ms


# ----------------------------------------------------------------------------- a rebalance


#: ``RebalanceRedelivery``'s programs in ``NOTEBOOK``: manual commits every 100 records, and the
#: same loop that also commits in its ``on_revoke`` callback.
REBALANCE_PROGRAMS = ("commit_every_100", "commit_on_revoke")


@dataclass
class RedeliveryResult:
    """What ``RebalanceRedelivery`` saw for one program.

    Attributes:
        program: the program's name.
        produced: records in the topic.
        processed_before_join: records the first member processed before the second joined.
        committed_at_join: partition -> the group's committed offset once the rebalance was
            over (partitions with no commit left out).
        processed: processings by both members, repeats included.
        duplicates: ``processed - distinct records processed``: what the rebalance re-delivered.
        lost: records never processed.
        assignment: member (client id) -> the partitions it was given by the rebalance.
        processed_by: member (client id) -> records it processed, repeats included.
    """

    program: str
    produced: int
    processed_before_join: int
    committed_at_join: dict[int, int]
    processed: int
    duplicates: int
    lost: int
    assignment: dict[str, list[int]]
    processed_by: dict[str, int]


class RebalanceRedelivery:
    """A rebalance in the middle of consumption (article 000: a rebalance re-delivers what was
    not committed). One topic of ``partitions`` partitions holds ``messages`` records. A first
    member (``consumer-a``, the program) processes all of them; then a second member
    (``consumer-b``, the same program) joins the group. librdkafka's default assignors are
    eager (``range,roundrobin``, CONFIGURATION.md): every partition is revoked from the first
    member, then the partitions are shared out, and each new owner starts at the group's
    committed offset (``auto.offset.reset=earliest`` where there is none). Whatever was
    processed and not committed is processed again. Each program runs in its own topic and
    group, side by side; dynamic members (no ``group.instance.id``).

    Raises:
        KafkalabError, WaitTimeout: a step failed (the message says which).
    """

    def __init__(self, progs: Sequence["programs.Program"], messages: int = 60, partitions: int = 6):
        if len({p.name for p in progs}) != len(progs):
            raise KafkalabError(f"programs must differ in name: {[p.name for p in progs]}")
        self.scope = RunScope("redelivery")
        self.messages, self.partitions = messages, partitions
        self.runs: dict[str, dict] = {}
        for prog in progs:
            topic = self.scope.add_topic(f"redelivery-{self.scope.run_id}-{prog.name.replace('_', '-')}")
            self.runs[prog.name] = {"program": prog, "topic": topic, "group": self.scope.add_group(f"{topic}-group"),
                                    "dir": workloads.run_dir(f"{self.scope.run_id}-{prog.name}"), "procs": {}}
        self.scope.on_cleanup(self._kill_processes)
        admin.create_topics({r["topic"]: partitions for r in self.runs.values()})

    def __enter__(self) -> "RebalanceRedelivery":
        return self

    def __exit__(self, *exc) -> None:
        self.scope.cleanup()

    def _spawn(self, name: str, member: str) -> workloads.Worker:
        r = self.runs[name]
        conf = worker.lab_conf(member, r["group"])  # dynamic members
        p = workloads.spawn(worker.ProgramSpec(member, self.scope.run_id, str(r["dir"] / f"{member}.jsonl"), "consumer",
                                               r["program"].name, r["program"].source, conf=conf, topics=[r["topic"]]))
        r["procs"][member] = p
        return p

    def _events(self, name: str, member: str) -> list:
        p = self.runs[name]["procs"][member]
        if not p.alive and p.returncode not in (0, None):
            raise KafkalabError(f"{name}: {member} exited {p.returncode}; its log:\n{p.log_tail()}")
        return read_events(p.ledger, growing=True, missing_ok=True)

    def run(self, timeout_s: float = 60.0) -> dict[str, RedeliveryResult]:
        """Produce, let the first member process everything, start the second, wait until
        the rebalance is over (every partition owned by one member, the second one among them)
        and every partition's owner has read it to its end since it was last assigned it (or
        found nothing to read: committed offset at the end), stop both (SIGTERM) and count.

        Raises:
            WaitTimeout: a step did not finish within ``timeout_s`` (the message names it).
        """
        ends = {p: self.messages // self.partitions + (1 if p < self.messages % self.partitions else 0)
                for p in range(self.partitions)}
        for r in self.runs.values():
            workloads.produce(r["topic"], [(None, f"{r['topic']}/{i}".encode(), i % self.partitions, None)
                                           for i in range(self.messages)])
        for name in self.runs:
            self._spawn(name, "consumer-a")
        for name in self.runs:
            wait_until(lambda: sum(e.kind == "processed" for e in self._events(name, "consumer-a")) >= self.messages,
                       timeout_s=timeout_s, what=f"{name}: consumer-a processed all {self.messages} records")
        before = {name: sum(e.kind == "processed" for e in self._events(name, "consumer-a")) for name in self.runs}
        joined_ms = {}
        for name in self.runs:
            joined_ms[name] = now_ms()
            self._spawn(name, "consumer-b")
        out = {}
        for name, r in self.runs.items():
            def assignment() -> dict[str, list[int]] | None:
                owners: dict[str, list[int]] = {}
                moved = False
                for member in ("consumer-a", "consumer-b"):
                    mine: set[int] = set()
                    for e in self._events(name, member):  # assigned adds, revoked removes, in order
                        if e.kind == "assigned":
                            mine.add(e.partition)
                        elif e.kind == "revoked":
                            mine.discard(e.partition)
                        moved |= e.kind in ("assigned", "revoked") and e.ts_ms >= joined_ms[name]
                    owners[member] = sorted(mine)
                both = owners["consumer-a"] + owners["consumer-b"]
                done = moved and owners["consumer-b"] and sorted(both) == list(range(self.partitions))
                return owners if done else None

            owners = wait_until(assignment, timeout_s=timeout_s, interval_s=0.1,
                                what=f"{name}: the rebalance gave every partition to one of the two members")
            committed = coordinators.committed_offsets(r["group"], r["topic"])

            def caught_up() -> bool:
                for member, parts in owners.items():
                    last: dict[int, int] = {}  # partition -> last offset processed since it was last assigned
                    for e in self._events(name, member):
                        if e.kind == "assigned":
                            last[e.partition] = -1
                        elif e.kind == "processed":
                            last[e.partition] = e.offset
                    for p in parts:
                        if committed.get(p, 0) < ends[p] and last.get(p, -1) < ends[p] - 1:
                            return False
                return True

            wait_until(caught_up, timeout_s=timeout_s, interval_s=0.1,
                       what=f"{name}: each partition's new owner read to its end (or its committed offset was the end)")
            for member, p in r["procs"].items():
                rc = p.terminate(30)
                if rc != 0:
                    raise KafkalabError(f"{name}: {member} exited {rc} on SIGTERM; its log:\n{p.log_tail()}")
            by = {m: [e.value for e in self._events(name, m) if e.kind == "processed"] for m in ("consumer-a", "consumer-b")}
            processed = by["consumer-a"] + by["consumer-b"]
            out[name] = RedeliveryResult(name, self.messages, before[name], dict(sorted(committed.items())),
                                         len(processed), len(processed) - len(set(processed)),
                                         self.messages - len(set(processed)), owners,
                                         {m: len(v) for m, v in by.items()})
        return out

    def _kill_processes(self) -> None:
        for r in self.runs.values():
            for p in r["procs"].values():
                if p.alive:
                    p.kill()


def run_offset_commit(cfg: RunConfig, timeout_s: float = 60.0) -> OffsetCommitResult:
    """Produce, crash, restart, drain and count one run (``kafkalab run offset-commit``).

    Raises:
        KafkalabError, WaitTimeout: a step failed (the message names it).
    """
    with CrashAndRestart([cfg]) as lab:
        lab.produce(timeout_s)
        lab.crash(timeout_s)
        lab.restart(timeout_s)
        return lab.results()[0]


# ----------------------------------------------------------------------------- CLI


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)

#: The part of the Java consumer's source notebook 03 shows (``programs.java_source`` markers):
#: the consumer, its poll loop and commits, up to the crash point.
JAVA_SHOWN = ("kafkalab/clients/OffsetCommitConsumer.java", "KafkaConsumer<String, String> consumer = new",
              "if (crashNow) Runtime")


@click.command("offset-commit")
@click.option("--mode", type=click.Choice(sorted(set(LIBRDKAFKA_MODES) | set(JAVA_MODES))), default="auto",
              show_default=True, help="Commit mode (module docstring of kafkalab.experiments.offset_commit).")
@click.option("--client", type=click.Choice(CLIENTS), default="librdkafka", show_default=True,
              help="librdkafka (confluent-kafka) or Java (kafka-clients 4.4.0) consumer.")
@click.option("--messages", "-n", type=click.IntRange(1, 100_000), default=300, show_default=True,
              help="Records produced before the consumer starts.")
@click.option("--crash-after", type=click.IntRange(1), default=30, show_default=True,
              help="The consumer dies right after its K-th processed record.")
@click.option("--crash-point", type=click.Choice(CRASH_POINTS), default="after-process", show_default=True,
              help="Before (after-process) or after (after-commit) the K-th record's store/commit.")
@click.option("--batch", type=click.IntRange(1, 10_000), default=None,
              help="max.poll.records of the Java consumer [default: 20]. A librdkafka program sets its own "
                   "consume(num_messages=...): edit it in notebook 03.")
@click.option("--process-ms", type=click.FloatRange(0), default=25.0, show_default=True,
              help="Simulated work per record before the crash, ms.")
@click.option("--auto-commit-interval-ms", type=click.IntRange(1), default=None,
              help="auto.commit.interval.ms of the Java consumer [default: 50; the client's own: 5000]. A "
                   "librdkafka program sets its own: edit it in notebook 03.")
@click.option("--dedupe", is_flag=True, help="Key the sqlite sink by record id (INSERT OR IGNORE).")
@click.option("--partitions", type=click.IntRange(1, 50), default=3, show_default=True)
@click.option("--group-protocol", type=click.Choice(["classic", "consumer"]), default="classic", show_default=True,
              help="group.protocol of the Java consumer (consumer: KIP-848).")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Seconds per step.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def cli_command(mode: str, client: str, messages: int, crash_after: int, crash_point: str, batch: int | None,
                process_ms: float, auto_commit_interval_ms: int | None, dedupe: bool, partitions: int,
                group_protocol: str, timeout_s: float, as_json: bool) -> None:
    """Crash a consumer at an exact record, restart it, and count lost and duplicated records.
    A librdkafka run runs the mode's program as written in notebook 03 (its %%program cell)."""
    if client == "librdkafka" and (batch is not None or auto_commit_interval_ms is not None):
        raise KafkalabError("--batch and --auto-commit-interval-ms set the Java consumer; the librdkafka program "
                            f"of mode {mode} sets its own: edit it in notebooks/{NOTEBOOK}.ipynb")
    java = {k: v for k, v in (("batch", batch), ("auto_commit_interval_ms", auto_commit_interval_ms)) if v is not None}
    cfg = RunConfig(mode=mode, client=client, messages=messages, crash_after=crash_after, process_ms=process_ms,
                    crash_point=crash_point, dedupe=dedupe, partitions=partitions, group_protocol=group_protocol,
                    **java)
    runscope.require_for_cli()
    show_programs(cfg.resolved_program() if client == "librdkafka" else programs.java_source(*JAVA_SHOWN))
    result = run_offset_commit(cfg, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    rate = f"{result.records_per_s:.0f} records/s" if result.records_per_s else "n/a"
    if result.config.get("program"):
        click.echo(f"program {result.config['program']['name']} ({result.config['program']['origin']})")
    click.echo(f"{result.label}: produced {result.produced}, processed {result.processed} "
               f"({result.processed_unique} unique), lost {result.lost}, duplicates {result.duplicates}; "
               f"drain {rate}")
    for claim, ok in verdicts(result).items():
        click.echo(f"  {'holds' if ok else 'FAILS'}: {claim}")


@click.command("rebalance-redelivery")
@click.option("--program", "names", multiple=True, type=click.Choice(REBALANCE_PROGRAMS),
              help="Program of notebook 03, section 9 (repeatable) [default: both].")
@click.option("--messages", "-n", type=click.IntRange(1, 100_000), default=60, show_default=True)
@click.option("--partitions", type=click.IntRange(2, 50), default=6, show_default=True)
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Seconds per wait.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@runscope.checks_cluster_itself
def redelivery_command(names: tuple[str, ...], messages: int, partitions: int, timeout_s: float, as_json: bool) -> None:
    """A second member joins an eager group: what does the rebalance repeat? (notebook 03, section 9)"""
    runscope.require_for_cli()
    progs = [programs.from_notebook(NOTEBOOK, n) for n in (names or REBALANCE_PROGRAMS)]
    show_programs(*progs)
    with RebalanceRedelivery(progs, messages=messages, partitions=partitions) as rebalance:
        results = rebalance.run(timeout_s)
    if as_json:
        click.echo(json.dumps({k: asdict(v) for k, v in results.items()}, indent=2))
        return
    for r in results.values():
        click.echo(f"{r.program}: {r.processed_before_join} processed before the join, committed {r.committed_at_join or 'nothing'}; "
                   f"{r.duplicates} processed twice, {r.lost} lost; processed by {r.processed_by}")


cli_commands = [cli_command, redelivery_command]

