"""Notebook 09: share groups (KIP-932, "queues for Kafka"), run on the cluster.

A share group breaks the three rules every other notebook teaches: any number of members read
one partition, each record is *acquired* under a time-limited lock and acknowledged one by one
(ACCEPT, RELEASE, REJECT), and a record whose lock runs out, or whose holder's connection
closes, is delivered again with a higher delivery count, until ``share.delivery.count.limit``
deliveries; then it is archived.

The client code is not here: each member runs the notebook's program ``share_consumer``
(``kafkalab.programs``; instruments of role ``share``, ``kafkalab.instruments.share``), which
decides each record's acknowledgement from its value and holds the run's scheduling
arrangements and crash point on screen. ``run_share_group`` is the harness around it:

1. a fresh topic of P partitions and share group, with the group configs
   ``share.auto.offset.reset=earliest`` (a new share group starts at the latest offset),
   ``share.record.lock.duration.ms`` and ``share.delivery.count.limit``;
2. C program processes (``worker.ProgramSpec``), and the wait until the coordinator lists all C
   with an assignment (``kafka-share-groups --describe --members``);
3. N workload records, partition ``i % P``, one per batch (a share fetch acquires whole
   batches); every ``release_every``-th value starts with ``later:``, every ``reject_every``-th
   with ``poison:``;
4. ``crash_consumers`` members die by SIGKILL, ``freeze_consumers`` stop by SIGSTOP, at the
   program's crash point on their ``crash_after``-th processed record;
5. the run ends once the ledgers show every record accepted, rejected or archived (plus, if any
   record was released or rejected, one more lock in which nothing may come back), and the
   Spark audit (``share_groups_analysis``) counts it all;
6. with ``compare_consumer_group``, C processes of the notebook's ``group_member`` (role
   ``consumer``) in a consumer group on the same topic: how many get a partition (at most P);
   it forms once every record is final, while the share group's members still run and the
   one more lock of step 5 is watched;
7. with ``dlq``, the group names a dead-letter topic (KIP-1191, Kafka 4.4.0), made by hand
   before the members start (``dlq_topic_configs``); once every record is final, the DLQ
   topic is read back (``read_dlq``) until it holds one record per rejected or archived one.

Sources: KIP-932; Kafka documentation 4.3, "Share groups" and "Group Configs";
``ShareGroupConfig`` in kafka-group-coordinator 4.4.0 (broker bounds); confluent-kafka 2.16
``ShareConsumer`` (librdkafka 2.16: Preview); KIP-1191 and, for its config names, defaults and
headers, the Kafka 4.4.0 jars (``GroupConfig``, ``GroupCoordinatorConfig``, ``TopicConfig``,
``server.share.dlq.ShareGroupDLQStateManager``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from .. import admin, ledger, programs, runscope, workloads
from ..errors import KafkalabError
from ..programs import Program, java_source
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf

#: The lab's broker settings for share groups (kafka/config/broker.properties, teaching values):
#: the acquisition lock and the delivery count limit a group gets when it sets none, and the
#: lowest lock a group may set. Kafka 4.3's defaults: 30000 ms, 5, 15000 ms.
BROKER_LOCK_MS = 5000
BROKER_DELIVERY_COUNT_LIMIT = 3
BROKER_MIN_LOCK_MS = 1000
#: The notebook whose programs the runs execute (``kafkalab.programs.from_notebook``).
NOTEBOOK = "09_share_groups"
#: Value prefixes of the records the program cannot handle now (it RELEASEs them) or ever (REJECTs them).
LATER, POISON = "later:", "poison:"
#: KIP-1191 (Kafka 4.4.0): the broker's required prefix of DLQ topic names
#: (``errors.deadletterqueue.topic.name.prefix``, default "dlq.", ``GroupCoordinatorConfig``).
DLQ_PREFIX = "dlq."
#: The headers the broker writes on every DLQ record (``ShareGroupDLQStateManager``, kafka-server 4.4.0).
DLQ_HEADERS = ("__dlq.errors.group", "__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset",
               "__dlq.errors.delivery.count", "__dlq.errors.message")


def share_program() -> Program:
    """The notebook's share consumer program, ``share_consumer``, as saved."""
    return programs.from_notebook(NOTEBOOK, "share_consumer")


def group_program() -> Program:
    """The notebook's consumer group member, ``group_member``, as saved."""
    return programs.from_notebook(NOTEBOOK, "group_member")


@dataclass
class ShareRun:
    """The shape of one run (see the module docstring). Times in ms.

    Attributes:
        consumers: share consumer processes (C), >= 1.
        partitions: partitions of the topic (P), >= 1.
        messages: records produced (N), >= 1.
        crash_consumers: members killed (SIGKILL) at the program's crash point.
        freeze_consumers: members stopped (SIGSTOP) at the program's crash point.
        crash_after: the crash point fires on this processed record of a stopped member.
        release_every: every R-th record (``i % R == R - 1``) is a ``later:`` record (the
            notebook's program RELEASEs it at each delivery); 0: none.
        reject_every: every R-th record is a ``poison:`` record (the program REJECTs it); 0:
            none. A record both would mark is ``later:``.
        delivery_count_limit: group config ``share.delivery.count.limit``.
        lock_ms: group config ``share.record.lock.duration.ms`` (the acquisition lock).
        process_ms: work per record (``lab.work``) of the fastest consumer (``process_ms_of``).
        compare_consumer_group: also run C members of a consumer group on the topic.
        describe_held: with ``freeze_consumers``: once every frozen member has stopped and
            every other record is accepted, rejected or archived, describe the
            share-partitions (``kafka-share-groups --describe --offsets``) while the frozen
            members still hold their records (``ShareGroupResult.held_window``), then SIGKILL
            them, so their records come back at once. Give the run a lock longer than that
            takes (``lock_ms`` up to 60000), or the lock releases them first.
        program: the share consumer every member runs (None: the notebook's ``share_consumer``).
        group_program: the consumer group member of ``compare_consumer_group`` (None: the
            notebook's ``group_member``).
        dlq: the group names a dead-letter topic (group config
            ``errors.deadletterqueue.topic.name``, KIP-1191), ``dlq.<run>-dead``, which the run
            creates by hand with ``dlq_topic_configs()`` (1 partition).
        dlq_copy_record: with ``dlq``: group config ``errors.deadletterqueue.copy.record.enable``
            (the DLQ record carries the original key and value; else only the headers).
    """

    consumers: int = 4
    partitions: int = 2
    messages: int = 60
    crash_consumers: int = 0
    freeze_consumers: int = 0
    crash_after: int = 3
    release_every: int = 0
    reject_every: int = 0
    delivery_count_limit: int = BROKER_DELIVERY_COUNT_LIMIT
    lock_ms: int = BROKER_LOCK_MS
    process_ms: float = 20.0
    compare_consumer_group: bool = False
    describe_held: bool = False
    program: Program | None = None
    group_program: Program | None = None
    dlq: bool = False
    dlq_copy_record: bool = False

    def __post_init__(self) -> None:
        if self.consumers < 1 or self.partitions < 1 or self.messages < 1:
            raise KafkalabError(f"need consumers, partitions and messages >= 1; got {self.consumers}, "
                                f"{self.partitions}, {self.messages}")
        if self.crash_consumers < 0 or self.freeze_consumers < 0:
            raise KafkalabError("crash_consumers and freeze_consumers must be >= 0")
        if self.crash_consumers + self.freeze_consumers >= self.consumers:
            raise KafkalabError(f"{self.crash_consumers} crashed + {self.freeze_consumers} frozen of "
                                f"{self.consumers} consumers: at least one must stay to receive their records")
        if self.crash_after < 1:
            raise KafkalabError(f"crash_after must be >= 1, not {self.crash_after}")
        stopping = self.crash_consumers + self.freeze_consumers
        if stopping * self.crash_after > self.messages:
            raise KafkalabError(f"{stopping} consumers that stop after {self.crash_after} processed records each need "
                                f"at least {stopping * self.crash_after} messages, not {self.messages}")
        if self.release_every < 0 or self.reject_every < 0:
            raise KafkalabError("release_every and reject_every must be >= 0")
        if not 2 <= self.delivery_count_limit <= 10:
            raise KafkalabError(f"delivery_count_limit must be 2..10 (group.share.min/max.delivery.count.limit), "
                                f"not {self.delivery_count_limit}")
        if self.describe_held and not self.freeze_consumers:
            raise KafkalabError("describe_held needs freeze_consumers >= 1: only a frozen member holds records on purpose")
        if self.dlq_copy_record and not self.dlq:
            raise KafkalabError("dlq_copy_record needs dlq: without a DLQ topic there is nothing to copy to")
        if self.lock_ms < BROKER_MIN_LOCK_MS:
            raise KafkalabError(f"lock_ms must be >= {BROKER_MIN_LOCK_MS} (group.share.min.record.lock.duration.ms "
                                f"in kafka/config/broker.properties), not {self.lock_ms}")

    def prefix(self, i: int) -> str:
        """The value prefix of record ``i`` (partition ``i % partitions``): ``LATER``, ``POISON`` or ``""``."""
        if self.release_every and i % self.release_every == self.release_every - 1:
            return LATER
        if self.reject_every and i % self.reject_every == self.reject_every - 1:
            return POISON
        return ""

    @property
    def wait_max_ms(self) -> float:
        """The longest the program's barrier and overtaking wait hold a record: half the
        acquisition lock, so it is acknowledged before the lock could run out."""
        return self.lock_ms / 2

    def process_ms_of(self, index: int) -> float:
        """Consumer ``index``'s work per record: ``process_ms`` times 1, 2, 3, 4, 1, 2, ...
        Members work at different speeds, as real ones do; on a shared partition a fast
        member then processes later offsets while a slow one still holds an earlier one."""
        return self.process_ms * (1 + index % 4)

    def role(self, index: int) -> str:
        """Consumer ``index``'s part: ``crash`` (the first ``crash_consumers``), ``freeze``
        (the next ``freeze_consumers``) or ``run``."""
        if index < self.crash_consumers:
            return "crash"
        if index < self.crash_consumers + self.freeze_consumers:
            return "freeze"
        return "run"

    def to_json(self) -> dict:
        """Every setting, JSON-ready; the programs by name and origin."""
        return asdict(self) | {k: p and f"{p.name} ({p.origin})" for k, p in
                               (("program", self.program), ("group_program", self.group_program))}


@dataclass
class ShareGroupResult:
    """What ``run_share_group`` saw. Counts are over the run's ledgers (Spark,
    ``share_groups_analysis.account``); ``lost = produced - accepted_unique - rejected - archived``.

    Attributes:
        produced: records acknowledged by the brokers to the producer.
        consumers_with_records: share consumers that received at least one record.
        accepted_unique: records acknowledged ACCEPT (counted once).
        rejected: records acknowledged REJECT and never accepted.
        archived: records delivered ``delivery_count_limit`` times, never accepted or rejected.
        lost: records in none of those states.
        deliveries: records handed to consumers, counting each delivery.
        redelivered: deliveries with a delivery count above 1.
        max_delivery_count: the highest delivery count seen.
        deliveries_past_limit: deliveries with a count above the limit (KIP-932: none).
        duplicates_processed: records whose processing ran more than once.
        per_partition_inversions: places where, per partition, the offset processed next is
            below the one processed before it, across all consumers in time order.
        records_per_consumer: ``client.id`` -> deliveries.
        returned_after_ms: per crashed or frozen consumer: ms from its taking a record it
            never acknowledged to that record's next delivery to another consumer (the
            earliest such record).
        held_processed: records a crashed or frozen consumer processed and never acknowledged.
        roles: ``client.id`` -> ``crash``, ``freeze`` or ``run``.
        members_at_start: ``client.id`` -> partitions the coordinator assigned it before the
            records were produced.
        consumer_group_members_with_partitions: with ``compare_consumer_group``: members of a
            consumer group on the same topic that got a partition; else None.
        share_offsets: per partition, the share-partition start offset and lag at the end
            (``kafka-share-groups --describe --offsets``).
        group_configs: the group configs as the broker reports them.
        held_window: with ``describe_held``: per partition (``str``), what the share
            coordinator showed while the frozen members held records: ``start_offset`` (the
            SPSO) and ``lag`` (``kafka-share-groups --describe --offsets``), ``held`` (the
            offsets held, acquired and never acknowledged), ``accepted_above`` (offsets above
            the lowest held one already acknowledged ACCEPT) and ``end_offset`` (the
            partition's high watermark); else None.
        dlq_topic: with ``ShareRun.dlq``: the group's DLQ topic; else None.
        dlq_records: with ``ShareRun.dlq``: every record of the DLQ topic (``read_dlq``); else None.
    """

    topic: str
    group: str
    config: dict
    produced: int
    consumers_with_records: int
    accepted_unique: int
    rejected: int
    archived: int
    lost: int
    deliveries: int
    redelivered: int
    max_delivery_count: int
    deliveries_past_limit: int
    duplicates_processed: int
    per_partition_inversions: int
    records_per_consumer: dict[str, int]
    returned_after_ms: dict[str, int | None]
    held_processed: int
    roles: dict[str, str]
    members_at_start: dict[str, list[int]]
    consumer_group_members_with_partitions: int | None
    share_offsets: dict[str, dict]
    group_configs: dict[str, str | None]
    held_window: dict[str, dict] | None
    lab_conf: dict[str, str]
    elapsed_ms: int
    dlq_topic: str | None = None
    dlq_records: list[dict] | None = None
    ledger_dir: str = field(default="", repr=False)

    def to_json(self) -> dict:
        """Every field, JSON-ready."""
        return asdict(self)


def group_configs(cfg: ShareRun, dlq_topic: str | None = None) -> dict[str, str | int]:
    """The group configs a run sets on its share group; with ``dlq_topic``, the two dead-letter
    ones too (KIP-1191; ``GroupConfig``, kafka-group-coordinator 4.4.0)."""
    out: dict[str, str | int] = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": cfg.lock_ms,
                                 "share.delivery.count.limit": cfg.delivery_count_limit}
    if dlq_topic:
        out |= {"errors.deadletterqueue.topic.name": dlq_topic,
                "errors.deadletterqueue.copy.record.enable": str(cfg.dlq_copy_record).lower()}
    return out


def dlq_topic_configs() -> dict[str, str]:
    """The topic config a DLQ topic made by hand needs: ``errors.deadletterqueue.group.enable``
    (default false: "attempts to use this topic as a DLQ will be rejected"; ``TopicConfig``,
    kafka-clients 4.4.0; KIP-1191). Its name must also start with ``DLQ_PREFIX``."""
    return {"errors.deadletterqueue.group.enable": "true"}


def read_dlq(topic: str, at_least: int, timeout_s: float = 30.0) -> list[dict]:
    """Every record of the 1-partition DLQ topic ``topic``, once its high watermark reaches
    ``at_least`` (the broker writes DLQ records asynchronously, after the acknowledgement):
    ``offset``, ``key``, ``value`` (str or None) and ``headers`` (name -> str), by offset.

    Raises:
        KafkalabError: the consumer reported an error.
        WaitTimeout: fewer than ``at_least`` records within ``timeout_s`` seconds.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from .. import config

    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": f"{topic}-reader",
                  "enable.auto.commit": False, "log_level": 3})
    try:
        end = wait_until(lambda: (hw := c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]) >= at_least
                         and hw, timeout_s=timeout_s, interval_s=0.2,
                         what=f"{at_least} records in the DLQ topic {topic}")
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[dict] = []

        def done() -> bool:
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error() is not None:
                    raise KafkalabError(f"reading {topic}: {m.error()}")
                got.append({"offset": m.offset(), "key": m.key() and m.key().decode(),
                            "value": m.value() and m.value().decode(),
                            "headers": {k: v and v.decode() for k, v in m.headers() or []}})
            return bool(got) and got[-1]["offset"] >= end - 1

        wait_until(done, timeout_s=timeout_s, interval_s=0.0, what=f"{topic} read to offset {end}")
        return got
    finally:
        c.close()


def dlq_write_failures(group: str, timeout_s: float = 30.0, lines: int = 2000) -> list[str]:
    """The brokers' reasons for not writing ``group``'s records to its DLQ topic: the lines
    ``ConfigException: ... share group: <group>, ...`` that follow ``ERROR Failed to write to
    DLQ, proceeding to ARCHIVED regardless. (kafka.server.share.SharePartition)`` in the last
    ``lines`` lines of each broker's log (Kafka 4.4.0), waited for until at least one shows.

    Raises:
        WaitTimeout: no broker logged one within ``timeout_s`` seconds.
    """
    from .. import cluster, config

    c = cluster.cluster()
    brokers = list(config.BROKER_IDS)
    needle = f"share group: {group},"

    def found() -> list[str]:
        return sorted({line.strip() for b in brokers for line in c.logs(b, lines).splitlines() if needle in line})

    return wait_until(found, timeout_s=timeout_s, interval_s=0.5,
                      what=f"a broker's log to say why share group {group} wrote no DLQ record")


def _records(cfg: ShareRun) -> list[tuple]:
    from ..data import workload_record

    out = []
    for i in range(cfg.messages):
        f, rid = workload_record(i)
        out.append((f.key.encode(), (cfg.prefix(i) + rid).encode(), i % cfg.partitions, None))
    return out


def final_values(events: list[ledger.Event], limit: int, gone: set[str]) -> set[str]:
    """The records (values) in a final state, read from ledger events (in the run process,
    while it waits): acknowledged ACCEPT or REJECT; or delivered ``limit`` times and, at that
    delivery, RELEASEd or held by a consumer in ``gone`` (crashed or frozen), so that the
    broker archives it."""
    done: set[str] = set()
    for e in events:
        if e.value is None or e.error is not None:
            continue
        if e.kind == "acknowledged" and e.ack in ("ACCEPT", "REJECT"):
            done.add(e.value)
        elif (e.delivery_count or 0) >= limit and (
                (e.kind == "acknowledged" and e.ack == "RELEASE") or (e.kind == "consumed" and e.client_id in gone)):
            done.add(e.value)
    return done


def past_limit(events: list[ledger.Event], limit: int) -> int:
    """Deliveries whose delivery count is above ``limit`` (KIP-932: there are none)."""
    return sum(1 for e in events if e.kind == "consumed" and (e.delivery_count or 0) > limit)


def held_offsets(events: list[ledger.Event], clients: set[str]) -> dict[int, list[int]]:
    """Per partition, the offsets that a consumer in ``clients`` received and has not
    acknowledged (acquired and held), from ledger events."""
    acked = {(e.client_id, e.partition, e.offset, e.delivery_count) for e in events if e.kind == "acknowledged"}
    out: dict[int, list[int]] = {}
    for e in events:
        if (e.kind == "consumed" and e.client_id in clients and e.error is None and e.offset is not None
                and (e.client_id, e.partition, e.offset, e.delivery_count) not in acked):
            out.setdefault(e.partition, []).append(e.offset)
    return {p: sorted(offs) for p, offs in sorted(out.items())}


def crash_points_missed(events: list[ledger.Event], crash_after: int, gone: set[str]) -> list[str]:
    """The crashed or frozen consumers (``gone``) whose ledger shows fewer than
    ``crash_after`` processed records: they never reached their crash point."""
    processed = {c: 0 for c in gone}
    for e in events:
        if e.kind == "processed" and e.client_id in processed:
            processed[e.client_id] += 1
    return sorted(c for c, n in processed.items() if n < crash_after)


def _terminate_all(workers: list[workloads.Worker]) -> None:
    """SIGTERM to every worker at once, then each waited for (``Worker.terminate``): the members
    close and leave their group side by side, not one after another."""
    for w in workers:
        if w.alive:
            w.popen.terminate()
    for w in workers:
        w.terminate(timeout_s=15)


def _member_spec(cfg: ShareRun, program: Program, run_id: str, folder: Path, group: str, topic: str,
                 index: int) -> ProgramSpec:
    name = f"share-{index}"
    role = cfg.role(index)
    options = {"process_ms": cfg.process_ms_of(index), "crash_after": cfg.crash_after if role != "run" else None,
               "crash_signal": "SIGSTOP" if role == "freeze" else "SIGKILL", "members": cfg.consumers,
               "wait_max_ms": cfg.wait_max_ms}
    return ProgramSpec(name, run_id, str(folder / f"{name}.jsonl"), "share", program.name, program.source,
                       conf=lab_conf(name, group), topics=[topic], options=options)


def compare_consumer_group(program: Program, run: RunScope, topic: str, partitions: int, members: int,
                           timeout_s: float) -> int:
    """Run ``members`` processes of ``program`` (role ``consumer``, the notebook's
    ``group_member``) in a fresh consumer group on ``topic``; once the coordinator reports the
    group STABLE with all of them and every partition assigned, return how many got a
    partition. The processes are stopped before it returns.

    Raises:
        KafkalabError: a member exited.
        WaitTimeout: the group was not stable within ``timeout_s``.
    """
    group = run.group("classic")
    folder = workloads.run_dir(run.run_id) / "consumer-group"
    folder.mkdir(exist_ok=True)
    procs = [workloads.spawn(ProgramSpec(f"classic-{i}", run.run_id, str(folder / f"classic-{i}.jsonl"), "consumer",
                                         program.name, program.source, conf=lab_conf(f"classic-{i}", group),
                                         topics=[topic]))
             for i in range(members)]
    try:
        def stable():
            for w in procs:
                if not w.alive:
                    raise KafkalabError(f"{w.name} exited {w.returncode}:\n{w.log_tail()}")
            state, assigned = workloads.broker_assignment(group)
            flat = [tp for tps in assigned.values() for tp in tps]
            if state != "STABLE" or len(assigned) != members or len(flat) != partitions:
                return None
            return assigned

        assigned = wait_until(stable, timeout_s=timeout_s, interval_s=0.3,
                              what=f"consumer group {group}: {members} members, STABLE, {partitions} partitions assigned")
        return sum(1 for tps in assigned.values() if tps)
    finally:
        _terminate_all(procs)


class _ShareGroupRun:
    """One ``run_share_group``: its topic, share group, member processes and ledgers, and one
    method per phase, called in this order: ``start_members``, ``wait_joined``,
    ``produce_records``, ``wait_final`` (which calls ``describe_held`` with
    ``ShareRun.describe_held``), ``watch_one_more_lock`` (only if a record is released or
    rejected), ``check_crash_points``, ``stop_all``. ``run.cleanup()`` (always) stops every
    member (``stop_all``) and deletes the topic and group. What a phase finds is an attribute
    the later phases read."""

    # set by the phases, in this order
    topic: str
    group: str
    folder: Path
    produced: set[str]
    places: dict[str, tuple[int, int]]
    gone: set[str]
    frozen: list[str]

    def __init__(self, cfg: ShareRun):
        self.cfg = cfg
        self.run = RunScope("share")
        self.procs: dict[str, workloads.Worker] = {}
        self.held_window: dict[str, dict] | None = None
        self.run.on_cleanup(self.stop_all)

    def events(self) -> list[ledger.Event]:
        """Every ledger of the run (the members' and the producer's), read while the members append."""
        return ledger.read_events(self.folder, growing=True)

    def role(self, name: str) -> str:
        """Member ``name``'s (``share-<i>``) part: ``crash``, ``freeze`` or ``run`` (``ShareRun.role``)."""
        return self.cfg.role(int(name.rsplit("-", 1)[1]))

    def stop_all(self) -> None:
        """The frozen members SIGKILLed (a stopped process acts on no SIGTERM until it is
        continued), every other one terminated (``_terminate_all``)."""
        frozen = [w for name, w in self.procs.items() if self.role(name) == "freeze"]
        for w in frozen:
            w.kill()
        _terminate_all([w for w in self.procs.values() if w not in frozen])

    def start_members(self, program: Program) -> None:
        """The share group's configs set, the topic created, one process of ``program`` per
        member (``_member_spec``)."""
        self.topic, self.group = self.run.topic("queue"), self.run.group("share")
        self.folder = workloads.run_dir(self.run.run_id)
        # Group configs first: a broker that knows the topic (create_topics waits for all) has
        # also applied them, so every share-partition starts with this run's lock and limit.
        self.dlq_topic = self.run.add_topic(DLQ_PREFIX + self.run.name("dead")) if self.cfg.dlq else None
        if self.dlq_topic:
            admin.create_topics({self.dlq_topic: 1}, topic_config=dlq_topic_configs())
        admin.alter_group_config(self.group, group_configs(self.cfg, self.dlq_topic))
        admin.create_topics({self.topic: self.cfg.partitions})
        for i in range(self.cfg.consumers):
            spec = _member_spec(self.cfg, program, self.run.run_id, self.folder, self.group, self.topic, i)
            self.procs[spec.name] = workloads.spawn(spec)

    def wait_joined(self, timeout_s: float) -> list:
        """Until the coordinator lists every member, each with an assignment; returns its members
        (``admin.share_group_members``).

        Raises:
            KafkalabError: a member exited before the group formed.
            WaitTimeout: not all members with an assignment within ``timeout_s`` seconds.
        """
        def joined():
            for name, w in self.procs.items():
                if not w.alive:
                    raise KafkalabError(f"{name} exited {w.returncode} before the group formed:\n{w.log_tail()}")
            ms = admin.share_group_members(self.group)
            return ms if len(ms) == self.cfg.consumers and all(m.partitions for m in ms) else None

        return wait_until(joined, timeout_s=timeout_s, interval_s=0.5,
                          what=f"{self.cfg.consumers} members of share group {self.group}, each with an assignment")

    def produce_records(self) -> None:
        """The workload records produced, one per batch, each an ``acked`` line of the
        producer's ledger; ``produced`` (values) and ``places`` (value -> (partition, offset))."""
        records = _records(self.cfg)
        placed = workloads.produce(self.topic, records, conf={"log_level": 3, "linger.ms": 0, "batch.num.messages": 1})
        with ledger.Ledger(self.folder / "producer.jsonl", self.run.run_id) as book:
            for (key, value, _, _), (p, off) in zip(records, placed):
                book.record("acked", topic=self.topic, partition=p, offset=off, key=key.decode(), value=value.decode(),
                            client_id="producer")
        self.produced = {v.decode() for _, v, _, _ in records}
        self.places = {v.decode(): where for (_, v, _, _), where in zip(records, placed)}
        self.gone = {name for name in self.procs if self.role(name) != "run"}
        self.frozen = sorted(name for name in self.gone if self.role(name) == "freeze")

    def describe_held(self) -> None:
        """Once every frozen member stopped at its crash point and everything else is settled
        (the records still in flight are exactly the held ones): the share-partitions described
        (``held_window``), then the frozen members SIGKILLed. Does nothing before that."""
        events = self.events()
        held = held_offsets(events, set(self.frozen))
        if not all(self.procs[n].stopped for n in self.frozen) or not held:
            return
        settled = final_values(events, self.cfg.delivery_count_limit, set())
        if not self.produced - settled <= {v for v, (p, o) in self.places.items() if o in held.get(p, [])}:
            return
        described = admin.share_group_offsets(self.group)
        events = self.events()  # the frozen members hold theirs still: nothing moved below them
        accepted = {(e.partition, e.offset) for e in events if e.kind == "acknowledged" and e.ack == "ACCEPT"}
        self.held_window = {str(p): {**described[(self.topic, p)], "held": offs,
                                     "end_offset": 1 + max(o for q, o in self.places.values() if q == p),
                                     "accepted_above": sum(1 for q, o in accepted if q == p and o > offs[0])}
                            for p, offs in held.items()}
        for n in self.frozen:
            self.procs[n].kill()

    def not_final(self) -> set[str]:
        """The produced values not yet in a final state (``final_values``)."""
        return self.produced - final_values(self.events(), self.cfg.delivery_count_limit, self.gone)

    def wait_final(self, timeout_s: float) -> None:
        """Until the ledgers show every record accepted, rejected or archived.

        Raises:
            KafkalabError: a member that was to keep running exited.
            WaitTimeout: records not final within ``timeout_s`` seconds.
        """
        def final():
            for name, w in self.procs.items():
                if not w.alive and name not in self.gone:
                    raise KafkalabError(f"{name} exited {w.returncode}:\n{w.log_tail()}")
            if self.cfg.describe_held and self.held_window is None:
                self.describe_held()
            return not self.not_final()

        wait_until(final, timeout_s=timeout_s, interval_s=0.3,
                   what=f"all {self.cfg.messages} records of {self.topic} accepted, rejected or archived",
                   on_timeout=lambda: f"{len(self.not_final())} not final")

    def watch_one_more_lock(self) -> None:
        """One more acquisition lock (``lock_ms``): a rejected or archived record must not be
        delivered again. Ends early if one is delivered past the limit (the audit then reports it)."""
        end = time.monotonic() + self.cfg.lock_ms / 1000
        wait_until(lambda: time.monotonic() >= end or past_limit(self.events(), self.cfg.delivery_count_limit),
                   timeout_s=self.cfg.lock_ms / 1000 + 5, interval_s=0.2,
                   what="one acquisition lock after the last record was settled")

    def check_crash_points(self) -> None:
        """Raises KafkalabError if a crashed or frozen member processed fewer than
        ``crash_after`` records (it never reached its crash point)."""
        missed = crash_points_missed(self.events(), self.cfg.crash_after, self.gone)
        if missed:
            raise KafkalabError(f"{', '.join(missed)} processed fewer than crash_after={self.cfg.crash_after} records, "
                                f"so never crashed or froze: give each consumer more records (messages) or a lower "
                                f"crash_after")



def run_share_group(cfg: ShareRun | None = None, timeout_s: float = 90.0, spark=None) -> ShareGroupResult:
    """Run one share group experiment (module docstring) and audit it.

    Args:
        cfg: the run's shape and programs (defaults: ``ShareRun()``, the notebook's programs).
        timeout_s: bound of each wait (members joined, all records final), seconds.
        spark: a SparkSession for the audit (``kafkalab.spark.session()`` if None).

    Returns:
        ShareGroupResult; topic and group deleted, every process stopped.

    Raises:
        KafkalabError: bad settings, or a consumer process failed (its log's tail in the message).
        ProgramError: no program given and the notebook's cannot be read.
        WaitTimeout: the members did not all get an assignment, or records were not final,
            within ``timeout_s`` (the message says which).
    """
    from .share_groups_analysis import account

    cfg = cfg or ShareRun()
    program = cfg.program or share_program()
    member = cfg.group_program or (group_program() if cfg.compare_consumer_group else None)
    t0 = time.monotonic()
    sg = _ShareGroupRun(cfg)
    try:
        sg.start_members(program)
        at_start = sg.wait_joined(timeout_s)
        sg.produce_records()
        sg.wait_final(timeout_s)
        # The consumer group (a group of its own on the same topic, while the share group's
        # members still run) forms while the share group is watched for one more lock.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="consumer-group") as pool:
            comparing = pool.submit(compare_consumer_group, member, sg.run, sg.topic, cfg.partitions, cfg.consumers,
                                    timeout_s) if cfg.compare_consumer_group else None
            if cfg.release_every or cfg.reject_every:
                sg.watch_one_more_lock()
            sg.check_crash_points()
            dlq_records = None
            if sg.dlq_topic:
                accepted = {e.value for e in sg.events() if e.kind == "acknowledged" and e.ack == "ACCEPT"}
                dlq_records = read_dlq(sg.dlq_topic, len(sg.produced - accepted), timeout_s)
            share_offsets = admin.share_group_offsets(sg.group)
            described = admin.describe_config("group", sg.group, list(group_configs(cfg, sg.dlq_topic)))
            compared = comparing.result() if comparing else None  # its members stopped; re-raises its error
        sg.stop_all()
        roles = {name: sg.role(name) for name in sg.procs}
        counts = account(sg.folder, cfg.delivery_count_limit, roles, spark=spark)
        return ShareGroupResult(
            topic=sg.topic, group=sg.group,
            config=cfg.to_json() | {"program": f"{program.name} ({program.origin})",
                                    "group_program": member and f"{member.name} ({member.origin})"},
            **counts, roles=roles,
            members_at_start={m.client_id: sorted(p for _, p in m.partitions) for m in at_start},
            consumer_group_members_with_partitions=compared,
            share_offsets={str(p): v for (_, p), v in sorted(share_offsets.items())},
            group_configs={k: v.value for k, v in described.items()}, held_window=sg.held_window,
            lab_conf=lab_conf("share-0", sg.group), elapsed_ms=int((time.monotonic() - t0) * 1000),
            dlq_topic=sg.dlq_topic, dlq_records=dlq_records, ledger_dir=str(sg.folder))
    finally:
        sg.run.cleanup()


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("share-group")
@click.option("--consumers", type=click.IntRange(1, 20), default=4, show_default=True, help="Share consumers (C).")
@click.option("--partitions", type=click.IntRange(1, 50), default=2, show_default=True, help="Partitions (P).")
@click.option("--messages", type=click.IntRange(1, 100_000), default=60, show_default=True, help="Records (N).")
@click.option("--crash-consumers", type=click.IntRange(0), default=0, show_default=True,
              help="Consumers SIGKILLed at the program's crash point (holding a processed, unacknowledged record).")
@click.option("--freeze-consumers", type=click.IntRange(0), default=0, show_default=True,
              help="Consumers SIGSTOPped (hung) at the same point: their records come back after the lock.")
@click.option("--crash-after", type=click.IntRange(1), default=3, show_default=True,
              help="The crash point fires on this processed record.")
@click.option("--release-every", type=click.IntRange(0), default=0, show_default=True,
              help="Every R-th record is a 'later:' record: the program RELEASEs it (archived after the limit).")
@click.option("--reject-every", type=click.IntRange(0), default=0, show_default=True,
              help="Every R-th record is a 'poison:' record: the program REJECTs it.")
@click.option("--delivery-count-limit", type=click.IntRange(2, 10), default=BROKER_DELIVERY_COUNT_LIMIT,
              show_default=True, help="Group config share.delivery.count.limit.")
@click.option("--lock-ms", type=click.IntRange(BROKER_MIN_LOCK_MS, 60000), default=BROKER_LOCK_MS, show_default=True,
              help="Group config share.record.lock.duration.ms (the acquisition lock).")
@click.option("--process-ms", type=click.FloatRange(0), default=20.0, show_default=True, help="Work per record, ms.")
@click.option("--compare-consumer-group", is_flag=True, help="Also run C members of a consumer group on the topic.")
@click.option("--describe-held", is_flag=True,
              help="With --freeze-consumers: describe the share-partitions while the frozen ones hold records, then kill them.")
@click.option("--dlq", is_flag=True,
              help="The group names a dead-letter topic (KIP-1191, Kafka 4.4.0), made by hand: rejected and archived "
                   "records land there.")
@click.option("--dlq-copy-record", is_flag=True,
              help="With --dlq: errors.deadletterqueue.copy.record.enable=true (the DLQ record carries key and value).")
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True)
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def cli_command(consumers: int, partitions: int, messages: int, crash_consumers: int, freeze_consumers: int,
                crash_after: int, release_every: int, reject_every: int, delivery_count_limit: int, lock_ms: int,
                process_ms: float, compare_consumer_group: bool, describe_held: bool, dlq: bool, dlq_copy_record: bool,
                timeout_s: float, as_json: bool) -> None:
    """Share group (KIP-932): C members on P partitions, each running notebook 09's program
    share_consumer (per-record acknowledgement), audited."""
    try:
        cfg = ShareRun(consumers, partitions, messages, crash_consumers, freeze_consumers, crash_after, release_every,
                       reject_every, delivery_count_limit, lock_ms, process_ms,
                       compare_consumer_group=compare_consumer_group, describe_held=describe_held,
                       dlq=dlq, dlq_copy_record=dlq_copy_record, program=share_program(),
                       group_program=group_program() if compare_consumer_group else None)
    except KafkalabError as e:
        raise click.UsageError(str(e)) from None
    runscope.require_for_cli()  # after the settings are checked: bad input fails before the cluster is touched
    show_programs(cfg.program, cfg.group_program)
    r = run_share_group(cfg, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps({k: v for k, v in r.to_json().items() if k != "ledger_dir"}, indent=2))
        return
    click.echo(f"program {r.config['program']}; lab.conf adds {', '.join(r.lab_conf)}")
    click.echo(f"{r.produced} records, {partitions} partitions, {consumers} share consumers "
               f"({r.consumers_with_records} received records)")
    click.echo(f"accepted {r.accepted_unique}, rejected {r.rejected}, archived {r.archived}, lost {r.lost}")
    click.echo(f"deliveries {r.deliveries} ({r.redelivered} redelivered, highest delivery count "
               f"{r.max_delivery_count}); processed more than once: {r.duplicates_processed}; "
               f"per-partition inversions: {r.per_partition_inversions}")
    if r.dlq_records is not None:
        counts = sorted(int(d["headers"].get("__dlq.errors.delivery.count", 0)) for d in r.dlq_records)
        click.echo(f"dead-letter topic {r.dlq_topic}: {len(r.dlq_records)} records, delivery counts {counts}")


# ----------------------------------------------------------------------------- RENEW (Java)

#: The Java share consumer of the RENEW runs (KIP-1222); its source is
#: ``kafka/src/main/java/kafkalab/clients/ShareRenewConsumer.java``, built by ``make jars``.
RENEW_JAVA_CLASS = "kafkalab.clients.ShareRenewConsumer"
#: The part of its source notebook 09 shows (``programs.java_source`` markers).
RENEW_JAVA_SHOWN = ("kafkalab/clients/ShareRenewConsumer.java", "Properties props = new Properties();",
                    "// --- to here")


@dataclass
class RenewResult:
    """What ``run_renew`` saw: two Java members of one share group, one record whose work takes
    ``work_ms`` under an acquisition lock of ``lock_ms`` (ms), with a delivery count limit of 2.

    Attributes:
        renew: the members acknowledged RENEW while they worked (KIP-1222).
        deliveries: deliveries of the record, in order: ``client``, ``delivery_count``, ``ms``
            (since the first delivery).
        acknowledgements: in order: ``client``, ``ack`` (RENEW or ACCEPT), ``error`` (None: the
            broker took it; else the exception class of ``commitSync``'s answer), ``ms``.
        members_delivered: distinct members the record was delivered to.
        accepted: ACCEPTs the broker took (0 or 1).
        renewed: RENEWs the broker took.
        lock_ms, work_ms: the group's ``share.record.lock.duration.ms`` and the work per record.
    """

    renew: bool
    topic: str
    group: str
    lock_ms: int
    work_ms: int
    deliveries: list[dict]
    acknowledgements: list[dict]
    members_delivered: int
    accepted: int
    renewed: int

    def to_json(self) -> dict:
        """Every field, JSON-ready."""
        return asdict(self)


def renew_outcome(lines: list[dict]) -> tuple[list[dict], list[dict]]:
    """The deliveries and acknowledgements of ``ShareRenewConsumer`` ledger lines (one dict per
    JSON line, every member's), in time order, ``ms`` counted from the first delivery."""
    lines = sorted(lines, key=lambda e: e["ms"])
    t0 = next((e["ms"] for e in lines if e["event"] == "delivered"), 0)
    deliveries = [{"client": e["client"], "delivery_count": e["delivery_count"], "ms": e["ms"] - t0}
                  for e in lines if e["event"] == "delivered"]
    acks = [{"client": e["client"], "ack": e["ack"], "error": e["error"], "ms": e["ms"] - t0}
            for e in lines if e["event"] == "acknowledged"]
    return deliveries, acks


def renew_settled(deliveries: list[dict], acks: list[dict]) -> bool:
    """Every delivery of the record has its last acknowledgement: an ACCEPT (taken or not), or an
    answer with an error (the member lost the record)."""
    finals = [a for a in acks if a["ack"] == "ACCEPT" or a["error"] is not None]
    return bool(deliveries) and len(finals) >= len(deliveries)


def run_renew(renew: bool, lock_ms: int = 4000, work_ms: int = 6000, timeout_s: float = 90.0) -> RenewResult:
    """Two ``ShareRenewConsumer`` processes (``RENEW_JAVA_CLASS``, kafka-clients 4.4.0) in a fresh
    share group (group configs: ``share.auto.offset.reset=earliest``, ``share.record.lock.duration.ms``
    = ``lock_ms``, ``share.delivery.count.limit=2``) on a fresh topic of one record; once both
    have joined, the record is produced; the run ends when every delivery of it has its last
    acknowledgement (``renew_settled``), then stops the members and deletes topic and group.
    ``run_renews([renew], ...)``.

    Raises:
        JarsMissing: ``make jars`` has not built the program.
        KafkalabError: ``work_ms`` not above ``lock_ms`` (nothing would outlast the lock), or a
            member exited early (its log's tail in the message).
        WaitTimeout: the group did not form or the record did not settle within ``timeout_s``.
    """
    [result] = run_renews([renew], lock_ms=lock_ms, work_ms=work_ms, timeout_s=timeout_s)
    return result


def run_renews(modes: list[bool], lock_ms: int = 4000, work_ms: int = 6000,
               timeout_s: float = 90.0) -> list[RenewResult]:
    """``run_renew`` once per mode in ``modes`` (True: RENEW), side by side: each run has its own
    topic, share group and two members (``java-0``, ``java-1``), so the runs share nothing but
    the time they take (the JVMs start and the groups form together). ``ms`` in each result is
    counted from that run's own first delivery.

    Args:
        modes: one run per entry, in this order; True: the members acknowledge RENEW (KIP-1222).
        lock_ms: each group's ``share.record.lock.duration.ms``, ms.
        work_ms: the work on the record, ms; must be above ``lock_ms``.
        timeout_s: bound of each wait (all groups formed, all records settled), seconds.

    Returns:
        One RenewResult per mode, in the order of ``modes``; topics and groups deleted, every
        member stopped.

    Raises:
        JarsMissing: ``make jars`` has not built the program.
        KafkalabError: ``work_ms`` not above ``lock_ms`` (nothing would outlast the lock), or a
            member exited early (its log's tail in the message).
        WaitTimeout: a group did not form or a record did not settle within ``timeout_s``.
    """
    from .. import config, java_api
    from ..worker import ExecSpec

    if work_ms <= lock_ms:
        raise KafkalabError(f"work_ms ({work_ms}) must be above lock_ms ({lock_ms}): the work must outlast the lock")
    classpath = java_api.program_classpath(RENEW_JAVA_CLASS)
    run = RunScope("renew")
    procs: list[workloads.Worker] = []
    try:
        stop = workloads.run_dir(run.run_id) / "stop"
        runs = []  # (renew, topic, group, folder of its members' ledgers)
        for n, renew in enumerate(modes):
            topic, group = run.topic(f"slow{n}"), run.group(f"renew{n}")
            folder = workloads.run_dir(run.run_id) / f"{n}-{'renew' if renew else 'plain'}"
            folder.mkdir(exist_ok=True)
            admin.alter_group_config(group, {"share.auto.offset.reset": "earliest",
                                             "share.record.lock.duration.ms": lock_ms, "share.delivery.count.limit": 2})
            admin.create_topics({topic: 1})
            runs.append((renew, topic, group, folder))
            for i in range(2):
                name = f"java-{i}"
                argv = java_api.java_command(classpath, RENEW_JAVA_CLASS, config.bootstrap_servers(), topic, group,
                                             name, str(folder / f"{name}.jsonl"), "renew" if renew else "plain",
                                             str(work_ms), str(stop))
                procs.append(workloads.spawn(ExecSpec(f"{name} of {group}", run.run_id, str(folder / f"{name}.jsonl"),
                                                      argv)))
        run.on_cleanup(lambda: [w.terminate(timeout_s=15) for w in procs if w.alive])

        def alive_check() -> None:
            for w in procs:
                if not w.alive:
                    raise KafkalabError(f"{w.name} exited {w.returncode}:\n{w.log_tail()}")

        def joined():
            alive_check()
            return all(len(ms) == 2 and all(m.partitions for m in ms)
                       for ms in (admin.share_group_members(group) for _, _, group, _ in runs))

        wait_until(joined, timeout_s=timeout_s, interval_s=0.5,
                   what=f"2 members of each share group ({', '.join(g for _, _, g, _ in runs)}), each assigned")
        for _, topic, _, _ in runs:
            workloads.produce(topic, [(b"slow", b"slow:work", 0, None)])

        def read(folder: Path) -> list[dict]:
            out = []
            for f in sorted(folder.glob("java-*.jsonl")):
                out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            return out

        def settled() -> bool:
            alive_check()
            return all(renew_settled(*renew_outcome(read(folder))) for *_, folder in runs)

        wait_until(settled, timeout_s=timeout_s, interval_s=0.3,
                   what=f"the record of each topic ({', '.join(t for _, t, _, _ in runs)}) settled")
        stop.touch()
        for w in procs:
            w.wait(timeout_s=30)
        results = []
        for renew, topic, group, folder in runs:
            deliveries, acks = renew_outcome(read(folder))
            results.append(RenewResult(renew=renew, topic=topic, group=group, lock_ms=lock_ms, work_ms=work_ms,
                                       deliveries=deliveries, acknowledgements=acks,
                                       members_delivered=len({d["client"] for d in deliveries}),
                                       accepted=sum(1 for a in acks if a["ack"] == "ACCEPT" and a["error"] is None),
                                       renewed=sum(1 for a in acks if a["ack"] == "RENEW" and a["error"] is None)))
        return results
    finally:
        run.cleanup()


@click.command("share-renew")
@click.option("--renew/--no-renew", default=True, show_default=True,
              help="Acknowledge RENEW while the work goes on (KIP-1222), or work through the lock.")
@click.option("--lock-ms", type=click.IntRange(BROKER_MIN_LOCK_MS, 60000), default=4000, show_default=True,
              help="The group's share.record.lock.duration.ms (the acquisition lock), ms.")
@click.option("--work-ms", type=click.IntRange(1), default=6000, show_default=True,
              help="Work on the record, ms; above --lock-ms, or nothing outlasts the lock.")
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True)
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def renew_command(renew: bool, lock_ms: int, work_ms: int, timeout_s: float, as_json: bool) -> None:
    """KIP-1222: two Java share consumers, one record whose work outlasts the acquisition lock;
    with --no-renew it is delivered again to the other member and the first ACCEPT is refused.
    Runs notebook 09's ShareRenewConsumer.java (section 8)."""
    if work_ms <= lock_ms:
        raise click.UsageError(f"--work-ms ({work_ms}) must be above --lock-ms ({lock_ms}): the work must outlast the lock")
    runscope.require_for_cli()
    show_programs(java_source(*RENEW_JAVA_SHOWN))
    r = run_renew(renew, lock_ms=lock_ms, work_ms=work_ms, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"{'RENEW' if renew else 'no RENEW'}: lock {lock_ms} ms, work {work_ms} ms; "
               f"{len(r.deliveries)} deliveries to {r.members_delivered} member(s), {r.renewed} RENEWs taken, "
               f"{r.accepted} ACCEPT taken")
    for a in r.acknowledgements:
        click.echo(f"  {a['ms']:>7} ms  {a['client']}  {a['ack']:<6} {'taken' if a['error'] is None else 'refused: ' + a['error']}")


cli_commands = [cli_command, renew_command]
