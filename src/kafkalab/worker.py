"""Client *processes*: restarted, stopped and killed like pods. The one child-process entry point.

``python -m kafkalab.worker SPEC_JSON`` runs one worker; ``kafkalab.workloads.spawn(spec)``
starts it and returns a handle (``workloads.Worker``). The spec's ``kind`` picks the mode:

==============  ===========================================================================
``consumer``    ``ConsumerSpec``: a librdkafka consumer in a group, with commit modes and
                exact crash points (notebooks 02, 03)
``producer``    ``ProducerSpec``: sends workload records, paced or as fast as possible,
                optionally the first ones one Produce request at a time (notebooks 02, 04)
``eos``         ``kafkalab.eos.ProcessorSpec``: the exactly-once consume-transform-produce
                processor (notebook 05)
``exec``        ``ExecSpec``: replaces itself with another program (a JVM client), which
                inherits the same death with the parent (notebook 03's Java consumer)
``program``     ``ProgramSpec``: a client program as a notebook shows it (``kafkalab.programs``),
                run with the lab's instruments of its role (``kafkalab.instruments``); e.g.
                notebook 09's share consumer (KIP-932)
==============  ===========================================================================

Every worker dies with its parent, one way for all: ``die_with_parent`` asks Linux for
``PR_SET_PDEATHSIG`` = SIGKILL, then checks that the parent that spawned it
(``$KAFKALAB_PARENT_PID``) is still its parent, so a parent that died in between is not
missed; the setting survives ``exec``. So no worker outlives the notebook or test that
started it. Note that Linux sends the signal when the *thread* that forked the child ends:
spawn from a thread that lives as long as the worker should. Each worker appends what it
did to its own ledger file (``Ledger(write_through=True)``: a SIGKILL from outside loses
no line), and every intentional crash goes through ``crash``: ledger flushed, then SIGKILL.

Consumer: records ``assigned``/``revoked`` per partition from its rebalance callbacks,
``consumed`` for every record handed over by ``poll``/``consume``, ``processed`` once the
side effect ran (a row in sqlite when ``sink`` is set), ``committed`` from the commit
callback and from each synchronous commit. ``commit_mode`` decides when offsets are
committed (librdkafka CONFIGURATION.md: ``enable.auto.commit``, ``enable.auto.offset.store``,
``auto.commit.interval.ms``):

- ``auto``: librdkafka's defaults: the offset is stored when a record is handed to the
  application and a timer commits stored offsets;
- ``store-after-process``: ``enable.auto.offset.store=false`` and ``store_offsets`` after
  processing (librdkafka's at-least-once recipe), the timer commits;
- ``sync-per-message``: auto-commit off, ``commit(message, asynchronous=False)`` after each;
- ``async``: auto-commit off, ``commit(message, asynchronous=True)`` after each;
- ``none``: auto-commit off, nothing committed;
- ``defaults``: nothing about commits set at all (so ``auto``, unless ``conf`` says otherwise):
  what a consumer configured with nothing does.

``crash_after=K`` SIGKILLs the worker itself at ``crash_point`` of its K-th processed
record: ``after-process`` right after the side effect, before the record's offset is stored
or committed (the worst case for at-least-once modes); ``after-commit`` right after the
store or commit call returned. In ``auto`` mode there is no call: ``after-commit`` waits until
the group coordinator reports as committed the offsets librdkafka stored on hand-over (the
consumer's positions, read with ``Consumer.committed``), i.e. until the timer's commit of
everything handed over has landed (at most ``AUTO_COMMIT_WAIT_S``). The crash point is exact
on every run.

Producer: sends ``count`` workload records (``kafkalab.data.workload_record``; or until
SIGTERM) at ``rate`` records/s, round-robin over ``partitions``; values are flight record
ids; records ``produced`` and ``acked`` (the delivery report, with partition and offset or
the error). The first ``sync_first`` records go one per Produce request, each acknowledged
before the next (``kafkalab.producers.send_one_by_one``).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .ledger import Ledger

COMMIT_MODES = ("auto", "store-after-process", "sync-per-message", "async", "none", "defaults")
#: Where a consumer worker dies (``crash_after``): right after the side effect of its K-th
#: record, before storing/committing its offset, or right after the store/commit call returned.
CRASH_POINTS = ("after-process", "after-commit")
#: Bound (s) of an ``auto`` consumer's wait, at ``after-commit``, for the timer's commit of
#: what it was handed (many ``auto.commit.interval.ms`` periods on a loaded machine).
AUTO_COMMIT_WAIT_S = 30.0
#: Bound (s) of a consumer's wait for its ``work_until`` file, after ``process_ms`` of work.
WORK_UNTIL_MAX_S = 180.0
#: Environment variable through which ``workloads.Worker`` tells the child its parent's pid.
PARENT_ENV = "KAFKALAB_PARENT_PID"


@dataclass
class ConsumerSpec:
    """What a consumer worker does. ``conf`` is passed to ``confluent_kafka.Consumer`` after
    the defaults and the commit-mode settings, so it can override them. ``batch`` > 1:
    ``consume(num_messages=batch)``, else ``poll``. ``work_until``: path of a file; the work on
    each record lasts ``process_ms`` and then until the file exists (at most
    ``WORK_UNTIL_MAX_S`` more): a long piece of work that the parent ends once it has seen what
    it waits for. ``crash_after`` None: run until SIGTERM,
    then finish the records in hand, close (a dynamic member leaves the group; auto modes
    commit stored offsets) and exit 0. ``sink``: path of a ``Sink`` written per processed
    record, mode ``ignore`` with ``dedupe``, else ``insert``. Times in ms."""

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
    crash_point: str = "after-commit"
    sink: str | None = None
    dedupe: bool = False
    poll_timeout_ms: int = 100
    work_until: str | None = None
    kind: str = "consumer"

    def __post_init__(self) -> None:
        if self.crash_point not in CRASH_POINTS:
            raise ValueError(f"crash_point must be one of {', '.join(CRASH_POINTS)}, not {self.crash_point!r}")
        commit_mode_conf(self.commit_mode)  # raises on an unknown mode


@dataclass
class ProducerSpec:
    """What a producer worker does. ``count`` None: until SIGTERM. ``rate``: records/s (0 = as
    fast as possible). ``partitions``: produce to partitions 0..partitions-1 in turn.
    ``sync_first``: the first records sent one per Produce request, each acknowledged before
    the next. ``flush_timeout_s``: how long the final ``flush`` waits for delivery reports."""

    name: str
    run_id: str
    ledger: str
    topic: str
    partitions: int
    count: int | None = None
    rate: float = 0.0
    conf: dict = field(default_factory=dict)
    sync_first: int = 0
    flush_timeout_s: float = 30.0
    kind: str = "producer"


@dataclass
class ExecSpec:
    """A worker that becomes another program (``os.execv(argv[0], argv)``) once it is bound to
    die with its parent: how a JVM client gets the same lifetime as every worker. ``ledger``
    names the program's ledger (if it writes one) and, as for every worker, its log
    (``<ledger>.log``, stdout and stderr); ``stdout`` set: stdout goes to that file instead."""

    name: str
    run_id: str
    ledger: str
    argv: list[str]
    stdout: str | None = None
    kind: str = "exec"


@dataclass
class ProgramSpec:
    """A worker that runs a client program (``kafkalab.programs.Program``): ``source``, the
    program's text exactly as shown, run as ``__main__`` once ``kafkalab.instruments`` has
    bound ``lab`` to the instruments of ``role`` (``instruments.ROLES``), made from this spec.
    ``conf``: the settings the harness adds (addresses and names, ``lab.conf``); ``topics``:
    the run's topics; ``options``: the instruments' settings (e.g.
    ``instruments.consumer.ConsumerOptions``). A program that raises exits 1 with its
    traceback in the worker's log; its lines are named ``<program NAME>``."""

    name: str
    run_id: str
    ledger: str
    role: str
    program_name: str
    source: str
    conf: dict = field(default_factory=dict)
    topics: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    kind: str = "program"


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent exits (prctl ``PR_SET_PDEATHSIG``,
    kept across ``exec``). ``parent_pid``: the pid of the process that spawned this one; if
    it is no longer the parent, it died before the request took effect, and this process
    kills itself at once. No-op where ``prctl`` does not exist (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def commit_mode_conf(mode: str) -> dict:
    """librdkafka settings for a commit mode (see the module docstring).

    Raises:
        ValueError: not one of ``COMMIT_MODES``.
    """
    if mode not in COMMIT_MODES:
        raise ValueError(f"commit_mode must be one of {', '.join(COMMIT_MODES)}, not {mode!r}")
    if mode == "defaults":
        return {}
    if mode == "auto":
        return {"enable.auto.commit": True, "enable.auto.offset.store": True}
    if mode == "store-after-process":
        return {"enable.auto.commit": True, "enable.auto.offset.store": False}
    return {"enable.auto.commit": False, "enable.auto.offset.store": False}


def _text(b: bytes | None) -> str | None:
    return b.decode() if b is not None else None


def run_consumer(spec: ConsumerSpec) -> None:
    """The consumer loop: ``poll``/``consume(batch)``, a ``consumed`` event per record handed
    over, then per record: work (``process_ms``), sink row, ``processed``, the mode's store or
    commit, and the crash at ``crash_point`` of the ``crash_after``-th record. A SIGTERM ends
    the loop after the records in hand. Ledger written through."""
    from confluent_kafka import Consumer, KafkaError

    from . import config
    from .ledger import Ledger, crash
    from .sink import Sink
    from .waiting import wait_until

    ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    member = {"id": None}
    instance = spec.conf.get("group.instance.id")

    def note(kind: str, **kw: Any) -> None:
        ledger.record(kind, client_id=spec.name, member_id=member["id"], group_instance_id=instance, **kw)

    def on_commit(err, partitions) -> None:
        for p in partitions or []:
            if p.offset >= 0 or err or p.error:  # a partition with nothing to commit is no commit
                note("committed", topic=p.topic, partition=p.partition, offset=p.offset,
                     error=str(err) if err else (str(p.error) if p.error else None))

    conf = {"bootstrap.servers": config.bootstrap_servers(), "group.id": spec.group_id, "client.id": spec.name,
            "auto.offset.reset": "earliest", "log_level": 3,
            **commit_mode_conf(spec.commit_mode), **spec.conf, "on_commit": on_commit}
    consumer = Consumer(conf)

    def on_assign(c, partitions) -> None:
        member["id"] = c.memberid()
        for p in partitions:
            note("assigned", topic=p.topic, partition=p.partition)

    def on_revoke(c, partitions) -> None:
        for p in partitions:
            note("revoked", topic=p.topic, partition=p.partition)

    def commit(m) -> None:
        if spec.commit_mode == "store-after-process":
            consumer.store_offsets(message=m)
        elif spec.commit_mode in ("sync-per-message", "async"):
            sync = spec.commit_mode == "sync-per-message"
            try:
                done = consumer.commit(message=m, asynchronous=not sync)
                for tp in (done or []) if sync else []:
                    note("committed", topic=tp.topic, partition=tp.partition, offset=tp.offset,
                         error=str(tp.error) if tp.error else None)
            except Exception as e:  # a failed commit is recorded, not fatal
                note("committed", topic=m.topic(), partition=m.partition(), offset=m.offset() + 1, error=str(e))

    def auto_committed() -> bool:
        """``auto`` mode: the coordinator's committed offsets have reached the positions, the
        offsets librdkafka stored as it handed the records over (``enable.auto.offset.store``)."""
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(positions, timeout=10)}
        return all(committed[(tp.topic, tp.partition)] >= tp.offset for tp in positions)

    consumer.subscribe(spec.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    sink = Sink(spec.sink, "ignore" if spec.dedupe else "insert") if spec.sink else None
    processed = 0
    try:
        while not stop.is_set():
            if spec.batch > 1:
                msgs = consumer.consume(num_messages=spec.batch, timeout=spec.poll_timeout_ms / 1000)
            else:
                m = consumer.poll(spec.poll_timeout_ms / 1000)
                msgs = [m] if m is not None else []
            good = []
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        note("consumed", topic=m.topic() or spec.topics[0], error=str(m.error()))
                    continue
                good.append(m)
                note("consumed", topic=m.topic(), partition=m.partition(), offset=m.offset(), key=_text(m.key()),
                     value=_text(m.value()))
            for m in good:  # the whole batch is processed, even after SIGTERM
                if spec.process_ms:
                    time.sleep(spec.process_ms / 1000)  # the work itself (simulated), not a wait on Kafka
                if spec.work_until:  # then on, until the parent says so (bounded)
                    until = time.monotonic() + WORK_UNTIL_MAX_S
                    while not os.path.exists(spec.work_until) and time.monotonic() < until:
                        time.sleep(0.02)
                value = _text(m.value())
                if sink is not None:
                    sink.write(value, m.topic(), m.partition(), m.offset(), spec.name)
                note("processed", topic=m.topic(), partition=m.partition(), offset=m.offset(), value=value)
                processed += 1
                crash_now = spec.crash_after is not None and processed >= spec.crash_after
                if crash_now and spec.crash_point == "after-process":
                    crash(ledger)
                commit(m)
                if crash_now:
                    if spec.commit_mode == "auto":  # the timer's commit of everything handed over, seen
                        wait_until(auto_committed, timeout_s=AUTO_COMMIT_WAIT_S, interval_s=0.01,
                                   what="the auto-commit timer's commit of the records handed over")
                    crash(ledger)
    finally:
        consumer.close()  # leaves the group (a dynamic member) and commits stored offsets (auto modes)
        ledger.close()


def run_producer(spec: ProducerSpec) -> None:
    """Send the records (module docstring) and flush; SIGTERM stops sending."""
    from . import config
    from .data import workload_record
    from .ledger import Ledger
    from .producers import make_producer, records_for, send_one_by_one

    ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    producer = make_producer({"bootstrap.servers": config.bootstrap_servers(), "client.id": spec.name,
                              "log_level": 3, **spec.conf})

    def report(err, msg) -> None:
        ledger.record("acked", topic=spec.topic, partition=msg.partition(), client_id=spec.name,
                      offset=msg.offset() if err is None else None, key=_text(msg.key()) or None,
                      value=msg.value().decode(), error=str(err) if err else None)

    i = 0
    try:
        if spec.sync_first:
            first = records_for(spec.sync_first if spec.count is None else min(spec.sync_first, spec.count),
                                spec.partitions)
            send_one_by_one(producer, spec.topic, first, spec.name, ledger)
            i = len(first)
        t0 = time.monotonic()
        sent = 0
        while not stop.is_set() and (spec.count is None or i < spec.count):
            f, value = workload_record(i)
            partition = i % spec.partitions
            ledger.record("produced", topic=spec.topic, partition=partition, key=f.key, value=value, client_id=spec.name)
            producer.produce(spec.topic, key=f.key.encode(), value=value.encode(), partition=partition, on_delivery=report)
            producer.poll(0)
            i += 1
            sent += 1
            if spec.rate:
                # pace to `rate` records/s while serving delivery reports
                while not stop.is_set() and time.monotonic() < t0 + sent / spec.rate:
                    producer.poll(min(0.05, max(0.0, t0 + sent / spec.rate - time.monotonic())))
        producer.flush(spec.flush_timeout_s)
    finally:
        ledger.close()


def run_program(spec: ProgramSpec) -> int:
    """Run a client program in this process (``ProgramSpec``): instruments installed, the
    source compiled under the name ``<program NAME>`` (its lines appear in tracebacks) and run
    as ``__main__``; the instruments are closed when it ends, however it ends. Returns 0, or 1
    if the program raised (traceback on stderr)."""
    import linecache
    import traceback

    from . import instruments

    lab = instruments.install(spec)
    filename = f"<program {spec.program_name}>"
    linecache.cache[filename] = (len(spec.source), None, spec.source.splitlines(keepends=True), filename)
    try:
        exec(compile(spec.source, filename, "exec"), {"__name__": "__main__"})
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        lab.close()
    return 0


def run_exec(spec: ExecSpec) -> NoReturn:
    """Become ``spec.argv`` (stdout to ``spec.stdout`` if set). Never returns.

    Raises:
        OSError: the program could not be executed.
    """
    sys.stdout.flush()
    if spec.stdout:
        fd = os.open(spec.stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.close(fd)
    os.execv(spec.argv[0], spec.argv)


def spec_from_json(text: str) -> Any:
    """The spec object of one worker (``ConsumerSpec``, ``ProducerSpec``,
    ``eos.ProcessorSpec``, ``ExecSpec``, ``ProgramSpec``) from its JSON (``spec_json``), chosen by ``kind``.

    Raises:
        ValueError: unknown ``kind`` or invalid fields.
    """
    from .eos import ProcessorSpec

    d = json.loads(text)
    kinds = {"consumer": ConsumerSpec, "producer": ProducerSpec, "eos": ProcessorSpec, "exec": ExecSpec,
             "program": ProgramSpec}
    kind = d.get("kind")
    if kind not in kinds:
        raise ValueError(f"unknown worker kind {kind!r}: one of {', '.join(kinds)}")
    return kinds[kind](**d)


def run(spec: Any) -> int:
    """Run one worker in this process; returns its exit code (0; the EOS processor: its own)."""
    if spec.kind == "consumer":
        run_consumer(spec)
    elif spec.kind == "producer":
        run_producer(spec)
    elif spec.kind == "eos":
        from .eos import run_processor

        return run_processor(spec)
    elif spec.kind == "exec":
        run_exec(spec)
    elif spec.kind == "program":
        return run_program(spec)
    return 0


def main(argv: list[str] | None = None) -> None:
    """``python -m kafkalab.worker SPEC_JSON``: die with the parent, run the worker, exit with
    its code."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m kafkalab.worker SPEC_JSON")
    parent = os.environ.get(PARENT_ENV)
    die_with_parent(int(parent) if parent else None)
    try:
        spec = spec_from_json(argv[0])
    except (ValueError, TypeError) as e:
        sys.exit(f"kafkalab.worker: bad spec: {e}")
    sys.exit(run(spec))


def spec_json(spec: Any) -> str:
    """A worker spec (a dataclass with ``kind``) as the JSON ``main`` takes."""
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
