"""Notebook 08: can Kafka lose acknowledged writes? acks, ISR, min.insync.replicas, unclean
leader election and ELR, measured by pausing and killing brokers.

Every partition of a round has the same three replicas, leader first (``[1, 2, 3]`` by
default: broker 1 leads, 2 and 3 follow). A round applies one fault to every partition at
once, so each configuration (a topic) and each repeat (a partition of it) sees exactly the
same fault; the outcome is decided by the settings, never by timing luck:

``leader-crash``
    The followers are paused (SIGSTOP) while still in the ISR, so they fetch nothing. Each
    producer sends its records; they reach the leader's log (checked on disk) but not the
    followers'. The leader is SIGKILLed, the followers resume, the controller fences the dead
    leader (``broker.session.timeout.ms``) and elects a follower from the ISR (a clean
    election). The old leader restarts and rejoins as a follower, truncating what it alone had.

``isr-shrink``
    The followers are paused until the ISR is the leader alone: a paused broker misses its
    heartbeats, the controller fences it after ``broker.session.timeout.ms`` (6 s on the
    teaching cluster) and takes it out of every ISR (a silent follower would also be dropped
    by the leader after ``replica.lag.time.max.ms``, 10 s here; fencing comes first). Writes
    are then acknowledged by the leader alone (acks=1, or acks=all with
    min.insync.replicas=1) or refused (acks=all with min.insync.replicas=2:
    NOT_ENOUGH_REPLICAS). The leader is killed, the followers resume: with
    ``unclean.leader.election.enable=true`` the controller elects an out-of-sync follower;
    with false the partition stays offline until an ISR member returns, unless KIP-966
    Eligible Leader Replicas (ELR) allows a follower that was in the ISR when it shrank below
    min.insync.replicas. The producer program is edited to ``retries=0`` here
    (``without_retries``), so the broker's refusal is the delivery report's error (librdkafka
    would otherwise retry NOT_ENOUGH_REPLICAS until ``message.timeout.ms``).

The writes of a round come from a producer program (notebook 08's ``%%program producer``,
role ``gated``: ``kafkalab.instruments.fault_gate``), one worker process per setting, run as
shown; the program's ``acks`` is the setting's (``program_acks``). The programs start before
the fault and wait at ``lab.wait_for_fault()``; the harness pauses the followers, then opens
the gate, so every record is sent during the fault.

Notebook 08's one-partition experiments (an idempotent retry across an election, the failure
budget, follower fetching) are ``kafkalab.experiments.replication_scenarios``.

Each record is one ledger line when produced and one when its delivery report arrives
(``kafkalab.ledger``; the programs' ledgers, copied into the round's); after the cluster has recovered (all three replicas in the ISR) every
partition is read from offset 0 to its high watermark and each record found is a
``consumed`` line. A *lost write* (Jepsen's term) is an acknowledged record missing from that
read. Before the fault, ``warmup`` records per partition are written with acks=all and fully
replicated (phase ``before``, the record key); the fault's records have key ``during``.

Sources (Kafka 4.3): documentation, Design > Replication ("Replicated Logs: Quorums, ISRs, and
State Machines", "Unclean leader election: What if they all die?", "Availability and
Durability Guarantees"); Broker and Topic Configs (``acks``, ``min.insync.replicas``,
``unclean.leader.election.enable`` default false since 0.11.0 (KIP-106),
``replica.lag.time.max.ms``, ``broker.session.timeout.ms``); KIP-101 (truncation by leader
epoch); KIP-966 (Eligible Leader Replicas; on by default for new clusters since 4.1);
librdkafka CONFIGURATION.md (v2.16: ``acks``, ``retries``, ``message.timeout.ms``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import click
from confluent_kafka import KafkaException

from .. import admin, cluster, config, programs, runscope, segments, workloads
from ..clickutil import show_programs, shows_programs
from ..errors import KafkalabError
from ..instruments import fault_gate
from ..ledger import Ledger, read_events
from ..programs import Program
from ..worker import ProgramSpec, lab_conf
from ..waiting import wait_until
from .replication_analysis import Classification, classify_records, unavailable_seconds

SCENARIOS: tuple[str, ...] = ("leader-crash", "isr-shrink")
ACKS: tuple[str, ...] = ("0", "1", "all")
#: Seconds between two metadata samples of the availability monitor.
MONITOR_INTERVAL_S = 0.25


# ----------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Setting:
    """One configuration: the producer's ``acks`` and the topic's ``min.insync.replicas`` and
    ``unclean.leader.election.enable`` (topic-level configs, Kafka Topic Configs 4.3).

    Raises:
        ValueError: ``acks`` not in ``ACKS``, or ``min_insync_replicas`` not 1..3.
    """

    acks: str
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False

    def __post_init__(self) -> None:
        if str(self.acks) not in ACKS:
            raise ValueError(f"acks must be one of {', '.join(ACKS)}, not {self.acks!r}")
        object.__setattr__(self, "acks", str(self.acks))
        if not 1 <= int(self.min_insync_replicas) <= 3:
            raise ValueError(f"min.insync.replicas must be 1..3 for 3 replicas, not {self.min_insync_replicas!r}")

    @property
    def label(self) -> str:
        """``"acks=all minISR=2 unclean=false"``."""
        return (f"acks={self.acks} minISR={self.min_insync_replicas} "
                f"unclean={str(self.unclean_leader_election).lower()}")

    def creation_configs(self) -> dict[str, str]:
        """Topic-level configs for ``create_topics``."""
        return {"min.insync.replicas": str(self.min_insync_replicas),
                "unclean.leader.election.enable": str(self.unclean_leader_election).lower()}

    @classmethod
    def parse(cls, label: str) -> "Setting":
        """Inverse of ``label``."""
        m = re.fullmatch(r"acks=(\S+) minISR=(\d) unclean=(true|false)", label.strip())
        if not m:
            raise ValueError(f"not a setting label: {label!r}")
        return cls(m.group(1), int(m.group(2)), m.group(3) == "true")


def check_scenario(scenario: str) -> str:
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}, not {scenario!r}")
    return scenario


# ----------------------------------------------------------------------------- results


@dataclass
class PartitionOutcome:
    """One partition (one repeat of one setting) through the round.

    Offsets: ``hw_at_kill`` is the high watermark the leader reported just before it was
    killed; ``leo_at_kill`` its log end offset read from its segment files; ``old_leader_leo_dead``
    the same files after the SIGKILL (before the restart); ``old_leader_leo_rejoined`` after it
    rejoined the ISR. ``elected``: the first live leader after the kill (-1: none). Seconds are
    measured from the kill. ``describe``: ``kafka-topics --describe`` while the old leader was
    down (Leader, Isr, Elr, LastKnownElr); ``describe_shrunk``: the same with the ISR shrunk,
    before the kill (both isr-shrink only; empty otherwise).
    """

    topic: str
    partition: int
    setting: str
    classification: Classification
    produce_errors: dict[str, int]
    hw_at_kill: int
    leo_at_kill: int
    isr_at_kill: list[int]
    elected: int
    unavailable_s: float
    old_leader_leo_dead: int
    old_leader_leo_rejoined: int
    final_hw: int
    describe: dict[str, str] = field(default_factory=dict)
    describe_shrunk: dict[str, str] = field(default_factory=dict)


@dataclass
class SettingResult:
    """Totals of one setting over its repeats (``during`` records only: the fault's)."""

    setting: str
    acked: int
    lost_acked: int
    produce_errors: int
    not_acked_present: int
    produced: int
    before_lost: int
    unavailable_s: float  # the longest over the repeats
    error_codes: dict[str, int]
    elected: list[int]

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class RoundResult:
    """What ``run_round`` returns (``to_json()`` is what ``kafkalab run replication --json``
    prints, under ``"round"``)."""

    run_id: str
    scenario: str
    messages: int
    repeats: int
    warmup: int
    leader: int
    followers: list[int]
    topics: dict[str, str]                      # setting label -> topic
    partitions: list[PartitionOutcome]
    timeline: list[tuple[float, str]]           # (seconds since the round started, event)
    ledger: str
    describe_text: str
    elapsed_s: float
    describe_shrunk_text: str = ""

    def by_setting(self) -> dict[str, SettingResult]:
        """Setting label -> totals, in the order the settings were given."""
        out: dict[str, SettingResult] = {}
        for label in self.topics:
            parts = [p for p in self.partitions if p.setting == label]
            errors: Counter = Counter()
            for p in parts:
                errors.update(p.produce_errors)
            out[label] = SettingResult(
                setting=label,
                acked=sum(p.classification.acked for p in parts),
                lost_acked=sum(p.classification.acked_lost for p in parts),
                produce_errors=sum(p.classification.not_acked for p in parts),
                not_acked_present=sum(p.classification.not_acked_present for p in parts),
                produced=sum(p.classification.produced for p in parts),
                before_lost=sum(p.classification.before_lost for p in parts),
                unavailable_s=round(max((p.unavailable_s for p in parts), default=0.0), 2),
                error_codes=dict(errors),
                elected=[p.elected for p in parts],
            )
        return out

    def to_json(self) -> dict:
        d = asdict(self)
        d["settings"] = {k: v.to_json() for k, v in self.by_setting().items()}
        return d


# ----------------------------------------------------------------------------- observing


def log_end_offset(broker: int, topic: str, partition: int) -> int:
    """One replica's log end offset, read from the broker's segment files (``kafkalab.segments``;
    works while the broker is down); 0 if it has no folder."""
    d = Path(cluster.status().brokers[broker].data_dir) / segments.partition_dir_name(topic, partition)
    segs = segments.read_partition(d, check_crc=False) if d.exists() else []
    return segs[-1].next_offset if segs else 0


DESCRIBE_LINE = re.compile(r"Topic: ?(?P<topic>\S+)\s+Partition: ?(?P<partition>\d+)\s+Leader: ?(?P<leader>\S+)"
                           r"\s+Replicas: ?(?P<replicas>[\d,]*)\s+Isr: ?(?P<isr>[\d,]*)"
                           r"(?:\s+Elr: ?(?P<elr>[\d,]*))?(?:\s+LastKnownElr: ?(?P<last_known_elr>[\d,]*))?")


def parse_describe(text: str) -> dict[tuple[str, int], dict[str, str]]:
    """Partition lines of ``kafka-topics --describe`` (Kafka 4.x prints ``Elr`` and
    ``LastKnownElr``, KIP-966) -> (topic, partition) -> {leader, replicas, isr, elr,
    last_known_elr} as printed ("none" for no leader, "" for an empty list)."""
    out = {}
    for line in text.splitlines():
        m = DESCRIBE_LINE.search(line.replace("\t", " "))
        if m and "PartitionCount" not in line:
            d = {k: (v or "") for k, v in m.groupdict().items()}
            out[(d.pop("topic"), int(d.pop("partition")))] = d
    return out


#: Broker configs notebook 08 shows (Kafka 4.3 Broker Configs).
BROKER_SETTINGS = ("min.insync.replicas", "unclean.leader.election.enable", "replica.lag.time.max.ms",
                   "broker.session.timeout.ms", "replica.fetch.wait.max.ms")


class AvailabilityMonitor:
    """Samples (leader, ISR) of ``topics`` every ``MONITOR_INTERVAL_S`` from ``brokers`` in a
    background thread; ``samples`` is a list of (seconds since ``t0``, {partition: (leader, isr)})."""

    def __init__(self, topics: list[str], brokers: list[int], t0: float):
        self.topics, self.brokers, self.t0 = topics, brokers, t0
        self.samples: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="availability-monitor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic() - self.t0, admin.partition_states(self.brokers, self.topics, 2.0)))
            except KafkaException:
                pass
            self._stop.wait(MONITOR_INTERVAL_S)

    def stop(self) -> list[tuple[float, dict]]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.samples


# ----------------------------------------------------------------------------- the round


def program_acks(program: Program) -> str:
    """The ``acks`` a producer program gives its Producer (``programs.program_settings``, the one
    parser of a program's settings); ``-1`` reads as ``all`` (librdkafka CONFIGURATION.md:
    ``acks`` -1 or all).

    Raises:
        ValueError: the program's Producer settings have no ``acks``.
    """
    acks = programs.program_settings(program.source).get("acks")
    if acks is None:
        raise ValueError(f"program {program.name} must set \"acks\" in its Producer's settings")
    return "all" if str(acks) == "-1" else str(acks)


def with_acks(program: Program, acks: str) -> Program:
    """``program`` with its ``acks`` setting edited to ``acks`` (``Program.replace``, as a
    learner edits the cell), named ``<name>_acks_<acks>``; the program itself if it already
    sends ``acks``."""
    current = program_acks(program)
    if current == str(acks):
        return program
    return program.replace(f'"acks": "{current}"', f'"acks": "{acks}"', name=f"{program.name}_acks_{acks}")


class _ProgramRuns:
    """One producer program process (role ``gated``) per setting, started before the fault and
    held at its ``lab.wait_for_fault()`` until ``go``; their delivery reports read from their
    ledgers (written through, so they can be read while the programs run)."""

    def __init__(self, runs: dict[Setting, Program], topics: dict[str, Setting], parts: dict[str, list[tuple[str, int, str]]],
                 run_id: str, folder: Path):
        self.folder = folder
        self.workers: dict[str, workloads.Worker] = {}
        by_setting = {s: t for t, s in topics.items()}
        for i, (s, prog) in enumerate(runs.items()):
            cid = f"{run_id}-producer-{i}"
            recs = [[key, value, p] for (p, key, value) in parts[by_setting[s]]]
            self.workers[s.label] = workloads.spawn(ProgramSpec(
                cid, run_id, str(folder / f"{cid}.jsonl"), "gated", prog.name, prog.source,
                conf=lab_conf(cid), topics=[by_setting[s]], options={"records": recs}))

    def wait_ready(self, timeout_s: float) -> None:
        def ready() -> bool:
            for label, w in self.workers.items():
                if not w.alive:
                    raise KafkalabError(f"producer program for {label} exited {w.returncode}:\n{w.log_tail()}")
            return all(fault_gate.ready_path(w.ledger).exists() for w in self.workers.values())

        wait_until(ready, timeout_s=timeout_s, interval_s=0.05, what="every producer program at lab.wait_for_fault()")

    def go(self) -> None:
        fault_gate.go_path(next(iter(self.workers.values())).ledger).touch()

    def reports(self, label: str) -> list:
        return read_events(self.workers[label].ledger, kinds="acked")

    def refused(self) -> Counter:
        """(topic, partition) -> delivery reports with an error, so far."""
        out: Counter = Counter()
        for label in self.workers:
            out.update((e.topic, e.partition) for e in self.reports(label) if e.error)
        return out

    def wait_reports(self, labels: Iterable[str], expected: dict[str, int], timeout_s: float) -> None:
        labels = list(labels)
        counts: dict[str, int] = {}

        def done() -> bool:
            for k in labels:
                counts[k] = len(self.reports(k))
                if counts[k] < expected[k] and not self.workers[k].alive:
                    raise KafkalabError(f"producer program for {k} ended with {counts[k]} of {expected[k]} "
                                        f"delivery reports:\n{self.workers[k].log_tail()}")
            return all(counts[k] >= expected[k] for k in labels)

        wait_until(done, timeout_s=timeout_s, interval_s=0.05, what=f"delivery reports of {labels}",
                   on_timeout=lambda: f"reports so far: {counts}, expected {expected}")

    def wait_ended(self, timeout_s: float) -> None:
        for label, w in self.workers.items():
            if w.wait(timeout_s) != 0:
                raise KafkalabError(f"producer program for {label} exited {w.returncode}:\n{w.log_tail()}")

    def copy_into(self, ledger: Ledger) -> None:
        """Every ``produced`` and ``acked`` line of the programs into the round's ledger, with
        the setting's label as ``client_id`` (an acks=0 report's offset -1 becomes None)."""
        for label, w in self.workers.items():
            for e in read_events(w.ledger):
                if e.kind in ("produced", "acked"):
                    off = e.offset if e.offset is not None and e.offset >= 0 else None
                    ledger.record(e.kind, topic=e.topic, partition=e.partition, key=e.key, value=e.value,
                                  client_id=label, offset=off, error=e.error)

    def stop(self) -> None:
        for w in self.workers.values():
            if w.alive:
                w.kill()


def _check_round(scenario: str, runs: Mapping[Setting, Program], messages: int, repeats: int, warmup: int,
                 leader: int, topics: Mapping[Setting, str] | None) -> dict[Setting, Program]:
    """``run_round``'s arguments, checked before the cluster is touched; ``runs`` as a dict.

    Raises:
        ValueError: unknown scenario, no settings, a program whose ``acks`` is not its setting's,
            messages < 1, repeats < 1, warmup < 0, topics not one per setting, leader not a broker.
    """
    check_scenario(scenario)
    runs = dict(runs)
    settings = list(runs)
    if not settings:
        raise ValueError("give at least one setting")
    for s, prog in runs.items():
        if program_acks(prog) != s.acks:
            raise ValueError(f"program {prog.name} sends acks={program_acks(prog)}, its setting says {s.label}")
    if topics is not None and set(topics) != set(settings):
        raise ValueError("topics must name one topic per setting")
    if messages < 1 or repeats < 1 or warmup < 0:
        raise ValueError("messages and repeats must be >= 1, warmup >= 0")
    if leader not in config.BROKER_IDS:
        raise ValueError(f"leader must be one of {config.BROKER_IDS}")
    return runs


class _Round:
    """One ``run_round``: its topics, partitions, producer programs, ledger and timeline, and one
    method per phase, called in this order: ``place_leader``, ``replicate_warmup``,
    ``start_producers``, ``pause_followers``, ``answer_parked_fetches``, ``shrink_isr``
    (isr-shrink only), ``send_during_fault``, ``wait_leader_log``, ``crash_leader``,
    ``wait_election``, ``restart_old_leader``, ``collect_reports``, ``read_back``; then
    ``clean_up`` (always), ``wait_restored_leader`` (``keep_topics`` only) and ``count``. What a
    phase finds is an attribute the later phases read. Every wait is bounded by ``timeout_s``
    (seconds) and raises ``WaitTimeout`` naming its condition."""

    # set by the phases, in this order
    producers: _ProgramRuns | None
    sent: dict[str, int]
    hw_at_kill: dict[tuple[str, int], int]
    isr_at_kill: dict[tuple[str, int], tuple[int, list[int]]]
    leo_at_kill: dict[tuple[str, int], int]
    t_kill: float
    described: dict[tuple[str, int], dict[str, str]]
    dead_leo: dict[tuple[str, int], int]
    back_after_s: float
    samples: list[tuple[float, dict]]
    rejoined_leo: dict[tuple[str, int], int]
    contents: dict[tuple[str, int], list[tuple[int, str]]]

    def __init__(self, scenario: str, runs: dict[Setting, Program], messages: int, repeats: int, warmup: int,
                 leader: int, topics: Mapping[Setting, str] | None, timeout_s: float):
        self.scenario, self.runs, self.messages, self.repeats = scenario, runs, messages, repeats
        self.warmup, self.leader, self.timeout_s = warmup, leader, timeout_s
        self.settings = list(runs)
        self.followers = [b for b in config.BROKER_IDS if b != leader]
        self.replicas = [leader, *self.followers]
        self.rid = runscope.run_id()
        short = "lc" if scenario == "leader-crash" else "is"
        self.fence_topic = f"repl-{self.rid}-{short}-fence"
        self.barrier_topic = f"repl-{self.rid}-{short}-barrier"
        self.shrunk_text = ""
        self.describe_text = ""
        self.t0 = time.monotonic()
        self.timeline: list[tuple[float, str]] = []
        self.caller_topics = topics is not None
        self.topics: dict[str, Setting] = {t: s for s, t in topics.items()} if topics is not None else \
            {f"repl-{self.rid}-{short}-{i}": s for i, s in enumerate(self.settings)}
        # kafka-topics --topic takes a regular expression
        self.topic_pattern = "(" + "|".join(sorted(self.topics)) + ")"
        self.parts = [(t, p) for t in self.topics for p in range(repeats)]
        self.records = {t: [(p, "during", f"{t}/{p}/during/{i}") for p in range(repeats) for i in range(messages)]
                        for t in self.topics}
        self.folder = workloads.run_dir(self.rid)
        self.ledger_path = self.folder / f"replication-{scenario}.jsonl"
        self.ledger = Ledger(self.ledger_path, self.rid)
        self.monitor: AvailabilityMonitor | None = None
        self.producers = None
        self.all_brokers = list(config.BROKER_IDS)

    def mark(self, event: str) -> None:
        """``event`` on the timeline, at seconds since the round started."""
        self.timeline.append((round(time.monotonic() - self.t0, 2), event))

    def place_leader(self) -> None:
        """The topics created (the fence-post topic, and the round's unless the caller made them),
        every partition led by ``leader`` with a full ISR."""
        cluster.wait_healthy(self.timeout_s)
        topics = {} if self.caller_topics else {t: s.creation_configs() for t, s in self.topics.items()}
        admin.create_placed_topics({self.fence_topic: {}} | topics, self.replicas, self.repeats, self.timeout_s)
        admin.wait_partitions([*self.topics, self.fence_topic], self.repeats, self.all_brokers,
                              lambda v: v[0] == self.leader and len(v[1]) == 3,
                              f"every partition led by broker {self.leader} with a full ISR", self.timeout_s)
        self.mark(f"topics created, broker {self.leader} leads, ISR full")

    def replicate_warmup(self) -> None:
        """before: fully replicated records (acks=all, HW = warmup on every partition), and one
        on the fence-post partition: acknowledged with acks=all, it shows that both followers
        fetch that partition, so their fetches parked at the leader include it (see
        ``answer_parked_fetches``).

        Raises:
            KafkalabError: the fence-ready or a warm-up record was not delivered.
        """
        ledger, timeout_s, warmup = self.ledger, self.timeout_s, self.warmup
        all3 = {"acks": "all", "log_level": 0}
        workloads.produce(self.fence_topic, [(None, b"fence-ready", 0, None)], conf=all3, timeout_s=timeout_s)
        for t in self.topics if warmup else ():
            recs = [(b"before", f"{t}/{p}/before/{i}".encode(), p, None) for p in range(self.repeats) for i in range(warmup)]
            for (_, v, p, _), (_, offset) in zip(recs, workloads.produce(t, recs, conf=all3, timeout_s=timeout_s)):
                for kind, off in (("produced", None), ("acked", offset)):
                    ledger.record(kind, topic=t, partition=p, key="before", value=v.decode(), client_id="warmup",
                                  offset=off)
        wait_until(lambda: all(v >= warmup for v in admin.list_offsets(self.parts, brokers=self.all_brokers).values()),
                   timeout_s=timeout_s, what=f"high watermark {warmup} on every partition (warm-up replicated)")
        admin.wait_partitions([*self.topics, self.fence_topic], self.repeats, self.all_brokers, lambda v: len(v[1]) == 3,
                              "ISR full after warm-up", timeout_s)
        self.mark(f"{warmup} records per partition replicated to all 3 (high watermark {warmup})")

    def start_producers(self) -> None:
        """The programs start now and wait at lab.wait_for_fault(), their metadata fetched.

        Raises:
            KafkalabError: a program exited before it reached the gate.
        """
        self.producers = _ProgramRuns(self.runs, self.topics, self.records, self.rid, self.folder)
        self.producers.wait_ready(self.timeout_s)
        self.mark(f"{len(self.runs)} producer programs started, waiting at lab.wait_for_fault()")

    def pause_followers(self) -> None:
        """The fault: every follower paused (SIGSTOP)."""
        for f in self.followers:
            cluster.pause(f)
        self.mark(f"followers {self.followers} paused ({cluster.fault_name('pause')})")

    def answer_parked_fetches(self) -> None:
        """A paused follower's kernel still accepts bytes: a fetch it sent before the pause,
        parked at the leader (up to replica.fetch.wait.max.ms, 500 ms), would be answered by the
        next append and processed when the follower wakes. One acknowledged record on a
        fence-post partition of the same leader answers those fetches before the round's records
        are written, so the round's records reach the leader's log only. It answers only fetches
        that name its partition: the fence-ready record (``replicate_warmup``) made sure that
        both followers fetch it (a fetch that did not, woken by the round's first append, once
        gave the elected follower an acks=1 partition's 8 records in a compose run).

        Raises:
            KafkalabError: the leader did not acknowledge the fence-post record.
        """
        workloads.produce(self.fence_topic, [(None, b"fence-post", 0, None)], timeout_s=self.timeout_s,
                          conf={"bootstrap.servers": admin.bootstrap_of([self.leader]), "acks": "1", "log_level": 0})
        self.mark("fence-post record acknowledged by the leader")

    def shrink_isr(self) -> None:
        """isr-shrink: until the ISR is the leader alone on every partition (the paused followers
        fenced or lagging), applied by the leader; then ``kafka-topics --describe``."""
        leader, timeout_s = self.leader, self.timeout_s
        admin.wait_partitions(list(self.topics), self.repeats, [leader], lambda v: v[1] == [leader],
                              f"ISR = [{leader}] on every partition (followers fenced or lagging)", timeout_s)
        self.mark(f"ISR shrank to [{leader}]")
        # The broker shows a metadata change in its metadata cache a moment before its
        # partitions apply it, and applies one change fully before it shows the next (KRaft
        # BrokerMetadataPublisher). A topic created now and seen by the leader is a barrier:
        # once it shows, every partition of the leader runs with ISR = [leader].
        admin.create_placed_topics({self.barrier_topic: {}}, [leader], 1, timeout_s, brokers=[leader])
        wait_until(lambda: self.barrier_topic in admin.client_for([leader]).list_topics(timeout=3).topics,
                   timeout_s=timeout_s,
                   what=f"broker {leader} applied the ISR change (barrier topic visible)")
        self.shrunk_text = cluster.tool("kafka-topics", "--bootstrap-server", admin.bootstrap_of([leader]), "--describe",
                                        "--topic", self.topic_pattern, timeout_s=timeout_s).stdout
        self.mark("kafka-topics --describe with the ISR shrunk")

    def send_during_fault(self) -> dict[tuple[str, int], int]:
        """The gate opened: the programs send; until every report that can come during the fault
        came. Returns (topic, partition) -> the log end offset the leader must reach.

        Raises:
            KafkalabError: a program ended without all its delivery reports.
        """
        self.producers.go()
        self.mark("the programs send (lab.wait_for_fault() returned)")
        leader_crash = self.scenario == "leader-crash"
        self.sent = {s.label: self.messages * self.repeats for s in self.settings}
        # acks=all in leader-crash cannot be acknowledged while the followers sleep
        waiting_for = [s.label for s in self.settings if not (leader_crash and s.acks == "all")]
        self.producers.wait_reports(waiting_for, self.sent, self.timeout_s)
        refused = self.producers.refused()
        # A broker handles one request per connection at a time (it mutes the connection until
        # it answers), so an acks=all request waiting for paused followers holds back that
        # producer's later requests: in leader-crash only its first request reaches the log.
        # Those records are never acknowledged before the kill, so they are not waited for.
        held_back = {t for t, s in self.topics.items() if leader_crash and s.acks == "all"}
        return {(t, p): self.warmup + (0 if t in held_back else self.messages - refused[(t, p)])
                for t, p in self.parts}

    def wait_leader_log(self, expected_leo: dict[tuple[str, int], int]) -> None:
        """Until every record that was not refused is in the leader's log on disk; then the
        leader's high watermark, ISR and log end offset just before the kill."""
        leader, parts = self.leader, self.parts
        last_leo: dict = {}

        def appended() -> bool:
            for t, p in parts:
                last_leo[(t, p)] = log_end_offset(leader, t, p)
            return all(last_leo[tp] >= expected_leo[tp] for tp in parts)

        wait_until(appended, timeout_s=self.timeout_s, interval_s=0.05,
                   what=f"every record that was not refused in broker {leader}'s log on disk",
                   on_timeout=lambda: f"LEO {last_leo}, expected {expected_leo}")
        self.hw_at_kill = admin.list_offsets(parts, brokers=[leader])
        self.isr_at_kill = admin.partition_states([leader], list(self.topics))
        self.leo_at_kill = dict(last_leo)
        self.mark(f"records in broker {leader}'s log: HW {min(self.hw_at_kill.values())}-"
                  f"{max(self.hw_at_kill.values())}, LEO {min(self.leo_at_kill.values())}-"
                  f"{max(self.leo_at_kill.values())}")

    def crash_leader(self) -> None:
        """The leader killed (SIGKILL), the followers resumed, the availability monitor started."""
        cluster.kill(self.leader)
        self.t_kill = time.monotonic()
        self.mark(f"leader {self.leader} killed ({cluster.fault_name('kill')})")
        for f in self.followers:
            cluster.resume(f)
        self.mark(f"followers {self.followers} resumed ({cluster.fault_name('resume')})")
        self.monitor = AvailabilityMonitor(list(self.topics), self.followers, self.t_kill)

    def wait_election(self) -> None:
        """The election: the dead leader fenced, the followers registered, nobody names it
        leader; isr-shrink: ``kafka-topics --describe`` meanwhile; leader-crash: every delivery
        report in (acks=all: retried to the new leader). Then the dead leader's log end offsets."""
        leader, followers, timeout_s = self.leader, self.followers, self.timeout_s
        wait_until(lambda: leader not in cluster.registered_brokers(admin.bootstrap_of(followers))
                   and set(followers) <= cluster.registered_brokers(admin.bootstrap_of(followers)),
                   timeout_s=timeout_s, interval_s=0.2,
                   what=f"broker {leader} fenced and brokers {followers} registered")
        admin.wait_partitions(list(self.topics), self.repeats, followers, lambda v: v[0] != leader,
                              f"no partition led by the dead broker {leader}", timeout_s)
        self.mark(f"broker {leader} fenced; controller decided every partition")
        if self.scenario == "isr-shrink":  # a JVM start (2-5 s): only where the notebook reads it
            self.describe_text = cluster.tool("kafka-topics", "--bootstrap-server", admin.bootstrap_of(followers),
                                              "--describe", "--topic", self.topic_pattern, timeout_s=timeout_s).stdout
            self.mark("kafka-topics --describe while the old leader is down")
        self.described = parse_describe(self.describe_text)
        if self.scenario == "leader-crash":
            self.producers.wait_reports([s.label for s in self.settings], self.sent, timeout_s)
            self.mark("every delivery report in")
        self.dead_leo = {tp: log_end_offset(leader, *tp) for tp in self.parts}

    def restart_old_leader(self) -> None:
        """The old leader restarted; until every partition is led and its ISR full again (the old
        leader rejoined, truncating what it alone had); the availability monitor stopped."""
        cluster.cluster().start(self.leader, timeout_s=self.timeout_s)
        self.back_after_s = time.monotonic() - self.t_kill
        self.mark(f"broker {self.leader} restarted and registered")
        admin.wait_partitions(list(self.topics), self.repeats, self.all_brokers, lambda v: v[0] >= 0 and len(v[1]) == 3,
                              f"every partition led and its ISR full again (broker {self.leader} rejoined)",
                              self.timeout_s)
        self.mark("ISR full again")
        self.samples = self.monitor.stop()
        self.monitor = None

    def collect_reports(self) -> None:
        """Every program ended; their ``produced`` and ``acked`` lines copied into the round's
        ledger.

        Raises:
            KafkalabError: a program exited with an error.
        """
        self.producers.wait_ended(self.timeout_s)
        self.producers.copy_into(self.ledger)

    def read_back(self) -> None:
        """The rejoined leader's log end offsets; every partition read from offset 0 to its high
        watermark, each record a ``consumed`` ledger line."""
        self.rejoined_leo = {tp: log_end_offset(self.leader, *tp) for tp in self.parts}
        self.contents = {tp: [] for tp in self.parts}
        for t in self.topics:
            for c in workloads.read_topic(t, self.repeats, timeout_s=self.timeout_s):
                self.contents[(t, c.partition)].append((c.offset, c.value))
        for (t, p), recs in self.contents.items():
            for off, value in recs:
                self.ledger.record("consumed", topic=t, partition=p, offset=off, value=value,
                                   key=value.split("/")[-2] if value.count("/") >= 3 else None, client_id="final-read")
        self.mark("every partition read to its high watermark")

    def clean_up(self, keep_topics: bool) -> None:
        """Monitor and programs stopped, the ledger closed, the cluster restored
        (``kafkalab.cluster.restore``), the helper topics deleted (and the round's unless
        ``keep_topics``)."""
        if self.monitor is not None:
            self.monitor.stop()
        if self.producers is not None:
            self.producers.stop()
        self.ledger.close()
        cluster.restore(max(self.timeout_s, 60.0))
        admin.delete_topics([self.fence_topic, self.barrier_topic] + ([] if keep_topics else list(self.topics)))

    def wait_restored_leader(self) -> None:
        """keep_topics: the caller reads them next, so until every broker names the restored
        leader with a full ISR and every leader serves ListOffsets."""
        leader = self.leader
        admin.wait_brokers_agree(list(self.topics), self.repeats, lambda v: v[0] == leader and len(v[1]) == 3,
                           f"broker {leader} leading every partition with a full ISR", self.timeout_s)
        admin.wait_leaders_serving(self.parts, self.timeout_s)

    def count(self) -> RoundResult:
        """Each partition's records classified (``classify_records`` over the round's ledger),
        its election and unavailability (``unavailable_seconds``), offsets and describe lines."""
        events = read_events(self.ledger_path)
        unavailable, elected = unavailable_seconds(self.samples, self.leader, self.back_after_s)
        shrunk = parse_describe(self.shrunk_text)
        outcomes = []
        for t, p in self.parts:
            s = self.topics[t]
            mine = [e for e in events if e.topic == t and e.partition == p]
            errs = Counter(e.error for e in mine if e.kind == "acked" and e.key == "during" and e.error)
            outcomes.append(PartitionOutcome(
                topic=t, partition=p, setting=s.label,
                classification=classify_records(mine),
                produce_errors=dict(errs),
                hw_at_kill=self.hw_at_kill[(t, p)], leo_at_kill=self.leo_at_kill[(t, p)],
                isr_at_kill=self.isr_at_kill.get((t, p), (-1, []))[1],
                elected=elected.get((t, p), -1), unavailable_s=round(unavailable.get((t, p), float("nan")), 2),
                old_leader_leo_dead=self.dead_leo[(t, p)], old_leader_leo_rejoined=self.rejoined_leo[(t, p)],
                final_hw=len(self.contents[(t, p)]), describe=self.described.get((t, p), {}),
                describe_shrunk=shrunk.get((t, p), {}),
            ))
        return RoundResult(self.rid, self.scenario, self.messages, self.repeats, self.warmup, self.leader,
                           self.followers, {s.label: t for t, s in self.topics.items()}, outcomes, self.timeline,
                           str(self.ledger_path), self.describe_text, round(time.monotonic() - self.t0, 1),
                           self.shrunk_text)


def run_round(scenario: str, runs: Mapping[Setting, Program], messages: int = 10, repeats: int = 3, warmup: int = 3,
              leader: int = 1, keep_topics: bool = False, topics: Mapping[Setting, str] | None = None,
              timeout_s: float = 60.0) -> RoundResult:
    """One fault, applied at once to every setting (a topic each) and repeat (a partition each).

    Args:
        scenario: ``"leader-crash"`` or ``"isr-shrink"`` (see the module docstring).
        runs: setting -> the producer program (a notebook's ``%%program`` cell, role ``gated``)
            that writes its topic during the fault, run as it is in a worker process. The
            program's ``acks`` must be the setting's (``program_acks``); ``min.insync.replicas``
            and ``unclean.leader.election.enable`` are the topic's.
        messages: records per partition produced during the fault (key ``during``).
        repeats: partitions per setting, all with replicas ``[leader, followers...]``.
        warmup: fully replicated records per partition before the fault (key ``before``).
        leader: broker id that leads every partition and is killed; the other two follow.
        keep_topics: keep the topics (for Spark; delete them with ``kafkalab.admin.delete_topics``).
        topics: setting -> a topic the caller created (``repeats`` partitions, replicas
            ``[leader, followers...]``, the setting's topic configs: notebook 08 does it with
            its own AdminClient call); None: the round creates them (``ReplicationSetting.creation_configs``).
        timeout_s: upper bound of each wait, seconds (elections, restart, ISR full).

    Returns:
        RoundResult: per partition the classification of every record, the election, the
        seconds without a live leader, offsets (HW, LEO on disk, before and after the rejoin).

    Raises:
        ValueError: unknown scenario, no settings, a program whose ``acks`` is not its
            setting's, messages < 1, repeats < 1, warmup < 0, topics not one per setting,
            leader not a broker id.
        WaitTimeout: a condition (named in the message) did not hold within ``timeout_s``.
        KafkalabError: topics could not be created, a program failed, the cluster is not running.

    The cluster is restored (every broker up and resumed, every ISR full) before this returns
    or raises (``kafkalab.cluster.restore``). The phases, in order, are ``_Round``'s methods.
    """
    runs = _check_round(scenario, runs, messages, repeats, warmup, leader, topics)
    rnd = _Round(scenario, runs, messages, repeats, warmup, leader, topics, timeout_s)
    try:
        rnd.place_leader()
        rnd.replicate_warmup()
        rnd.start_producers()
        rnd.pause_followers()
        rnd.answer_parked_fetches()
        if scenario == "isr-shrink":
            rnd.shrink_isr()
        expected_leo = rnd.send_during_fault()
        rnd.wait_leader_log(expected_leo)
        rnd.crash_leader()
        rnd.wait_election()
        rnd.restart_old_leader()
        rnd.collect_reports()
        rnd.read_back()
    finally:
        rnd.clean_up(keep_topics)
    if keep_topics:
        rnd.wait_restored_leader()
    return rnd.count()


#: The notebook whose ``%%program`` cells the CLI twin runs (``programs.from_notebook``).
NOTEBOOK = "08_replication"


def without_retries(program: Program) -> Program:
    """``program`` with ``"retries": 2147483647`` edited to ``"retries": 0`` (notebook 08's
    section 2 edit: the broker's refusal becomes the delivery report's error)."""
    return program.replace('"retries": 2147483647', '"retries": 0', name=f"{program.name}_no_retries")


def notebook_producer(scenario: str, acks: str) -> Program:
    """Notebook 08's ``producer`` program, edited as the notebook edits it for ``scenario`` and
    ``acks`` (``with_acks``; ``without_retries`` in isr-shrink)."""
    program = with_acks(programs.from_notebook(NOTEBOOK, "producer"), acks)
    return without_retries(program) if check_scenario(scenario) == "isr-shrink" else program


def run_replication(scenario: str, acks: str, min_insync_replicas: int, unclean_leader_election: bool = False,
                    messages: int = 10, repeats: int = 1, leader: int = 1, timeout_s: float = 60.0) -> dict:
    """One setting through one round, with notebook 08's ``producer`` program
    (``notebook_producer``): what ``kafkalab run replication --json`` prints.

    Returns:
        ``{"scenario", "setting", "program", "acked", "lost_acked", "produce_errors",
        "not_acked_present", "produced", "before_lost", "unavailable_s", "error_codes", "elected",
        "run_id", "elapsed_s", "round"}`` (counts over the ``messages * repeats`` records of the fault).
    """
    setting = Setting(acks, min_insync_replicas, unclean_leader_election)
    program = notebook_producer(scenario, acks)
    r = run_round(scenario, {setting: program}, messages=messages, repeats=repeats, leader=leader, timeout_s=timeout_s)
    totals = r.by_setting()[setting.label].to_json()
    return {"scenario": scenario, **totals, "program": program.name, "run_id": r.run_id, "elapsed_s": r.elapsed_s,
            "round": r.to_json()}



@click.command("replication")
@click.option("--scenario", type=click.Choice(SCENARIOS), required=True,
              help="leader-crash: followers paused in the ISR, leader killed; isr-shrink: ISR shrinks to the leader first.")
@click.option("--acks", type=click.Choice(ACKS), required=True, help="Producer acks.")
@click.option("--min-insync-replicas", "min_isr", type=click.IntRange(1, 3), required=True,
              help="Topic-level min.insync.replicas.")
@click.option("--unclean-leader-election", "unclean", type=click.Choice(["true", "false"]), default="false",
              show_default=True, help="Topic-level unclean.leader.election.enable.")
@click.option("--messages", type=click.IntRange(1, 100000), default=10, show_default=True,
              help="Records produced per partition during the fault.")
@click.option("--repeats", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Partitions exposed to the same fault.")
@click.option("--leader", type=click.Choice([str(b) for b in config.BROKER_IDS]), default="1", show_default=True,
              help="Broker that leads every partition and is killed.")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True, help="Upper bound of each wait, s.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--full", is_flag=True, help="With --json: include the whole round (partitions, timeline).")
def cli_command(scenario: str, acks: str, min_isr: int, unclean: str, messages: int, repeats: int, leader: str,
                timeout_s: float, as_json: bool, full: bool) -> None:
    """Kill a partition leader on purpose: are acknowledged writes lost? Runs notebook 08's
    ``producer`` program with the given acks."""
    show_programs(notebook_producer(scenario, acks))  # the program run_replication runs
    out = run_replication(scenario, acks, min_isr, unclean == "true", messages=messages, repeats=repeats,
                          leader=int(leader), timeout_s=timeout_s)
    if not full:
        out.pop("round")
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"{scenario} {out['setting']}: acked {out['acked']}, lost_acked {out['lost_acked']}, "
               f"produce_errors {out['produce_errors']} {out['error_codes'] or ''}; "
               f"elected {out['elected']}, no live leader for {out['unavailable_s']} s")


