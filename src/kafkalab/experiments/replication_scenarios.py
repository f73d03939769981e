"""Notebook 08's one-partition experiments, each a program of the notebook run as shown against
one broker fault (the rounds of sections 1 and 2 are ``kafkalab.experiments.replication``):

- ``run_failover_retry`` ("An idempotent producer's retry"): an idempotent producer program's
  first ack is lost at the fault proxy, the program is frozen, the leader killed, a follower
  elected, the program resumed: its retry reaches the new leader, which recognises it.
- ``run_failure_budget`` ("How many failures a partition survives"): notebook 08's
  ``budget_writer`` program writes one record after each of two broker kills; the harness kills,
  waits for the ISR to shrink, and reads the partition back.
- ``run_follower_fetch`` ("Reading from a follower"): a consumer program with and without
  ``client.rack`` says which broker served its fetches.

Sources (Kafka 4.3): documentation, Design > Replication ("Availability and Durability
Guarantees"); KIP-98 (idempotent producer); KIP-392 (fetch from the closest replica); KIP-966
(the high watermark below ``min.insync.replicas``); librdkafka CONFIGURATION.md (v2.16).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping

import click

from .. import admin, cluster, config, programs, runscope, segments, workloads
from ..clickutil import show_programs, shows_programs
from ..errors import KafkalabError
from ..faults import FaultProxy, Rule
from ..ledger import read_events
from ..programs import Program
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf

#: The notebook whose ``%%program`` cells these experiments and their CLI twins run.
NOTEBOOK = "08_replication"


def _spawn(run: runscope.RunScope, label: str, role: str, program: Program, topic: str, conf: dict | None = None,
           **options) -> workloads.Worker:
    """``program`` as it is, in a worker process of ``role`` named ``<run id>-<label>``."""
    cid = f"{run.run_id}-{label}"
    return workloads.spawn(ProgramSpec(cid, run.run_id, str(workloads.run_dir(run.run_id) / f"{cid}.jsonl"), role,
                                       program.name, program.source, conf=conf or lab_conf(cid), topics=[topic],
                                       options=options))


def _failed(program: Program, child: workloads.Worker) -> KafkalabError:
    return KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")


# ----------------------------------------------------------------------------- failures a partition survives


@dataclass
class FailureStep:
    """The partition after ``brokers_down`` were killed: its ISR, what the program's one write
    got (None: acknowledged; else the delivery report's error name), and how many records a read
    from the log start returned. ``killed_ms``: when this step's broker was killed (ms since the
    epoch; None for the first step, all up), for a dashboard's marks (notebook 13)."""

    brokers_down: list[int]
    isr: list[int]
    write_error: str | None
    readable: int
    killed_ms: int | None = None


@dataclass
class FailureBudget:
    """``run_failure_budget``: one partition of replication factor 3, its followers killed one
    after the other. ``program``: the writer that ran; ``settings``: its settings as its text
    gives them (``programs.program_settings``)."""

    topic: str
    min_insync_replicas: int
    replicas: list[int]
    steps: list[FailureStep]
    program: str = ""
    settings: dict = field(default_factory=dict)
    #: when the cluster was whole again (ms since the epoch; 0: not recorded).
    restored_ms: int = 0

    def table(self) -> "object":
        import pandas as pd

        acks = self.settings.get("acks", "all")
        return pd.DataFrame([{"brokers down": len(s.brokers_down), "killed": s.brokers_down, "ISR": s.isr,
                              f"acks={acks} write": s.write_error or "acknowledged", "records read": s.readable}
                             for s in self.steps]).set_index("brokers down")

    def to_json(self) -> dict:
        return asdict(self)


# What the leader answers an acks=all write below min.insync.replicas: NOT_ENOUGH_REPLICAS at
# once, or, for a write appended a moment before the leader applied the ISR shrink,
# REQUEST_TIMED_OUT when the request's timeout (librdkafka request.timeout.ms) runs out: under
# min.insync.replicas the high watermark does not advance (Kafka 4.3 Partition.maybeIncrementLeaderHW,
# KIP-966), so the write is never acknowledged. Measured: a write sent while the ISR still named
# two just-killed followers got REQUEST_TIMED_OUT after request.timeout.ms=3000 (3.01 s).
REFUSALS = ("NOT_ENOUGH_REPLICAS", "REQUEST_TIMED_OUT")


def _write_all(run: runscope.RunScope, label: str, program: Program, topic: str, records: list[list],
               timeout_s: float) -> list:
    """Run the writer ``program`` (role ``producer``, worker ``<run id>-<label>``) to its end
    with ``records`` (``[key, value, partition]`` each); returns its delivery reports (``acked``
    ledger events).

    Raises:
        KafkalabError: the program failed, or reported fewer or more deliveries than records.
    """
    child = _spawn(run, label, "producer", program, topic, records=records)
    try:
        if child.wait(timeout_s * 2) != 0:
            raise _failed(program, child)
    finally:
        if child.alive:
            child.kill()
    reports = read_events(child.ledger, kinds="acked")
    if len(reports) != len(records):
        raise KafkalabError(f"program {program.name} reported {len(reports)} deliveries of {len(records)} "
                            f"records:\n{child.log_tail()}")
    return reports


def _write_once(run: runscope.RunScope, program: Program, topic: str, step: int, timeout_s: float) -> str | None:
    """Run the writer ``program`` to its end with one record for partition 0 (``_write_all``);
    returns its delivery report's error name, None when acknowledged."""
    return _write_all(run, f"writer-{step}", program, topic, [[f"step-{step}", f"after {step} down", 0]],
                      timeout_s)[0].error


def run_failure_budget(program: Program, min_insync_replicas: int = 2, timeout_s: float = 60.0) -> FailureBudget:
    """How many broker failures one partition survives, for writes and for reads. A topic of
    one partition, replicas ``[1, 2, 3]`` (broker 1 leads), ``min.insync.replicas`` as given.
    With all brokers up, then after SIGKILLing broker 3, then broker 2 as well: the harness
    waits until the controller has fenced the dead broker and the leader reports the shrunk
    ISR; then the writer ``program`` (notebook 08's ``budget_writer``, role ``producer``, run as
    it is in a worker process) writes one record and ends, its delivery report in its ledger;
    then the harness reads the partition from its log start. With the notebook's settings
    (``acks=all``, ``retries=0``: the broker's refusal is the answer) the leader refuses a
    write below ``min.insync.replicas`` with NOT_ENOUGH_REPLICAS; a write that reached it a
    moment before it applied the ISR shrink that the metadata already shows (a broker
    publishes a new metadata image to its metadata cache before its partitions apply it) is
    appended, and the high watermark, held below ``min.insync.replicas`` (KIP-966), never
    reaches it: REQUEST_TIMED_OUT after the program's ``request.timeout.ms``. Never
    acknowledged either way (``REFUSALS``). The cluster is restored (``cluster.restore``)
    before this returns or raises.

    Raises:
        KafkalabError: bad ``min_insync_replicas``, the program failed or reported no delivery.
        WaitTimeout: the ISR did not shrink within ``timeout_s`` (seconds; fencing takes
            ``broker.session.timeout.ms``, 6 s here).

    Sources: Kafka documentation 4.3, Design > Replication ("Availability and Durability
    Guarantees": acks=all writes need ``min.insync.replicas`` in-sync replicas); Topic Configs.
    """
    if not 1 <= min_insync_replicas <= 3:
        raise KafkalabError(f"min_insync_replicas must be 1, 2 or 3, not {min_insync_replicas}")
    replicas, leader = [1, 2, 3], 1
    with runscope.RunScope("failures") as run:
        topic = run.topic("t")
        admin.create_placed_topics({topic: {"min.insync.replicas": str(min_insync_replicas)}}, replicas,
                                   timeout_s=timeout_s)
        steps: list[FailureStep] = []
        restored_ms = 0
        try:
            down: list[int] = []
            for victim in (None, 3, 2):
                killed_ms = None
                if victim is not None:
                    cluster.kill(victim)
                    killed_ms = time.time_ns() // 1_000_000
                    down.append(victim)
                expected = [b for b in replicas if b not in down]
                admin.wait_partitions([topic], 1, [leader], lambda v: v == (leader, expected),
                                      f"broker {leader} leading {topic}-0 with the ISR {expected}", timeout_s)
                write_error = _write_once(run, program, topic, len(down), timeout_s)
                readable = len(workloads.read_topic(topic, 1, timeout_s=timeout_s))
                now = admin.wait_partitions([topic], 1, [leader], lambda v: True, f"broker {leader}'s metadata",
                                            timeout_s)[(topic, 0)][1]
                steps.append(FailureStep(list(down), now, write_error, readable, killed_ms))
        finally:
            cluster.restore(max(timeout_s, 60.0))
            restored_ms = time.time_ns() // 1_000_000
        return FailureBudget(topic, min_insync_replicas, replicas, steps, program.name,
                             programs.program_settings(program.source), restored_ms)


# ----------------------------------------------------------------------------- an idempotent retry across an election


@dataclass
class ProduceAttempt:
    """One Produce request of the program and its answer as the fault proxy saw them: the
    broker it went to, the batch's producer id, epoch and base sequence, the records in it, and
    what happened to the answer (``dropped`` by the proxy, ``forwarded``, or ``none``: the
    connection closed first), with the broker's error and base offset."""

    broker: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int
    answer: str
    error: str | None
    base_offset: int | None


@dataclass
class FailoverRetry:
    """``run_failover_retry``: a producer program's first record appended and replicated, its
    ack lost, the leader killed, the record sent again to the new leader.

    Attributes:
        values: the records the program sent, in order.
        log: the partition read back from offset 0 after the cluster recovered, ``[offset, value]``.
        duplicates: records in the log minus distinct values.
        deliveries: the delivery reports, ``[value, offset or None, error or None]``.
        attempts: the program's Produce requests, oldest first (``ProduceAttempt``).
        batches: the new leader's log on disk, ``[base offset, producer id, epoch, base sequence,
            records]`` per batch.
        elected: the new leader (a follower of the killed broker ``leader``).
        lab_conf: what the harness added to the program's settings.
    """

    topic: str
    program: str
    leader: int
    elected: int
    values: list[str]
    log: list[list]
    duplicates: int
    deliveries: list[list]
    attempts: list[ProduceAttempt]
    batches: list[list[int]]
    lab_conf: dict[str, str]

    def attempts_table(self) -> "object":
        import pandas as pd

        return pd.DataFrame([asdict(a) for a in self.attempts]).rename_axis("attempt")

    def resends(self) -> list[ProduceAttempt]:
        """The first record's attempts after the first one (whose answer the proxy dropped), up
        to and including the first answered ``NONE``. More than one when the new leader, asked
        before it had applied its election, answered ``NOT_LEADER_OR_FOLLOWER`` (appending
        nothing) and the producer sent again after a metadata refresh."""
        out = []
        for a in self.attempts[1:]:
            out.append(a)
            if a.answer == "forwarded" and a.error == "NONE":
                break
        return out

    def to_json(self) -> dict:
        return asdict(self)


def _attempts(proxy: FaultProxy, client_id: str) -> list[ProduceAttempt]:
    """The Produce requests of ``client_id`` with their answers (``ProduceAttempt``)."""
    events = proxy.events(api="Produce", client_id=client_id)
    answers = {(e.conn, e.correlation_id): e for e in events if e.kind == "response"}
    out = []
    for e in events:
        if e.kind != "request" or not e.batches:
            continue
        b, ans = e.batches[0], answers.get((e.conn, e.correlation_id))
        res = ans.results[0] if ans is not None and ans.results else {}
        out.append(ProduceAttempt(e.broker, b["producer_id"], b["producer_epoch"], b["base_sequence"], e.records,
                                  ans.action if ans is not None else "none", res.get("error"), res.get("base_offset")))
    return out


def run_failover_retry(program: Program, records: int = 3, leader: int = 1, proxy: FaultProxy | None = None,
                       keep_topic: bool = False, timeout_s: float = 60.0) -> FailoverRetry:
    """Does a new leader recognise an idempotent producer's retry? A topic of one partition,
    replicas ``[leader, followers]``, ``min.insync.replicas=2``. The producer ``program`` (role
    ``producer``, bootstrapped on the fault proxy) sends ``records`` records one request each.
    The proxy forwards the first Produce request and drops its answer (``Rule("drop_response",
    times=1)``): the leader appended the record, and (``acks=all``, answer NONE, seen by the
    proxy) every ISR member has it. Then, each step waiting for the one before:

    1. the program is frozen (SIGSTOP), so it can send nothing until step 3: its retry cannot
       reach the old leader, whatever its timers;
    2. the leader is killed (SIGKILL), and the controller elects a follower (clean: it has the
       record);
    3. the program resumes (SIGCONT): its connection to the dead leader is gone, it learns the
       new leader from the metadata and sends the record again there.

    Then the cluster is restored and the partition read from offset 0 (``keep_topic``: the topic
    stays, for the caller to read and delete). With
    ``enable.idempotence=true`` the new leader knows the producer id and its last sequence from
    the replicated log (its producer state is rebuilt from the batches it replicated), so the
    retry is a duplicate it does not append; without, it is appended a second time.

    Raises:
        KafkalabError: the program failed, or the retry did not go to the new leader.
        WaitTimeout: a step did not happen within ``timeout_s`` (seconds).

    Sources: KIP-98 (idempotent producer: producer id, epoch, per-partition sequence numbers,
    the broker's duplicate check); Kafka 4.3 ``ProducerStateManager`` (the last 5 batches per
    producer, kept on followers too, snapshotted with the log); librdkafka CONFIGURATION.md
    (v2.16: ``enable.idempotence``, ``socket.timeout.ms``).
    """
    if leader not in config.BROKER_IDS or records < 1:
        raise KafkalabError(f"need leader in {config.BROKER_IDS} and records >= 1, got {leader} and {records}")
    followers = [b for b in config.BROKER_IDS if b != leader]
    own_proxy = proxy is None
    if own_proxy:
        proxy = FaultProxy().start()
    run = runscope.RunScope("failover")
    child: workloads.Worker | None = None
    try:
        topic = run.topic("t")
        cid = f"{run.run_id}-producer"
        admin.create_placed_topics({topic: {"min.insync.replicas": "2"}}, [leader, *followers], timeout_s=timeout_s)
        admin.wait_partitions([topic], 1, list(config.BROKER_IDS), lambda v: v[0] == leader and len(v[1]) == 3,
                              f"{topic}-0 led by broker {leader} with a full ISR", timeout_s)
        values = [f"r{i}" for i in range(records)]
        conf = lab_conf(cid, bootstrap_servers=proxy.bootstrap_servers)
        rule = proxy.add_rule(Rule("drop_response", "Produce", client_id=cid, times=1))
        child = _spawn(run, "producer", "producer", program, topic, conf=conf, records=[["", v, 0] for v in values])

        def ack_lost() -> bool:
            if not child.alive:
                raise _failed(program, child)
            return any(a.answer == "dropped" and a.error == "NONE" for a in _attempts(proxy, cid))

        wait_until(ack_lost, timeout_s=timeout_s, interval_s=0.02,
                   what=f"broker {leader} answering NONE to the first record (answer dropped by the proxy)",
                   on_timeout=lambda: f"the program's Produce requests as the proxy saw them: {_attempts(proxy, cid)}")
        proxy.remove_rule(rule)
        child.pause()
        cluster.kill(leader)
        new_leader = admin.wait_partitions([topic], 1, followers, lambda v: v[0] in followers,
                                           f"a follower of broker {leader} elected", timeout_s)[(topic, 0)][0]
        for b in followers:  # both followers, the new leader too, name it in their own metadata
            admin.wait_partitions([topic], 1, [b], lambda v: v[0] == new_leader,
                                  f"broker {b} naming broker {new_leader} leader of {topic}-0", timeout_s)
        child.resume()
        if child.wait(timeout_s * 2) != 0:
            raise _failed(program, child)
        batches = [[b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence, b.records_count]
                   for seg in segments.read_partition(Path(cluster.status().brokers[new_leader].data_dir)
                                                      / segments.partition_dir_name(topic, 0), check_crc=False)
                   for b in seg.batches]
        cluster.restore(max(timeout_s, 60.0))   # broker 1 back, and the preferred leader again
        admin.wait_brokers_agree([topic], 1, lambda v: v[0] == leader and len(v[1]) == 3,
                                 f"broker {leader} leading {topic}-0 with a full ISR", timeout_s)
        admin.wait_leaders_serving([(topic, 0)], timeout_s)
        log = [[c.offset, c.value] for c in workloads.read_topic(topic, 1, timeout_s=timeout_s)]
        deliveries = [[e.value, e.offset, e.error] for e in read_events(child.ledger, kinds="acked")]
        return FailoverRetry(topic, program.name, leader, new_leader, values, log,
                             len(log) - len({v for _, v in log}), deliveries, _attempts(proxy, cid), batches, conf)
    finally:
        if child is not None and child.alive:
            child.kill()
        cluster.restore(max(timeout_s, 60.0))
        if not keep_topic:
            run.cleanup()
        if own_proxy:
            proxy.stop()


# ----------------------------------------------------------------------------- writes lost by planned operations


@dataclass
class PlannedLoss:
    """One setting of ``run_planned_shutdown``: its topic, what its program's delivery reports
    said, broker 1's high watermark and log end offset (from the reports' offsets) just before
    its controlled shutdown, the leader elected while broker 1 was down, and the records read
    back after both brokers were back. ``lost``: acknowledged values not in the log."""

    label: str
    topic: str
    acked: int
    errors: dict[str, int]
    hw_before: int
    leo_before: int
    elected: int
    log: int
    lost: int


@dataclass
class PlannedShutdown:
    """``run_planned_shutdown``: per setting label, a ``PlannedLoss``; ``first_back``: the broker
    started first; ``timeline``: (seconds since the start, event)."""

    records: int
    first_back: int
    settings: dict[str, PlannedLoss]
    timeline: list[tuple[float, str]]

    def table(self) -> "object":
        import pandas as pd

        return pd.DataFrame([{"setting": s.label, "acknowledged": s.acked, "refused": s.errors or "",
                              "HW before 1 stopped": s.hw_before, "LEO before 1 stopped": s.leo_before,
                              "elected": s.elected, "in the log after": s.log, "acknowledged, lost": s.lost}
                             for s in self.settings.values()]).set_index("setting")

    def to_json(self) -> dict:
        return asdict(self)


def run_planned_shutdown(runs: Mapping[str, Program], records: int = 20, first_back: int = 2,
                         timeout_s: float = 60.0) -> PlannedShutdown:
    """Acknowledged writes lost by two controlled shutdowns and no fault: a rolling restart
    that stops the leader before the follower it restarted first is back in the ISR.

    One topic per setting label (``runs``: label -> a writer program such as notebook 08's
    ``budget_writer``, role ``producer``, run as it is in a worker process): one partition,
    replicas ``[1, 2]`` (broker 1 leads), ``min.insync.replicas=2``. Then, with a wait on a
    condition after each step: broker 2's controlled shutdown (SIGTERM); the ISR is ``[1]``,
    below ``min.insync.replicas``, so broker 2 is an *eligible leader replica* and the high
    watermark stops (KIP-966); each program writes ``records`` records to its topic and ends;
    broker 1's high watermark (ListOffsets) and log end offset (one past the highest offset its
    delivery reports name); broker 1's
    controlled shutdown; broker ``first_back`` started and a leader elected, then the other
    broker. With ``first_back=2`` the controller elects broker 2 (the ELR member, KIP-966) with
    the log it had, and broker 1 follows it and truncates to its log; with ``first_back=1``
    broker 1 leads again with every record it acknowledged. Every topic is then read back. ``cluster.restore`` (every broker up, every ISR full, the preferred
    leaders elected) runs before this returns or raises, and the topics are deleted
    (``runscope.RunScope``).

    Returns:
        PlannedShutdown: per label the acknowledged records, the refusals by error name, the
        offsets before broker 1 stopped, the leader elected, the records read back, the lost.

    Raises:
        KafkalabError: records < 1, ``first_back`` not 1 or 2, a program failed or reported
            fewer deliveries than records.
        WaitTimeout: a leader or ISR change not seen within ``timeout_s`` (seconds).

    Sources: KAFKA-20554 and apache/kafka PR #22233 (acks=1 records above the high watermark
    lost by planned leader moves); KIP-966 (Eligible Leader Replicas; Kafka 4.4
    ``Partition.maybeIncrementLeaderHW``); Kafka documentation 4.4, Design > Replication.
    """
    if records < 1:
        raise KafkalabError(f"records must be at least 1, not {records}")
    if first_back not in (1, 2):
        raise KafkalabError(f"first_back must be broker 1 or 2, not {first_back}")
    second = 3 - first_back
    t0 = time.monotonic()
    timeline: list[tuple[float, str]] = []

    def mark(event: str) -> None:
        timeline.append((round(time.monotonic() - t0, 2), event))

    with runscope.RunScope("planned") as run:
        topics = {label: run.topic(f"s{i}") for i, label in enumerate(runs)}
        names = list(topics.values())
        admin.create_placed_topics({t: {"min.insync.replicas": "2"} for t in names}, [1, 2], timeout_s=timeout_s)
        admin.wait_partitions(names, 1, [1], lambda v: v == (1, [1, 2]), "broker 1 leading with the ISR [1, 2]",
                              timeout_s)
        mark("topics created: replicas [1, 2], ISR [1, 2], min.insync.replicas=2")
        results: dict[str, PlannedLoss] = {}
        try:
            cluster.stop(2)
            admin.wait_partitions(names, 1, [1], lambda v: v == (1, [1]), "broker 1 leading with the ISR [1]",
                                  timeout_s)
            mark("broker 2 stopped (controlled shutdown); ISR [1]")
            reports = {label: _write_all(run, f"writer-s{i}", program, topics[label],
                                         [["w", f"{label}/{n}", 0] for n in range(records)], timeout_s)
                       for i, (label, program) in enumerate(runs.items())}
            mark(f"each program wrote {records} records and ended")
            parts = [(t, 0) for t in names]
            hw = admin.list_offsets(parts, brokers=[1])
            leo = {t: 1 + max((e.offset for e in reports[label] if not e.error and e.offset is not None), default=-1)
                   for label, t in topics.items()}
            cluster.stop(1)
            mark("broker 1 stopped (controlled shutdown) before broker 2 was back")
            cluster.start(first_back, timeout_s=timeout_s)
            elected = admin.wait_partitions(names, 1, [first_back], lambda v: v[0] >= 0, "a leader elected",
                                            timeout_s)
            mark(f"broker {first_back} started; leaders {sorted({v[0] for v in elected.values()})}")
            cluster.start(second, timeout_s=timeout_s)
            admin.wait_partitions(names, 1, [1, 2], lambda v: len(v[1]) == 2, "the ISR [1, 2] again", timeout_s)
            mark(f"broker {second} started; ISR full")
            for label, t in topics.items():
                log = {c.value for c in workloads.read_topic(t, 1, timeout_s=timeout_s)}
                ok = [e.value for e in reports[label] if not e.error]
                errors: dict[str, int] = {}
                for e in reports[label]:
                    if e.error:
                        errors[e.error] = errors.get(e.error, 0) + 1
                results[label] = PlannedLoss(label, t, len(ok), errors, hw[(t, 0)], leo[t], elected[(t, 0)][0],
                                             len(log), sum(v not in log for v in ok))
            mark("every topic read back")
        finally:
            cluster.restore(max(timeout_s, 60.0))
    return PlannedShutdown(records, first_back, results, timeline)


#: The broker and topic configs of a replication throttle (KIP-73; Kafka documentation 4.4, Broker
#: Configs and Topic Configs; names read from the 4.4.0 jars: ``QuotaConfig`` in kafka-server-common).
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@dataclass
class ThrottleCheck:
    """``run_throttled_follower``: the throttle as the brokers reported it while set
    (``rates``: broker id -> config -> value; ``topic_configs``: the topic's throttled
    replicas), the burst written (``records`` of ``size`` bytes, ``acks=1``), the high watermark
    and ISR after it, ``throttled_s``: the seconds the burst needs at ``rate`` bytes/s, and
    ``left_set``: throttle configs still set on a broker after the cleanup (empty when removed)."""

    topic: str
    rate: int
    records: int
    size: int
    rates: dict[int, dict[str, str]]
    topic_configs: dict[str, str]
    hw: int
    isr: list[int]
    throttled_s: float
    left_set: dict[int, list[str]]


def _throttle_rates_set() -> dict[int, dict[str, str]]:
    """Broker id -> the throttle rates set on it (DescribeConfigs lists them only when set)."""
    out = {}
    for b in config.BROKER_IDS:
        entries = admin.describe_config("broker", b, None)
        out[b] = {k: entries[k].value for k in THROTTLE_RATES if k in entries}
    return out


def _set_throttle_rates(rate: int | None, timeout_s: float) -> None:
    """Every broker's two throttle rates set to ``rate`` bytes/s (IncrementalAlterConfigs SET),
    or removed (None: DELETE, back to the default, no throttle); until DescribeConfigs shows it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    op = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
    for b in config.BROKER_IDS:
        res = ConfigResource(ResourceType.BROKER, str(b), incremental_configs=[
            ConfigEntry(k, None if rate is None else str(rate), incremental_operation=op) for k in THROTTLE_RATES])
        workloads.admin().incremental_alter_configs([res], request_timeout=timeout_s)[res].result(timeout=timeout_s + 5)

    def shown() -> bool:
        set_now = _throttle_rates_set()
        return all(set_now[b] == ({} if rate is None else {k: str(rate) for k in THROTTLE_RATES})
                   for b in config.BROKER_IDS)

    wait_until(shown, timeout_s=timeout_s, interval_s=0.1,
               what=f"every broker's replication throttle {'removed' if rate is None else f'at {rate} B/s'}")


def run_throttled_follower(rate: int = 1024, records: int = 300, size: int = 1000,
                           timeout_s: float = 60.0) -> ThrottleCheck:
    """Does a replication throttle slow a follower in the ISR? A topic of one partition,
    replicas ``[1, 2, 3]``, both throttled-replicas topic configs ``*`` (every replica); every
    broker's leader and follower throttle rate set to ``rate`` bytes/s; then ``records`` records
    of ``size`` bytes written with ``acks=1`` (the lab's own producer) and a wait, up to
    ``timeout_s`` seconds, until the high watermark reaches them: it does, since Kafka throttles
    only replicas outside the ISR (KIP-73; Kafka 4.4 ``ReplicaManager.shouldLeaderThrottle`` and
    ``RemoteLeaderEndPoint.shouldFollowerThrottle``). The rates are removed from every broker in
    a ``finally`` (and the topic deleted), checked with DescribeConfigs (``left_set``).

    Raises:
        KafkalabError: rate, records or size below 1.
        WaitTimeout: the high watermark did not reach the records within ``timeout_s``, or a
            broker did not show the throttle set or removed.
    """
    if min(rate, records, size) < 1:
        raise KafkalabError("rate, records and size must be at least 1")
    with runscope.RunScope("throttle") as run:
        topic = run.topic("t")
        admin.create_placed_topics({topic: {k: "*" for k in THROTTLED_REPLICAS}}, [1, 2, 3], timeout_s=timeout_s)
        admin.wait_partitions([topic], 1, [1], lambda v: v == (1, [1, 2, 3]), "broker 1 leading with a full ISR",
                              timeout_s)
        try:
            _set_throttle_rates(rate, timeout_s)
            rates = _throttle_rates_set()
            topic_configs = {k: v.value for k, v in admin.describe_config("topic", topic, THROTTLED_REPLICAS).items()}
            workloads.produce(topic, [(None, b"x" * size, 0, None)] * records, conf={"acks": "1"}, timeout_s=timeout_s)
            wait_until(lambda: admin.list_offsets([(topic, 0)], brokers=[1])[(topic, 0)] >= records,
                       timeout_s=timeout_s, interval_s=0.05, what=f"the high watermark at {records} (every ISR member)")
            hw = admin.list_offsets([(topic, 0)], brokers=[1])[(topic, 0)]
            isr = admin.partition_states([1], [topic])[(topic, 0)][1]
        finally:
            _set_throttle_rates(None, timeout_s)
        left = {b: sorted(v) for b, v in _throttle_rates_set().items() if v}
    return ThrottleCheck(topic, rate, records, size, rates, topic_configs, hw, isr,
                         round(records * size / rate, 1), left)


# ----------------------------------------------------------------------------- follower fetching


@dataclass
class FollowerFetch:
    """``run_follower_fetch``: which broker served the fetches of each consumer.

    Attributes:
        served_by: consumer label -> id of the broker its fetches went to, as librdkafka's
            statistics report it (``partitions.<p>.broker``, STATISTICS.md).
        records_read: consumer label -> records it read (all of them: ``records``).
    """

    topic: str
    leader: int
    replicas: list[int]
    records: int
    served_by: dict[str, int]
    records_read: dict[str, int]

    def table(self) -> "object":
        import pandas as pd

        return pd.DataFrame({"fetched from broker": self.served_by, "records read": self.records_read}
                            ).rename_axis("consumer")

    def to_json(self) -> dict:
        return asdict(self)


#: The line a follower-fetch consumer program prints from its statistics callback (notebook
#: 08's ``rack_reader``): ``fetching from broker <id>``; the harness reads it from the worker's log.
FETCHING_FROM = re.compile(r"^fetching from broker (-?\d+)$", re.M)


def fetch_brokers(log_text: str) -> list[int]:
    """The broker ids a consumer program's statistics named, oldest first (``FETCHING_FROM``
    lines; -1, no broker yet, left out)."""
    return [int(b) for b in FETCHING_FROM.findall(log_text) if int(b) >= 0]


def run_follower_fetch(readers: Mapping[str, Program], records: int = 200, timeout_s: float = 60.0) -> FollowerFetch:
    """Can a consumer read from a follower? A topic of one partition, replicas ``[1, 2, 3]``
    (broker 1 leads), ``records`` records written with ``acks=all``. Each consumer program of
    ``readers`` (label -> program, role ``consumer``, run as it is in a worker process: notebook
    08's ``rack_reader`` and its edit without ``client.rack``) reads it from the start (assign, no
    group) and prints ``fetching from broker <id>`` from librdkafka's statistics
    (``partitions.<p>.broker``, STATISTICS.md). The harness waits until the program has read every
    record and printed at least two statistics lines after that, stops it (SIGTERM) and keeps the
    last broker named. The brokers run ``RackAwareReplicaSelector`` and each is its own rack
    (``broker.rack=rack-<id>``, this lab's ``broker.properties``), so the leader answers a
    consumer with ``client.rack=rack-3`` with a *preferred read replica*, broker 3.

    Raises:
        KafkalabError: a program failed, or its statistics never named a broker.
        WaitTimeout: a program did not read every record within ``timeout_s`` (seconds).

    Sources: KIP-392 (fetch from closest replica); Kafka documentation 4.3, Broker Configs
    (``broker.rack``, ``replica.selector.class``); librdkafka CONFIGURATION.md (``client.rack``)
    and STATISTICS.md (``partitions.broker``).
    """
    replicas = [1, 2, 3]
    with runscope.RunScope("follower") as run:
        topic = run.topic("t")
        admin.create_placed_topics({topic: {}}, replicas, timeout_s=timeout_s)
        admin.wait_brokers_agree([topic], 1, lambda v: v[0] == replicas[0], f"broker {replicas[0]} leading {topic}-0",
                                 timeout_s)
        workloads.produce(topic, [(None, f"r{i}".encode()) for i in range(records)], conf={"acks": "all", "log_level": 3})
        served_by: dict[str, int] = {}
        read: dict[str, int] = {}
        for i, (label, program) in enumerate(readers.items()):
            cid = f"{run.run_id}-reader-{i}"
            child = _spawn(run, f"reader-{i}", "consumer", program, topic, conf=lab_conf(cid, run.name(f"reader-{i}")))
            state = {"read": 0, "lines_when_read": None, "brokers": []}

            def done() -> bool:
                if not child.alive:
                    raise _failed(program, child)
                events = read_events(child.ledger, missing_ok=True)   # none before its first record
                state["read"] = sum(1 for e in events if e.kind == "consumed" and e.error is None)
                state["brokers"] = fetch_brokers(child.log_path.read_text(errors="replace")) if child.log_path.exists() else []
                if state["read"] >= records and state["lines_when_read"] is None:
                    state["lines_when_read"] = len(state["brokers"])
                return state["lines_when_read"] is not None and len(state["brokers"]) >= state["lines_when_read"] + 2

            try:
                wait_until(done, timeout_s=timeout_s, interval_s=0.1, what=f"{label}: all {records} records read",
                           on_timeout=lambda: f"read {state['read']}, statistics named brokers {state['brokers']}")
            finally:
                child.terminate()
            served_by[label], read[label] = state["brokers"][-1], state["read"]
        return FollowerFetch(topic, replicas[0], replicas, records, served_by, read)


# ----------------------------------------------------------------------------- the command line


@click.command("failure-budget")
@click.option("--min-insync-replicas", "min_isr", type=click.IntRange(1, 3), default=2, show_default=True,
              help="Topic-level min.insync.replicas.")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Upper bound of each wait, s.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def failure_budget_command(min_isr: int, timeout_s: float, as_json: bool) -> None:
    """How many broker failures one partition survives (notebook 08, "How many failures a
    partition survives"): one partition on brokers 1, 2, 3 (1 leads); brokers 3 and then 2 are
    killed, and after each kill notebook 08's budget_writer program writes one record and the
    partition is read from its log start. The killed brokers are started again before it
    returns (``replication_scenarios.run_failure_budget``)."""
    program = programs.from_notebook(NOTEBOOK, "budget_writer")
    show_programs(program)
    budget = run_failure_budget(program, min_insync_replicas=min_isr, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(budget.to_json(), indent=2))
        return
    click.echo(f"{budget.topic}: replicas {budget.replicas}, min.insync.replicas {budget.min_insync_replicas}")
    for s in budget.steps:  # the acks the program ran with, read from its text
        click.echo(f"  {len(s.brokers_down)} down {s.brokers_down}: ISR {s.isr}, acks={budget.settings.get('acks', 'all')} "
                   f"write {s.write_error or 'acknowledged'}, records read {s.readable}")


@click.command("failover-retry")
@click.option("--without-idempotence", "without", is_flag=True,
              help="Run notebook 08's idempotent_producer with enable.idempotence edited to False (exercise 6).")
@click.option("--messages", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Records the producer sends, one request each (the first one's answer is dropped).")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Upper bound of each wait, s.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def failover_command(without: bool, messages: int, timeout_s: float, as_json: bool) -> None:
    """An idempotent producer's ack lost, its leader killed: does the new leader recognise the
    retry? Runs notebook 08's idempotent_producer (programs.from_notebook)."""
    program = programs.from_notebook(NOTEBOOK, "idempotent_producer")
    if without:
        program = program.replace('"enable.idempotence": True', '"enable.idempotence": False', name="plain_producer")
    show_programs(program)
    r = run_failover_retry(program, records=messages, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"{program.name}: r0 resent to broker {r.elected} (new leader) {len(r.resends())}x; "
               f"log {[v for _, v in r.log]}, duplicates {r.duplicates}")


@click.command("planned-shutdown")
@click.option("--messages", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Records each writer sends while broker 2 is down.")
@click.option("--first-back", "first_back", type=click.IntRange(1, 2), default=2, show_default=True,
              help="The broker started first after both stopped (1: exercise 7).")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Upper bound of each wait, s.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def planned_shutdown_command(messages: int, first_back: int, timeout_s: float, as_json: bool) -> None:
    """Acknowledged writes lost with no fault (notebook 08, KAFKA-20554): broker 2's controlled
    shutdown, notebook 08's budget_writer (acks=all, and edited to acks=1) writes, broker 1's
    controlled shutdown, both started again (``replication_scenarios.run_planned_shutdown``)."""
    program = programs.from_notebook(NOTEBOOK, "budget_writer")
    acks_1 = program.replace('"acks": "all"', '"acks": "1"', name="budget_writer_acks_1")
    show_programs(acks_1, program)
    r = run_planned_shutdown({"acks=1": acks_1, "acks=all": program}, records=messages, first_back=first_back,
                             timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    for s in r.settings.values():
        click.echo(f"{s.label}: acknowledged {s.acked}, refused {s.errors or 0}, HW {s.hw_before} LEO {s.leo_before} "
                   f"before broker 1 stopped, broker {s.elected} elected, {s.log} in the log, {s.lost} lost")


#: ``kafkalab run failure-budget``, ``failover-retry`` and ``planned-shutdown``.
cli_commands = [failure_budget_command, failover_command, planned_shutdown_command]
