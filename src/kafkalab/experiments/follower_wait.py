"""Notebook 10, section "acks": which writes wait for a frozen follower (``run_follower_wait``).

One record per case, each sent by the notebook's ``one_record_producer`` program (or a copy with
its ``acks`` line changed; role ``gated``, ``kafkalab.instruments.fault_gate``) while an in-sync
follower is frozen (SIGSTOP): ``acks=1`` is answered after the leader's own append, ``acks=all``
when every replica in the ISR has the record, whatever ``min.insync.replicas`` says.

Sources: Kafka documentation 4.3, Design > Replication ("Replicated Logs", "Availability and
Durability Guarantees"), Producer Configs ``acks``, Broker Configs ``replica.lag.time.max.ms``,
``broker.session.timeout.ms``; KIP-631 (KRaft fencing).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from confluent_kafka.admin import AdminClient

from .. import admin, cluster, config, runscope, workloads
from ..errors import KafkalabError
from ..instruments import fault_gate
from ..ledger import read_events
from ..programs import Program, program_settings
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf


@dataclass
class FollowerWait:
    """``run_follower_wait``: which writes the leader acknowledges while one in-sync follower is
    frozen (SIGSTOP), and which wait for it.

    Attributes:
        leader, follower: the broker that leads both topics' partition, and the follower paused.
        min_insync_replicas: case label -> its topic's ``min.insync.replicas``.
        acked_while_paused: case label -> its record was acknowledged before the follower was
            resumed.
        isr_while_paused: the partition's ISR as the leader reported it after the acknowledged
            writes were counted, still with the follower paused: the follower was still in it.
        ack_ms: case label -> ms from ``produce`` to the delivery report.
        held_ms: ms from the sends to the resume (the follower's pause seen by the writes).
        replica_lag_time_max_ms, broker_session_timeout_ms, broker_heartbeat_interval_ms: the
            leader's configs that bound how long a silent follower stays in the ISR.
    """

    leader: int
    follower: int
    min_insync_replicas: dict[str, int]
    acked_while_paused: dict[str, bool]
    isr_while_paused: list[int]
    ack_ms: dict[str, float]
    held_ms: float
    replica_lag_time_max_ms: int
    broker_session_timeout_ms: int
    broker_heartbeat_interval_ms: int

    @property
    def isr_kept_ms(self) -> int:
        """The least time a frozen follower stays in the ISR: the leader drops it after
        ``replica.lag.time.max.ms`` without catching up, the controller fences it after
        ``broker.session.timeout.ms`` without a heartbeat, the last of which came at most
        ``broker.heartbeat.interval.ms`` before the pause."""
        return min(self.replica_lag_time_max_ms, self.broker_session_timeout_ms - self.broker_heartbeat_interval_ms)

    def to_json(self) -> dict:
        return {**asdict(self), "isr_kept_ms": self.isr_kept_ms}


def program_acks(program: Program) -> str | None:
    """The ``acks`` a producer program writes (``"acks": "all"`` -> ``"all"``), or None
    (``programs.program_settings``)."""
    value = program_settings(program.source).get("acks")
    return None if value is None else str(value)


def _isr_bounds(leader: int) -> dict[str, int]:
    """The leader's configs that bound how long a silent follower stays in the ISR
    (``replica.lag.time.max.ms``, ``broker.session.timeout.ms``, ``broker.heartbeat.interval.ms``;
    ms), from DescribeConfigs (Kafka 4.3 Broker Configs)."""
    return {k: int(v.value) for k, v in admin.describe_config(
        "broker", str(leader), ["replica.lag.time.max.ms", "broker.session.timeout.ms",
                                "broker.heartbeat.interval.ms"]).items()}


class _FollowerWaitRun:
    """One ``run_follower_wait``: its topics, its producer programs (one worker each, role
    ``gated``) and one method per phase, called in this order: ``create_topics``,
    ``start_programs``, ``pause_follower_and_send``, ``wait_report``, ``hold``,
    ``observe_while_paused``, ``resume_follower``, ``wait_programs_ended``, ``ack_times``;
    ``clean_up`` always. Every wait is bounded by ``timeout_s`` (seconds) unless it says more."""

    def __init__(self, leader: int, follower: int, timeout_s: float):
        self.leader, self.follower, self.timeout_s = leader, follower, timeout_s
        self.run = RunScope("ackwait")
        self.run_id = runscope.run_id()
        self.folder = workloads.run_dir(self.run_id) / self.run.topic("gate")
        self.workers: dict[str, workloads.Worker] = {}
        self.topics: dict[int, str] = {}
        self.paused = False
        self.at_leader = f"127.0.0.1:{config.Topology().node(leader).client_port}"

    def leader_state(self, t: str) -> tuple[int, list[int]]:
        """(leader, ISR) of topic ``t``'s partition 0 as the leader reports it: a fresh client
        asks the broker it is bootstrapped on, never the paused one."""
        md = AdminClient({"bootstrap.servers": self.at_leader, "log_level": 0}).list_topics(t, timeout=5).topics[t]
        p = md.partitions.get(0)
        return (p.leader, sorted(p.isrs)) if p is not None else (-1, [])

    def create_topics(self, cases: Mapping[str, tuple[Program, int]], replicas: list[int]) -> None:
        """One one-partition topic per ``min.insync.replicas`` with replicas ``replicas``; until
        each is led by the leader with a full ISR.

        Raises:
            KafkalabError: a topic could not be created.
            WaitTimeout: not led by the leader with a full ISR within ``timeout_s``.
        """
        self.topics = {m: self.run.topic(f"minisr{m}") for m in sorted({m for _, m in cases.values()})}
        admin.create_placed_topics({t: {"min.insync.replicas": str(m)} for m, t in self.topics.items()}, replicas,
                                   timeout_s=self.timeout_s)
        wait_until(lambda: all(self.leader_state(t) == (self.leader, sorted(replicas)) for t in self.topics.values()),
                   timeout_s=self.timeout_s,
                   what=f"both topics led by broker {self.leader} with a full ISR {sorted(replicas)}")

    def reports(self, label: str) -> list:
        """The delivery reports (``acked`` lines) of ``label``'s program so far."""
        return read_events(self.workers[label].ledger, growing=True, kinds="acked")

    def check_alive(self) -> None:
        """Raises KafkalabError if a program exited with an error (its log's tail in the message)."""
        for label, w in self.workers.items():
            if not w.alive and w.returncode != 0:
                raise KafkalabError(f"producer program for {label} exited {w.returncode}:\n{w.log_tail()}")

    def start_programs(self, cases: Mapping[str, tuple[Program, int]]) -> None:
        """One worker per case, writing one record to its ``min.insync.replicas``'s topic; until
        each has sent its warm-up record and waits at ``lab.wait_for_fault()`` (up to
        ``max(timeout_s, 120)`` seconds)."""
        for i, (label, (prog, m)) in enumerate(cases.items()):
            cid = f"{self.run_id}-ackwait-{i}"
            self.workers[label] = workloads.spawn(ProgramSpec(
                cid, self.run_id, str(self.folder / f"{cid}.jsonl"), "gated", prog.name, prog.source,
                conf=lab_conf(cid), topics=[self.topics[m]],
                options={"records": [[f"case-{i}", "during the pause", 0]]}))

        def ready() -> bool:
            self.check_alive()
            return all(fault_gate.ready_path(w.ledger).exists() for w in self.workers.values())

        wait_until(ready, timeout_s=max(self.timeout_s, 120.0), interval_s=0.05,
                   what="every producer program at lab.wait_for_fault(), its warm-up record acknowledged")

    def pause_follower_and_send(self) -> None:
        """The follower frozen (SIGSTOP), then the gate opened: every program sends its record."""
        cluster.pause(self.follower)
        self.paused = True
        fault_gate.go_path(next(iter(self.workers.values())).ledger).touch()

    def wait_report(self, label: str) -> None:
        """Until ``label``'s program has its delivery report."""
        def first_acked() -> bool:
            self.check_alive()
            return bool(self.reports(label))

        wait_until(first_acked, timeout_s=self.timeout_s, interval_s=0.005,
                   what=f"the {label} record's delivery report")

    @staticmethod
    def hold(hold_ms: float) -> None:
        """``hold_ms`` ms with the follower still frozen: the hold itself is the measurement."""
        hold_until = time.monotonic() + hold_ms / 1000
        while time.monotonic() < hold_until:
            time.sleep(0.01)

    def observe_while_paused(self, labels: Iterable[str]) -> tuple[dict[str, bool], list[int], int]:
        """Still paused: which labels have an acknowledged record, the ISR of the topic with the
        highest ``min.insync.replicas`` as the leader reports it, and the first ``produced``
        line's time (ms since the epoch)."""
        while_paused = {label: any(e.error is None for e in self.reports(label)) for label in labels}
        isr = self.leader_state(self.topics[max(self.topics)])[1]
        held_from = min(e.ts_ms for w in self.workers.values() for e in read_events(w.ledger, kinds="produced"))
        return while_paused, isr, held_from

    def resume_follower(self) -> float:
        """The follower resumed (SIGCONT); returns when, ms since the epoch."""
        cluster.resume(self.follower)
        resumed_ms = time.time() * 1000
        self.paused = False
        return resumed_ms

    def wait_programs_ended(self) -> None:
        """Every program ended (up to ``timeout_s + 60`` seconds each).

        Raises:
            KafkalabError: a program exited with an error.
            WaitTimeout: a program still running after ``timeout_s + 60`` seconds.
        """
        for label, w in self.workers.items():
            if w.wait(self.timeout_s + 60) != 0:
                raise KafkalabError(f"producer program for {label} exited {w.returncode}:\n{w.log_tail()}")

    def ack_times(self) -> dict[str, float]:
        """Label -> ms from the ledger's ``produced`` to its ``acked`` line.

        Raises:
            KafkalabError: a program has not exactly one delivery report, or it failed.
        """
        ack_ms: dict[str, float] = {}
        for label, w in self.workers.items():
            events = read_events(w.ledger)
            produced = [e for e in events if e.kind == "produced"]
            acked = [e for e in events if e.kind == "acked"]
            if len(acked) != 1 or acked[0].error is not None:
                raise KafkalabError(f"{label}: delivery reports {[(e.offset, e.error) for e in acked]}")
            ack_ms[label] = float(acked[0].ts_ms - produced[0].ts_ms)
        return ack_ms

    def clean_up(self) -> None:
        """The follower resumed if still paused, every program killed, the cluster restored
        (``cluster.restore``), the topics deleted."""
        if self.paused:
            cluster.resume(self.follower)
        for w in self.workers.values():
            if w.alive:
                w.kill()
        cluster.restore(max(self.timeout_s, 60.0))
        self.run.cleanup()


def run_follower_wait(cases: Mapping[str, tuple[Program, int]], leader: int = 1, follower: int = 3,
                      hold_ms: float = 500.0, timeout_s: float = 30.0) -> FollowerWait:
    """One record per case ``label -> (producer program, the topic's min.insync.replicas)`` while
    follower ``follower`` is frozen (SIGSTOP, ``kafkalab.cluster.pause``) but still in the ISR.
    Each program (role ``gated``: ``kafkalab.instruments.fault_gate``) runs as it is in a worker
    process: it sends a warm-up record (connections and metadata ready), then waits at
    ``lab.wait_for_fault()``. One one-partition topic per ``min.insync.replicas`` (RF 3, replicas
    ``[leader, ..., follower]``) is created and fully replicated first. Then the follower is
    paused and the gate opened, so the records are sent at once; after the first report of a
    program that does not write ``acks=all`` plus ``hold_ms``, the run notes which reports came
    (the ledgers) and asks the leader for the ISR; then the follower is resumed and every program
    awaited. ``ack_ms`` is from the ledger's ``produced`` to its ``acked`` line (ms resolution).

    The leader acknowledges an ``acks=all`` write when its high watermark passes it, that is
    when every replica in the ISR has fetched it, whatever ``min.insync.replicas`` says; a
    frozen follower sends no fetch, so the write waits for it until it is resumed or dropped
    from the ISR (``FollowerWait.isr_kept_ms``, at least 5 s here). ``min.insync.replicas``
    only decides whether the leader accepts an ``acks=all`` write when the ISR is smaller
    (NOT_ENOUGH_REPLICAS below it). ``acks=1`` is answered after the leader's own append.

    The cluster is restored (follower resumed, ISR full: ``cluster.restore``) before this
    returns or raises.

    Raises:
        KafkalabError: ``hold_ms`` not well below the configured ISR bound, no case without
            ``acks=all``, a program failed, a report missing or failed.
        WaitTimeout: the topics not led by ``leader`` with a full ISR within ``timeout_s``.

    Sources: Kafka documentation 4.3, Design > Replication ("Replicated Logs", "Availability
    and Durability Guarantees"), Producer Configs ``acks``, Broker Configs
    ``replica.lag.time.max.ms``, ``broker.session.timeout.ms``; KIP-631 (KRaft fencing).
    """
    quick = next((label for label, (prog, _) in cases.items() if program_acks(prog) != "all"), None)
    if quick is None:
        raise KafkalabError("one case must not write acks=all: its report marks the start of the hold")
    replicas = [leader, *[b for b in config.BROKER_IDS if b != leader and b != follower], follower]
    cfg = _isr_bounds(leader)
    bound = FollowerWait(leader, follower, {}, {}, [], {}, 0.0, cfg["replica.lag.time.max.ms"],
                         cfg["broker.session.timeout.ms"], cfg["broker.heartbeat.interval.ms"]).isr_kept_ms
    if hold_ms > bound / 4:
        raise KafkalabError(f"hold_ms={hold_ms} is not well below the {bound} ms a frozen follower stays in the ISR")
    fw = _FollowerWaitRun(leader, follower, timeout_s)
    try:
        fw.create_topics(cases, replicas)
        fw.start_programs(cases)
        fw.pause_follower_and_send()
        fw.wait_report(quick)
        fw.hold(hold_ms)
        while_paused, isr, held_from = fw.observe_while_paused(cases)
        resumed_ms = fw.resume_follower()
        fw.wait_programs_ended()
        ack_ms = fw.ack_times()
        return FollowerWait(leader, follower, {label: m for label, (_, m) in cases.items()}, while_paused,
                            isr, ack_ms, round(resumed_ms - held_from, 1), cfg["replica.lag.time.max.ms"],
                            cfg["broker.session.timeout.ms"], cfg["broker.heartbeat.interval.ms"])
    finally:
        fw.clean_up()
