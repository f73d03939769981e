"""Workloads: topics, producers and consumers that experiments run against the live cluster.

Consumers here are real confluent-kafka (librdkafka) consumers in a real consumer group; each
runs its poll loop in its own thread, because a member that stops polling stops taking part
in rebalances (classic protocol: JoinGroup/SyncGroup are driven from poll; KIP-848: the
heartbeat carries the assignment).
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
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


# ----------------------------------------------------------------------------- group members


@dataclass
class MemberState:
    """What one member knows about itself, updated from its own poll thread."""

    index: int
    client_id: str
    group_instance_id: str | None = None
    member_id: str = ""
    assignment: set[Partition] = field(default_factory=set)
    revoked: list[Partition] = field(default_factory=list)  # every partition ever revoked
    assigned: list[Partition] = field(default_factory=list)  # every partition ever assigned
    rebalances: int = 0
    error: str | None = None


class GroupMember:
    """One consumer in a group, polling in a background thread until ``close()``.

    Args:
        index: position in the experiment (names it ``consumer-<index>``).
        conf: confluent-kafka consumer configuration (``group.id`` and strategy included).
        topics: topics to subscribe to.
        on_message: optional callback ``(member, message)`` for every record polled.
        on_batch: optional callback ``(member, messages)`` for every non-empty list of
            records one ``poll``/``consume`` returned (errors left out).
        batch: records per ``consume(num_messages=batch)``; 1: ``poll``.
        poll_timeout_ms: how long one ``poll``/``consume`` waits, ms.
        hold: if given, every assignment is paused in the rebalance callback and resumed
            only once ``hold`` is set: nothing is handed over before the whole group has
            joined (set ``hold`` after ``wait_group_stable``).
    """

    def __init__(self, index: int, conf: dict, topics: list[str],
                 on_message: Callable[["GroupMember", object], None] | None = None,
                 on_batch: Callable[["GroupMember", list], None] | None = None,
                 batch: int = 1, poll_timeout_ms: int = 100, hold: threading.Event | None = None):
        self.state = MemberState(index=index, client_id=conf.get("client.id", f"consumer-{index}"),
                                 group_instance_id=conf.get("group.instance.id"))
        # incremental (cooperative) callbacks carry only what changes; eager ones the whole set
        self.incremental = (conf.get("group.protocol") == "consumer"
                            or conf.get("partition.assignment.strategy") == "cooperative-sticky")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._on_message = on_message
        self._on_batch = on_batch
        self._batch = batch
        self._poll_timeout_s = poll_timeout_ms / 1000
        self._hold = hold
        self._resumed = True
        self.consumer = Consumer(conf)
        self.consumer.subscribe(topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)
        self.thread = threading.Thread(target=self._loop, name=self.state.client_id, daemon=True)
        self.thread.start()

    def _assigned(self, consumer, partitions) -> None:
        if self._hold is not None:
            (consumer.incremental_assign if self.incremental else consumer.assign)(partitions)
            consumer.pause(partitions)  # nothing is handed over before every member has joined
        with self._lock:
            tps = [(p.topic, p.partition) for p in partitions]
            if self.incremental:
                self.state.assignment |= set(tps)
            else:
                self.state.assignment = set(tps)
            self.state.assigned.extend(tps)
            self.state.rebalances += 1
            if self._hold is not None:
                self._resumed = False

    def _revoked(self, consumer, partitions) -> None:
        with self._lock:
            tps = [(p.topic, p.partition) for p in partitions]
            self.state.assignment -= set(tps)
            self.state.revoked.extend(tps)

    _lost = _revoked

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._resumed and self._hold.is_set():
                    assignment = self.consumer.assignment()
                    if assignment:
                        self.consumer.resume(assignment)
                    self._resumed = True
                if self._batch > 1:
                    msgs = self.consumer.consume(num_messages=self._batch, timeout=self._poll_timeout_s)
                else:
                    msg = self.consumer.poll(self._poll_timeout_s)
                    msgs = [msg] if msg is not None else []
                mid = self.consumer.memberid()
                if mid:
                    self.state.member_id = mid
                msgs = [m for m in msgs if m.error() is None]
                if self._on_message:
                    for m in msgs:
                        self._on_message(self, m)
                if msgs and self._on_batch:
                    self._on_batch(self, msgs)
        except Exception as e:  # surfaced by snapshot()/close()
            self.state.error = repr(e)

    def snapshot(self) -> MemberState:
        """A copy of the member's state (thread-safe).

        Raises:
            KafkalabError: the member's poll loop failed (the error in the message).
        """
        with self._lock:
            s = self.state
            if s.error:
                raise KafkalabError(f"{s.client_id} failed: {s.error}")
            return MemberState(s.index, s.client_id, s.group_instance_id, s.member_id, set(s.assignment),
                               list(s.revoked), list(s.assigned), s.rebalances)

    def close(self, leave_group: bool = True) -> None:
        """Stop polling and close the consumer (a clean LeaveGroup, unless ``leave_group`` is
        False, in which case the thread stops but the consumer is left to time out)."""
        self._stop.set()
        self.thread.join(timeout=10)
        if leave_group:
            self.consumer.close()


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


def partitions_of(topics: dict[str, int]) -> set[Partition]:
    return {(t, p) for t, n in topics.items() for p in range(n)}


def wait_group_stable(group_id: str, members: list[GroupMember], topics: dict[str, int],
                      timeout_s: float = 30.0) -> dict[str, set[Partition]]:
    """Until the coordinator reports the group STABLE with exactly these members, every
    partition of ``topics`` assigned once, and each member's own view equal to the
    coordinator's. Returns member_id -> partitions.

    Raises:
        WaitTimeout: with the last state seen.
    """
    expected = partitions_of(topics)
    last: dict = {}

    def stable():
        nonlocal last
        snaps = [m.snapshot() for m in members]
        try:
            state, assigned = broker_assignment(group_id)
        except (KafkaException, TimeoutError):
            return None
        last = {"state": state, "broker": assigned, "members": {s.client_id: sorted(s.assignment) for s in snaps}}
        if state != "STABLE" or len(assigned) != len(members):
            return None
        ids = {s.member_id for s in snaps}
        if ids != set(assigned):
            return None
        flat = [tp for tps in assigned.values() for tp in tps]
        if len(flat) != len(set(flat)) or set(flat) != expected:
            return None
        if any(s.assignment != assigned[s.member_id] for s in snaps):
            return None
        return assigned

    return wait_until(stable, timeout_s=timeout_s, interval_s=0.2,
                      what=f"group {group_id} stable with {len(members)} members covering {len(expected)} partitions",
                      on_timeout=lambda: f"last seen: {last}")


def consumer_config(group_id: str, index: int, strategy: str | None = None, group_protocol: str = "classic",
                    remote_assignor: str | None = None, group_instance_id: str | None = None,
                    extra: dict | None = None) -> dict:
    """A consumer configuration for experiments.

    Classic protocol: ``partition.assignment.strategy`` = ``strategy`` (range, roundrobin,
    cooperative-sticky), session.timeout.ms 6000 and heartbeat.interval.ms 1000 (teaching;
    librdkafka 2.16 defaults 45000 and 3000). KIP-848 (``group_protocol="consumer"``): the
    broker assigns with ``group.remote.assignor`` (uniform or range); librdkafka rejects
    the classic settings there, so none are set.
    """
    conf = {
        "bootstrap.servers": config.bootstrap_servers(),
        "group.id": group_id,
        "client.id": f"consumer-{index}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "log_level": 3,
    }
    if group_protocol == "consumer":
        conf["group.protocol"] = "consumer"
        if remote_assignor:
            conf["group.remote.assignor"] = remote_assignor
    elif group_protocol == "classic":
        conf.update({
            "partition.assignment.strategy": strategy or "range",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        })
    else:
        raise KafkalabError(f"group_protocol must be 'classic' or 'consumer', not {group_protocol!r}")
    if group_instance_id:
        conf["group.instance.id"] = group_instance_id
    conf.update(extra or {})
    return conf


def elapsed_ms(t0: float) -> int:
    return int((time.monotonic() - t0) * 1000)


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
