"""Client *processes*: restarted, stopped and killed like pods. The one child-process entry point.

``python -m kafkalab.worker SPEC_JSON`` runs one worker; ``kafkalab.workloads.spawn(spec)``
starts it and returns a handle (``workloads.Worker``). The spec's ``kind`` picks the mode:

==============  ===========================================================================
``consumer``    ``ConsumerSpec``: a librdkafka consumer in a group that processes records and
                commits nothing (notebook 02)
``exec``        ``ExecSpec``: replaces itself with another program (a JVM client), which
                inherits the same death with the parent (notebook 03's Java consumer)
``program``     ``ProgramSpec``: a client program as a notebook shows it (``kafkalab.programs``),
                run with the lab's instruments of its role (``kafkalab.instruments``):
                notebooks 03, 04, 05 and 09
==============  ===========================================================================

Every worker dies with its parent, one way for all: ``die_with_parent`` asks Linux for
``PR_SET_PDEATHSIG`` = SIGKILL, then checks that the parent that spawned it
(``$KAFKALAB_PARENT_PID``) is still its parent, so a parent that died in between is not
missed; the setting survives ``exec``. So no worker outlives the notebook or test that
started it. Note that Linux sends the signal when the *thread* that forked the child ends:
spawn from a thread that lives as long as the worker should. Each worker appends what it
did to its own ledger file (``Ledger(write_through=True)``: a SIGKILL from outside loses
no line), and every intentional crash goes through ``crash``: ledger flushed, then SIGKILL.

Consumer (notebook 02's group member): records ``assigned``/``revoked`` per partition from its
rebalance callbacks, ``consumed`` for every record ``poll`` hands over and ``processed`` once
its (simulated) work is done; it commits nothing (``enable.auto.commit=false``). The consumers
whose commits are the lesson (notebook 03) are client programs (``ProgramSpec``, role
``consumer``: ``kafkalab.instruments.consumer`` holds their crash points), as are the
producers of notebook 04 (role ``producer``).
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

#: Bound (s) of a consumer's wait for its ``work_until`` file, after ``process_ms`` of work.
WORK_UNTIL_MAX_S = 180.0
#: Environment variable through which ``workloads.Worker`` tells the child its parent's pid.
PARENT_ENV = "KAFKALAB_PARENT_PID"


@dataclass
class ConsumerSpec:
    """What a consumer worker does (notebook 02's group member). ``conf`` is passed to
    ``confluent_kafka.Consumer`` after the defaults (``auto.offset.reset=earliest``, auto-commit
    off), so it can override them. ``work_until``: path of a file; the work on each record lasts
    ``process_ms`` and then until the file exists (at most ``WORK_UNTIL_MAX_S`` more): a long
    piece of work that the parent ends once it has seen what it waits for. It runs until
    SIGTERM, then finishes the record in hand, closes (a dynamic member leaves the group) and
    exits 0. Times in ms."""

    name: str
    run_id: str
    ledger: str
    group_id: str
    topics: list[str]
    conf: dict = field(default_factory=dict)
    process_ms: float = 0.0
    poll_timeout_ms: int = 100
    work_until: str | None = None
    kind: str = "consumer"


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


def _text(b: bytes | None) -> str | None:
    return b.decode() if b is not None else None


def run_consumer(spec: ConsumerSpec) -> None:
    """The consumer loop: ``poll``, a ``consumed`` event per record handed over, then the work
    (``process_ms``, ``work_until``) and ``processed``. A SIGTERM ends the loop after the record
    in hand. Ledger written through."""
    from confluent_kafka import Consumer, KafkaError

    from . import config
    from .ledger import Ledger
    from .waiting import wait_until

    ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    member = {"id": None}
    instance = spec.conf.get("group.instance.id")

    def note(kind: str, **kw: Any) -> None:
        ledger.record(kind, client_id=spec.name, member_id=member["id"], group_instance_id=instance, **kw)

    consumer = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": spec.group_id,
                         "client.id": spec.name, "auto.offset.reset": "earliest", "log_level": 3,
                         "enable.auto.commit": False, "enable.auto.offset.store": False, **spec.conf})

    def on_assign(c, partitions) -> None:
        member["id"] = c.memberid()
        for p in partitions:
            note("assigned", topic=p.topic, partition=p.partition)

    def on_revoke(c, partitions) -> None:
        for p in partitions:
            note("revoked", topic=p.topic, partition=p.partition)

    consumer.subscribe(spec.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    try:
        while not stop.is_set():
            m = consumer.poll(spec.poll_timeout_ms / 1000)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    note("consumed", topic=m.topic() or spec.topics[0], error=str(m.error()))
                continue
            value = _text(m.value())
            note("consumed", topic=m.topic(), partition=m.partition(), offset=m.offset(), key=_text(m.key()),
                 value=value)
            if spec.process_ms:
                time.sleep(spec.process_ms / 1000)  # the work itself (simulated), not a wait on Kafka
            if spec.work_until:  # then on, until the parent says so (bounded)
                wait_until(lambda: os.path.exists(spec.work_until), timeout_s=WORK_UNTIL_MAX_S, interval_s=0.02,
                           what=f"the file {spec.work_until} that ends the work")
            note("processed", topic=m.topic(), partition=m.partition(), offset=m.offset(), value=value)
    finally:
        consumer.close()  # leaves the group (a dynamic member)
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
    """The spec object of one worker (``ConsumerSpec``, ``ExecSpec``, ``ProgramSpec``) from its JSON (``spec_json``), chosen by ``kind``.

    Raises:
        ValueError: unknown ``kind`` or invalid fields.
    """
    d = json.loads(text)
    kinds = {"consumer": ConsumerSpec, "exec": ExecSpec, "program": ProgramSpec}
    kind = d.get("kind")
    if kind not in kinds:
        raise ValueError(f"unknown worker kind {kind!r}: one of {', '.join(kinds)}")
    return kinds[kind](**d)


def run(spec: Any) -> int:
    """Run one worker in this process; returns its exit code (0; a program: its own)."""
    if spec.kind == "consumer":
        run_consumer(spec)
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
