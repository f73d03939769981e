"""Notebook 09: share groups (KIP-932, "queues for Kafka"), run on the cluster.

A share group breaks the three rules every other notebook teaches: any number of members read
one partition, each record is *acquired* under a time-limited lock (the acquisition lock) and
acknowledged one by one (ACCEPT, RELEASE, REJECT), and a record whose lock runs out, or whose
holder's connection closes, is delivered again with a higher delivery count, until
``share.delivery.count.limit`` deliveries; then it is archived.

``run_share_group`` runs it end to end with real processes:

1. a fresh topic of P partitions and a fresh share group, whose group configs set
   ``share.auto.offset.reset=earliest`` (a new share group starts at the latest offset by
   default), the acquisition lock (``share.record.lock.duration.ms``) and the delivery count
   limit (``share.delivery.count.limit``);
2. C share consumer processes (``kafkalab.worker`` kind ``share``), and the wait until the
   coordinator lists all C with an assignment (``kafka-share-groups --describe --members``);
3. N workload records, partition ``i % P``, one record per batch (a share fetch acquires
   whole batches, so one batch of N records would go to one consumer). Each carries its fate
   in a header (``worker.FATE_HEADER``): every ``release_every``-th is released at every
   delivery (archived after the limit), every ``reject_every``-th is rejected (a poison
   record), with ``slow_first`` the first record of each partition is a slow piece of work
   that another member overtakes (``worker.overtaken``), the rest are processed and accepted;
4. ``crash_consumers`` of the members die by SIGKILL after processing their
   ``crash_after``-th record, before acknowledging it, and ``freeze_consumers`` stop by
   SIGSTOP at the same point (a hung process: its connections stay open);
5. the run ends when the ledgers say every record reached a final state (accepted,
   rejected, or delivered ``limit`` times and never accepted), plus one more lock duration
   in which nothing may be delivered again; the members then close and the Spark audit
   (``share_groups_analysis``) counts it all;
6. with ``compare_consumer_group``, C members of an ordinary consumer group on the same
   topic, in the same run: how many of them get a partition (at most P).

Sources: KIP-932 (share groups, acquisition lock, delivery count, archiving); Kafka
documentation 4.3, "Share groups" and "Group Configs"; ``ShareGroupConfig`` in
kafka-group-coordinator 4.3.1 (broker bounds); confluent-kafka 2.16 ``ShareConsumer``
(librdkafka 2.16: Preview).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from .. import admin, ledger, runscope, workloads
from ..errors import KafkalabError
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import FATE_HEADER, ShareConsumerSpec

#: The lab's broker settings for share groups (kafka/config/broker.properties, teaching values):
#: the acquisition lock and the delivery count limit a group gets when it sets none, and the
#: lowest lock a group may set. Kafka 4.3's defaults: 30000 ms, 5, 15000 ms.
BROKER_LOCK_MS = 5000
BROKER_DELIVERY_COUNT_LIMIT = 3
BROKER_MIN_LOCK_MS = 1000
#: Kafka 4.3.1's own defaults (``ShareGroupConfig``): lock 30000 ms (bounds 15000..60000),
#: delivery count limit 5 (bounds 2..10).
KAFKA_DEFAULTS = {"group.share.record.lock.duration.ms": 30000, "group.share.min.record.lock.duration.ms": 15000,
                  "group.share.max.record.lock.duration.ms": 60000, "group.share.delivery.count.limit": 5,
                  "group.share.min.delivery.count.limit": 2, "group.share.max.delivery.count.limit": 10}


@dataclass
class ShareRun:
    """The shape of one run (see the module docstring). Times in ms.

    Attributes:
        consumers: share consumer processes (C), >= 1.
        partitions: partitions of the topic (P), >= 1.
        messages: records produced (N), >= 1.
        crash_consumers: members killed (SIGKILL) at their crash point.
        freeze_consumers: members stopped (SIGSTOP) at their crash point.
        crash_after: the crash point: after processing this many records, before
            acknowledging the last of them.
        release_every: every R-th record (``i % R == R - 1``) is RELEASEd at each delivery; 0: none.
        reject_every: every R-th record is REJECTed; 0: none. A record both would release is released.
        delivery_count_limit: group config ``share.delivery.count.limit``.
        lock_ms: group config ``share.record.lock.duration.ms`` (the acquisition lock).
        process_ms: work per accepted record of the fastest consumer (``process_ms_of``).
        max_poll_records: librdkafka ``max.poll.records`` of each consumer.
        compare_consumer_group: also run C members of a consumer group on the topic.
        describe_held: with ``freeze_consumers``: once every frozen member has stopped and
            every other record is accepted, rejected or archived, describe the
            share-partitions (``kafka-share-groups --describe --offsets``) while the frozen
            members still hold their records (``ShareGroupResult.held_window``), then SIGKILL
            them, so their records come back at once. Give the run a lock longer than that
            takes (``lock_ms`` up to 60000), or the lock releases them first.
        first_for_all: each member holds the first record it receives, before processing
            it, until every member has received one (at most half the lock). A member starved
            of CPU for a moment is then not left without records by chance; in a group where
            a member could get no record at all (a consumer group's idle member) the wait
            would only time out.
        slow_first: the first record of each partition is a slow piece of work (fate
            ``slow``): its consumer finishes it only once another member has processed a
            later offset of that partition, or after half the lock (``slow_max_ms``). With
            2 or more members this makes an order inversion certain, whatever the load.
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
    max_poll_records: int = 1
    compare_consumer_group: bool = False
    slow_first: bool = False
    describe_held: bool = False
    first_for_all: bool = False

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
        if self.lock_ms < BROKER_MIN_LOCK_MS:
            raise KafkalabError(f"lock_ms must be >= {BROKER_MIN_LOCK_MS} (group.share.min.record.lock.duration.ms "
                                f"in kafka/config/broker.properties), not {self.lock_ms}")

    def fate(self, i: int) -> str:
        """What happens to record ``i`` (partition ``i % partitions``): ``release``,
        ``reject``, ``slow`` (with ``slow_first``, the first record of each partition that
        is neither) or ``accept``."""
        if self.release_every and i % self.release_every == self.release_every - 1:
            return "release"
        if self.reject_every and i % self.reject_every == self.reject_every - 1:
            return "reject"
        if self.slow_first and i < self.partitions:
            return "slow"
        return "accept"

    @property
    def slow_max_ms(self) -> float:
        """The longest a ``slow`` record waits to be overtaken: half the acquisition lock, so
        it is acknowledged before the lock could run out."""
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
    elapsed_ms: int
    ledger_dir: str = field(default="", repr=False)

    def to_json(self) -> dict:
        """Every field, JSON-ready."""
        return asdict(self)


def group_configs(cfg: ShareRun) -> dict[str, str | int]:
    """The group configs a run sets on its share group."""
    return {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": cfg.lock_ms,
            "share.delivery.count.limit": cfg.delivery_count_limit}


def _records(cfg: ShareRun) -> list[tuple]:
    from ..data import workload_record

    out = []
    for i in range(cfg.messages):
        f, rid = workload_record(i)
        out.append((f.key.encode(), rid.encode(), i % cfg.partitions, {FATE_HEADER: cfg.fate(i).encode()}))
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


def _events(folder: Path) -> list[ledger.Event]:
    out: list[ledger.Event] = []
    for p in sorted(folder.glob("*.jsonl")):
        out.extend(ledger.read_events(p, growing=True))  # read while the consumers append
    return out


def run_share_group(cfg: ShareRun | None = None, timeout_s: float = 90.0, spark=None) -> ShareGroupResult:
    """Run one share group experiment (module docstring) and audit it.

    Args:
        cfg: the run's shape (defaults: ``ShareRun()``).
        timeout_s: bound of each wait (members joined, all records final), seconds.
        spark: a SparkSession for the audit (``kafkalab.spark.session()`` if None).

    Returns:
        ShareGroupResult; topic and group deleted, every process stopped.

    Raises:
        KafkalabError: bad settings, or a consumer process failed.
        WaitTimeout: the members did not all get an assignment, or records were not final,
            within ``timeout_s`` (the message says which).
    """
    from .share_groups_analysis import account

    cfg = cfg or ShareRun()
    t0 = time.monotonic()
    run = RunScope("share")
    procs: dict[str, workloads.Worker] = {}
    members: list[workloads.GroupMember] = []

    def stop_all() -> None:
        for name, w in procs.items():
            if cfg.role(int(name.rsplit("-", 1)[1])) == "freeze":
                w.kill()
            else:
                w.terminate(timeout_s=15)

    run.on_cleanup(stop_all)
    try:
        topic, group = run.topic("queue"), run.group("share")
        folder = workloads.run_dir(run.run_id)
        # Group configs first: a broker that knows the topic (create_topics waits for all) has
        # also applied them, so every share-partition starts with this run's lock and limit.
        admin.alter_group_config(group, group_configs(cfg))
        admin.create_topics({topic: cfg.partitions})
        for i in range(cfg.consumers):
            name = f"share-{i}"
            role = cfg.role(i)
            procs[name] = workloads.spawn(ShareConsumerSpec(
                name, run.run_id, str(folder / f"{name}.jsonl"), group, [topic], process_ms=cfg.process_ms_of(i),
                max_poll_records=cfg.max_poll_records, crash_after=cfg.crash_after if role != "run" else None,
                crash_signal="SIGSTOP" if role == "freeze" else "SIGKILL", slow_max_ms=cfg.slow_max_ms,
                first_waits_for=cfg.consumers if cfg.first_for_all else 0))

        def joined():
            for name, w in procs.items():
                if not w.alive:
                    raise KafkalabError(f"{name} exited {w.returncode} before the group formed:\n{w.log_tail()}")
            ms = admin.share_group_members(group)
            return ms if len(ms) == cfg.consumers and all(m.partitions for m in ms) else None

        at_start = wait_until(joined, timeout_s=timeout_s, interval_s=0.5,
                              what=f"{cfg.consumers} members of share group {group}, each with an assignment")
        placed = workloads.produce(topic, _records(cfg), conf={"log_level": 3, "linger.ms": 0, "batch.num.messages": 1})
        with ledger.Ledger(folder / "producer.jsonl", run.run_id) as book:
            for (key, value, _, _), (p, off) in zip(_records(cfg), placed):
                book.record("acked", topic=topic, partition=p, offset=off, key=key.decode(), value=value.decode(),
                            client_id="producer")
        produced = {v.decode() for _, v, _, _ in _records(cfg)}
        places = {v.decode(): where for (_, v, _, _), where in zip(_records(cfg), placed)}  # value -> (partition, offset)

        gone = {name for name in procs if cfg.role(int(name.rsplit("-", 1)[1])) != "run"}
        frozen = sorted(name for name in gone if cfg.role(int(name.rsplit("-", 1)[1])) == "freeze")
        held_window: dict[str, dict] | None = None

        def describe_held() -> None:
            # Every frozen member stopped at its crash point, and everything else is settled:
            # the records still in flight are exactly the held ones.
            nonlocal held_window
            events = _events(folder)
            held = held_offsets(events, set(frozen))
            if not all(procs[n].stopped for n in frozen) or not held:
                return
            settled = final_values(events, cfg.delivery_count_limit, set())
            if not produced - settled <= {v for v, (p, o) in places.items() if o in held.get(p, [])}:
                return
            described = admin.share_group_offsets(group)
            events = _events(folder)  # the frozen members hold theirs still: nothing moved below them
            accepted = {(e.partition, e.offset) for e in events if e.kind == "acknowledged" and e.ack == "ACCEPT"}
            held_window = {str(p): {**described[(topic, p)], "held": offs,
                                    "end_offset": 1 + max(o for q, o in places.values() if q == p),
                                    "accepted_above": sum(1 for q, o in accepted if q == p and o > offs[0])}
                           for p, offs in held.items()}
            for n in frozen:
                procs[n].kill()

        def final():
            for name, w in procs.items():
                if not w.alive and name not in gone:
                    raise KafkalabError(f"{name} exited {w.returncode}:\n{w.log_tail()}")
            if cfg.describe_held and held_window is None:
                describe_held()
            return produced <= final_values(_events(folder), cfg.delivery_count_limit, gone)

        wait_until(final, timeout_s=timeout_s, interval_s=0.3,
                   what=f"all {cfg.messages} records of {topic} accepted, rejected or archived",
                   on_timeout=lambda: f"{len(produced - final_values(_events(folder), cfg.delivery_count_limit, gone))} "
                                      f"not final")
        if cfg.release_every:
            # Watch one more acquisition lock: an archived record must not be delivered again.
            # Ends early if one is (the audit then reports it).
            end = time.monotonic() + cfg.lock_ms / 1000
            wait_until(lambda: time.monotonic() >= end or past_limit(_events(folder), cfg.delivery_count_limit),
                       timeout_s=cfg.lock_ms / 1000 + 5, interval_s=0.2,
                       what="one acquisition lock after the last record was archived")
        missed = crash_points_missed(_events(folder), cfg.crash_after, gone)
        if missed:
            raise KafkalabError(f"{', '.join(missed)} processed fewer than crash_after={cfg.crash_after} records, so "
                                f"never crashed or froze: give each consumer more records (messages) or a lower crash_after")
        share_offsets = admin.share_group_offsets(group)
        described = admin.describe_config("group", group, list(group_configs(cfg)))
        compared = None
        if cfg.compare_consumer_group:
            cgroup = run.group("classic")
            members = [workloads.GroupMember(i, workloads.consumer_config(cgroup, i, "range"), [topic])
                       for i in range(cfg.consumers)]
            assigned = workloads.wait_group_stable(cgroup, members, {topic: cfg.partitions}, timeout_s=timeout_s)
            compared = sum(1 for tps in assigned.values() if tps)
        stop_all()
        procs_roles = {name: cfg.role(int(name.rsplit("-", 1)[1])) for name in procs}
        counts = account(folder, cfg.delivery_count_limit, procs_roles, spark=spark)
        return ShareGroupResult(
            topic=topic, group=group, config=asdict(cfg), **counts, roles=procs_roles,
            members_at_start={m.client_id: sorted(p for _, p in m.partitions) for m in at_start},
            consumer_group_members_with_partitions=compared,
            share_offsets={str(p): v for (_, p), v in sorted(share_offsets.items())},
            group_configs={k: v.value for k, v in described.items()}, held_window=held_window,
            elapsed_ms=int((time.monotonic() - t0) * 1000), ledger_dir=str(folder))
    finally:
        for m in members:
            m.close()
        run.cleanup()


@click.command("share-group")
@click.option("--consumers", type=click.IntRange(1, 20), default=4, show_default=True, help="Share consumers (C).")
@click.option("--partitions", type=click.IntRange(1, 50), default=2, show_default=True, help="Partitions (P).")
@click.option("--messages", type=click.IntRange(1, 100_000), default=60, show_default=True, help="Records (N).")
@click.option("--crash-consumers", type=click.IntRange(0), default=0, show_default=True,
              help="Consumers SIGKILLed while holding an acquired, unacknowledged record.")
@click.option("--freeze-consumers", type=click.IntRange(0), default=0, show_default=True,
              help="Consumers SIGSTOPped (hung) at the same point: their records come back after the lock.")
@click.option("--crash-after", type=click.IntRange(1), default=3, show_default=True,
              help="The crash point: after processing this many records.")
@click.option("--release-every", type=click.IntRange(0), default=0, show_default=True,
              help="Every R-th record is RELEASEd at each delivery (archived after the limit).")
@click.option("--reject-every", type=click.IntRange(0), default=0, show_default=True,
              help="Every R-th record is REJECTed (a poison record).")
@click.option("--delivery-count-limit", type=click.IntRange(2, 10), default=BROKER_DELIVERY_COUNT_LIMIT,
              show_default=True, help="Group config share.delivery.count.limit.")
@click.option("--lock-ms", type=click.IntRange(BROKER_MIN_LOCK_MS, 60000), default=BROKER_LOCK_MS, show_default=True,
              help="Group config share.record.lock.duration.ms (the acquisition lock).")
@click.option("--process-ms", type=click.FloatRange(0), default=20.0, show_default=True, help="Work per record, ms.")
@click.option("--compare-consumer-group", is_flag=True, help="Also run C members of a consumer group on the topic.")
@click.option("--describe-held", is_flag=True,
              help="With --freeze-consumers: describe the share-partitions while the frozen ones hold records, then kill them.")
@click.option("--first-for-all", is_flag=True,
              help="Each member holds its first record until every member has received one.")
@click.option("--slow-first", is_flag=True,
              help="The first record of each partition is slow: finished only after another member overtook it.")
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def cli_command(consumers: int, partitions: int, messages: int, crash_consumers: int, freeze_consumers: int,
                crash_after: int, release_every: int, reject_every: int, delivery_count_limit: int, lock_ms: int,
                process_ms: float, compare_consumer_group: bool, describe_held: bool, first_for_all: bool,
                slow_first: bool, timeout_s: float, as_json: bool) -> None:
    """Share group (KIP-932): C consumers on P partitions, per-record acknowledgement, audited."""
    try:
        cfg = ShareRun(consumers, partitions, messages, crash_consumers, freeze_consumers, crash_after, release_every,
                       reject_every, delivery_count_limit, lock_ms, process_ms,
                       compare_consumer_group=compare_consumer_group, slow_first=slow_first,
                       describe_held=describe_held, first_for_all=first_for_all)
    except KafkalabError as e:
        raise click.UsageError(str(e)) from None
    runscope.require_for_cli()  # after the settings are checked: bad input fails before the cluster is touched
    r = run_share_group(cfg, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps({k: v for k, v in r.to_json().items() if k != "ledger_dir"}, indent=2))
        return
    click.echo(f"{r.produced} records, {partitions} partitions, {consumers} share consumers "
               f"({r.consumers_with_records} received records)")
    click.echo(f"accepted {r.accepted_unique}, rejected {r.rejected}, archived {r.archived}, lost {r.lost}")
    click.echo(f"deliveries {r.deliveries} ({r.redelivered} redelivered, highest delivery count "
               f"{r.max_delivery_count}); processed more than once: {r.duplicates_processed}; "
               f"per-partition inversions: {r.per_partition_inversions}")
