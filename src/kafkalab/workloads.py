"""Workloads: what experiments run against the live cluster besides the programs they show:
the shared AdminClient, a producer and a reader for setting up and reading back topics, the
group requests of the AdminClient (``group_request``), and the worker processes that run the
client programs (``spawn``, ``Worker``). Group members are client programs
(``experiments.assignment.GroupRun``), never threads here.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from . import config
from .consumers import watermarks
from .errors import KafkalabError, WaitTimeout
from .waiting import wait_until

Partition = tuple[str, int]


_ADMINS: dict[str, AdminClient] = {}


def admin(bootstrap: str | None = None) -> AdminClient:
    """The shared AdminClient on this cluster's CLIENT listeners (or ``bootstrap``).

    Shared and kept alive on purpose: the futures an AdminClient returns never complete
    once the client object is garbage-collected.
    """
    bootstrap = bootstrap or config.bootstrap_servers()
    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return _ADMINS[bootstrap]


def produce(topic: str, records: Iterable[tuple], conf: dict | None = None,
            timeout_s: float = 30.0, warm_up: bool = False) -> list[tuple[int, int]]:
    """Produce records with confluent-kafka and wait for every delivery report.

    Args:
        records: ``(key, value)`` tuples (bytes or None, bytes): the partitioner picks the
            partition; or ``(key, value, partition, headers)``: partition an int (None: the
            partitioner), headers a dict of str to bytes or None.
        warm_up: first send one record without a key, value ``warm-up|``, and wait for its
            delivery, so the records follow on a producer that knows the topic's metadata
            and has its connections up (not in the returned list).

    Returns:
        ``(partition, offset)`` of each record, in input order.

    Raises:
        KafkalabError: a record was not delivered (the first error).
    """
    p = Producer({"bootstrap.servers": config.bootstrap_servers(), **(conf or {})})
    results: list = []
    errors: list = []
    if warm_up:
        p.produce(topic, value=b"warm-up|", on_delivery=lambda err, msg: errors.append(err) if err else None)
        if p.flush(timeout_s) or errors:
            raise KafkalabError(f"warm-up record to {topic} undelivered after {timeout_s} s: {errors[:1]}")

    for i, record in enumerate(records):
        key, value, partition, headers = (*record, None, None) if len(record) == 2 else record
        results.append(None)

        def report(err, msg, i=i):
            if err is not None:
                errors.append(err)
            else:
                results[i] = (msg.partition(), msg.offset())

        extra = {"partition": partition} if partition is not None else {}
        p.produce(topic, value=value, key=key, headers=headers, on_delivery=report, **extra)
        p.poll(0)
    remaining = p.flush(timeout_s)
    if remaining or errors:
        raise KafkalabError(f"{remaining} records undelivered after {timeout_s} s; first error: {errors[:1]}")
    return results


@dataclass(frozen=True)
class Copy:
    """A record read back from a topic (``read_topic``): where it is and its value as text."""

    partition: int
    offset: int
    value: str


#: How long ``read_topic(..., at_least=n)`` waits for the high watermarks to add up to ``n``
#: before it reads what is there (seconds): only reached when records were really lost.
AT_LEAST_WAIT_S = 15.0


def read_topic(topic: str, partitions: int, timeout_s: float = 30.0, at_least: int = 0) -> list[Copy]:
    """Every record of ``topic`` from the log start to the high watermark (as it was when the
    read began), read with a librdkafka consumer (assign, no group commit) on the CLIENT
    listeners; sorted by partition and offset.

    Args:
        at_least: records the caller knows were sent but has no ack for (``acks=0``: the
            producer's success report means only that the request left it, and the leader may
            append it after the producer has ended). The read starts once the high watermarks
            add up to ``at_least``, or after ``AT_LEAST_WAIT_S`` seconds (records the leader
            refused never come, and the read then counts them as lost).

    Raises:
        KafkalabError: the consumer reported an error.
        WaitTimeout: the end was not reached within ``timeout_s``.
    """
    from confluent_kafka import OFFSET_BEGINNING

    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": f"{topic}-reader",
                  "enable.auto.commit": False, "enable.partition.eof": False, "log_level": 3})
    try:
        ends: dict[int, int] = {}

        def enough() -> bool:
            for p in range(partitions):
                ends[p] = watermarks(c, topic, p)[1]
            return sum(ends.values()) >= at_least

        if not enough():
            try:
                wait_until(enough, timeout_s=AT_LEAST_WAIT_S, interval_s=0.05,
                           what=f"{at_least} records in {topic}")
            except WaitTimeout:
                pass  # lost writes: read what the log holds
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[Copy] = []
        next_offset = {p: 0 for p in range(partitions)}

        def done() -> bool:
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error() is not None:
                    raise KafkalabError(f"reading {topic}: {m.error()}")
                got.append(Copy(m.partition(), m.offset(), m.value().decode()))
                next_offset[m.partition()] = m.offset() + 1
            return all(next_offset[p] >= ends[p] for p in ends)

        wait_until(done, timeout_s=timeout_s, interval_s=0.0, what=f"{topic} read to its high watermarks {ends}")
        return sorted(got, key=lambda x: (x.partition, x.offset))
    finally:
        c.close()


# ----------------------------------------------------------------------------- group requests


#: The AdminClient options of every group request (DescribeGroups, DeleteGroups, OffsetFetch:
#: the requests librdkafka sends through FindCoordinator to a group coordinator): librdkafka's
#: own timer for the request at its maximum (3600 s), so it never ends one in a kafkalab
#: process; the caller stops waiting instead (``group_request``). Why: librdkafka 2.16.0
#: (confluent-kafka 2.16.1) aborts the whole process with ``rdkafka_queue.h:1086:
#: rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed`` when a group
#: request its timer ended while the coordinator was down is sent once the coordinator is
#: back (a use after free in ``rd_kafka_admin_coord_request`` /
#: ``rd_kafka_admin_coord_response_parse``, src/rdkafka_admin.c). Reproduced on every round
#: by ``benchmarks/librdkafka_admin_abort.py``; with these options, never.
ADMIN_GROUP_OPTIONS: dict[str, float] = {"request_timeout": 3600.0}


def group_request(call: Callable[[dict], dict], timeout_s: float, group_id: str) -> object:
    """Send one AdminClient group request for ``group_id`` and wait for its answer.

    Args:
        call: issues the request for that ONE group with the options it is given
            (``ADMIN_GROUP_OPTIONS``) and returns the client's ``{group: future}``, e.g.
            ``lambda o: admin().describe_consumer_groups([g], **o)``.
        timeout_s: how long to wait for the answer, seconds. A request not answered by then
            stays pending inside librdkafka until its coordinator answers; that answer is
            dropped.

    Returns:
        The future's result (e.g. ``ConsumerGroupDescription``).

    Raises:
        TimeoutError: no answer within ``timeout_s`` (e.g. the coordinator's broker was just
            killed and ``broker.session.timeout.ms`` has not yet fenced it).
        KafkaException: the broker's or librdkafka's error (e.g. GROUP_ID_NOT_FOUND).
        ValueError: ``call`` asked about more or fewer than one group.
    """
    futures = call(dict(ADMIN_GROUP_OPTIONS))
    if len(futures) != 1:
        raise ValueError(f"one group per request, not {len(futures)}")
    [fut] = futures.values()
    return fut.result(timeout=timeout_s)


def describe_group(group_id: str, timeout_s: float = 5.0):
    """The broker's view of a group (``ConsumerGroupDescription``: state, members, assignments),
    through ``group_request``."""
    return group_request(lambda o: admin().describe_consumer_groups([group_id], **o), timeout_s, group_id)


def broker_assignment(group_id: str) -> tuple[str, dict[str, set[Partition]]]:
    """``(state name, member_id -> set of (topic, partition))`` as the group coordinator reports."""
    d = describe_group(group_id)
    members = {
        m.member_id: {(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])}
        for m in d.members
    }
    return d.state.name, members


# ----------------------------------------------------------------------------- worker processes


class Worker:
    """A client process started by ``spawn``: ``python -m kafkalab.worker SPEC_JSON``, the one
    child-process entry point (a consumer, a producer, the EOS processor, or a JVM client
    through ``worker.ExecSpec``).

    Its stdout and stderr go to ``<ledger>.log``. Every Worker still running when the Python
    process exits is killed (``atexit``: ``kill_all_workers``), and the worker itself dies with
    its parent (``kafkalab.worker.die_with_parent``), so none outlives the notebook or test
    that started it. Spawn it from a thread that lives as long as the worker should: Linux
    sends the parent-death signal when the forking *thread* ends.
    """

    _live: "set[Worker]" = set()

    def __init__(self, spec):
        import os
        import subprocess
        import sys

        from .worker import PARENT_ENV, spec_json

        self.spec = spec
        self.name = spec.name
        self.ledger = Path(spec.ledger)
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = self.ledger.with_suffix(".log")
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen([sys.executable, "-m", "kafkalab.worker", spec_json(spec)], env=env,
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        Worker._live.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """None while running; ``-9`` after SIGKILL (a crash point or ``kill``)."""
        return self.popen.poll()

    @property
    def stopped(self) -> bool:
        """Whether the process is alive and stopped by a signal (SIGSTOP; psutil's
        ``STATUS_STOPPED``, as ``cluster`` reads a paused broker): a worker that froze itself at
        its crash point, or one ``pause`` stopped."""
        import psutil

        if not self.alive:
            return False
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def wait(self, timeout_s: float) -> int:
        """Until the process exits; returns its exit code.

        Raises:
            WaitTimeout: still running after ``timeout_s``.
        """
        import subprocess

        from .errors import WaitTimeout

        try:
            rc = self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise WaitTimeout(f"timed out after {timeout_s:.1f} s waiting for worker {self.name} "
                              f"(pid {self.pid}) to exit; its log: {self.log_path}") from None
        Worker._live.discard(self)
        return rc

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM: the worker finishes its current record, closes its client (a consumer
        leaves the group, unless static) and exits. SIGKILL after ``timeout_s``."""
        import signal

        if self.alive:
            self._signal(signal.SIGCONT)
            self.popen.terminate()
        try:
            return self.wait(timeout_s)
        except KafkalabError:
            return self.kill()

    def kill(self) -> int:
        """SIGKILL: a crash. The ledger loses nothing (it is written through)."""
        if self.alive:
            self.popen.kill()
        return self.wait(10)

    def pause(self) -> None:
        """SIGSTOP: alive, silent (no poll, no heartbeat)."""
        import signal

        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        import signal

        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        import os

        if self.alive:
            os.kill(self.pid, sig)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]) if self.log_path.exists() else ""

    def __repr__(self) -> str:
        return f"Worker({self.name!r}, pid={self.pid}, alive={self.alive})"


def spawn(spec) -> Worker:
    """Start a worker process for a spec of ``kafkalab.worker`` (``ConsumerSpec``, ``ExecSpec``,
    ``ProgramSpec``); returns at once."""
    return Worker(spec)


def live_workers() -> list[Worker]:
    """The workers this process started that still run."""
    return [w for w in list(Worker._live) if w.alive]


def worker_processes() -> list[int]:
    """Pids of this process's live descendants running ``kafkalab.worker`` (zombies and
    vanished ones skipped), as the operating system sees them: empty when no worker is left,
    whether or not a handle still knows it."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "kafkalab.worker" in p.cmdline():
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def kill_all_workers() -> None:
    """SIGKILL every worker this process started that still runs (registered with atexit)."""
    for w in list(Worker._live):
        try:
            w.kill()
        except Exception:
            pass


atexit.register(kill_all_workers)


def run_dir(run: str) -> Path:
    """Folder for one run's ledgers and sinks: ``.kafkalab/runs/<run>/``."""
    d = config.state_dir() / "runs" / run
    d.mkdir(parents=True, exist_ok=True)
    return d
