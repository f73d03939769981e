"""Notebook 02, rebalancing: what each group protocol stops, revokes and costs when consumers
are restarted, added, removed, crash, stall, or when partitions are added.

Consumers are separate processes (``kafkalab.worker``), restarted and killed like pods. Each
runs a client program of notebook 02 (``kafkalab.programs``: ``PROGRAMS``, the group's
members; ``SLOW_PROGRAMS``, the slow consumer), with the ``pod`` role's instruments (the
``consumer`` role's plus a start gate, ``kafkalab.instruments.pod``): its rebalance callbacks
write every ``assigned`` and ``revoked`` partition to its own ledger, and a pod's process can
be started ahead and released when the run starts the pod (``RebalanceRun.prepare``). The
harness adds only the run's addresses and names (``worker.lab_conf``); every setting that decides
how the group rebalances is in the program, and ``Protocol.from_program`` reads them back
from its text for the analysis. A run (``RebalanceRun``) drives one consumer group on one
fresh topic through a sequence of *scenarios* (the Kubernetes events of article 002), waiting
after each until the group has *settled*, and keeps three more records beside the ledgers:

- ``actions.jsonl``: what the experiment did to which process, when (``start``, ``stop`` =
  SIGTERM, ``exited``, ``kill`` = SIGKILL) and when it saw the group ``settled``;
- ``generations.jsonl``: every generation (classic protocol) or group epoch (KIP-848) that the
  group coordinator wrote to ``__consumer_offsets`` for the group, with its timestamp. A
  *rebalance* is one new generation (group epoch) inside a window;
- ``run.json``: the configuration and the *windows*: from the settled group before a scenario
  to the settled group after it (``Window``).

``kafkalab.experiments.rebalance_analysis`` turns these into ownership intervals, gaps and
the per-window result with PySpark; ``rebalance_plots`` draws them.

Protocols (``PROTOCOLS``: what the notebook's programs set, one per protocol):

=============  ==============================================================================
eager          classic protocol, ``partition.assignment.strategy=range`` (eager: every member
               revokes everything at every rebalance)
cooperative    classic protocol, ``cooperative-sticky`` (KIP-429, incremental)
static         ``eager`` plus ``group.instance.id`` per consumer slot (KIP-345); its
               ``session.timeout.ms`` (6000 ms, the broker's minimum) must hold a restart
consumer       ``group.protocol=consumer`` (KIP-848): the broker assigns (``uniform``), the
               session timeout and heartbeat interval are the broker's
=============  ==============================================================================

Scenarios (``SCENARIOS``): ``rolling-restart`` (every consumer stopped and replaced, one at a
time: a StatefulSet rolling update), ``scale-out`` (one consumer more: HPA), ``scale-in`` (the
newest consumer stopped), ``crash`` (the oldest consumer SIGKILLed: a node lost),
``add-partitions`` (the topic grows by one partition per consumer), ``slow-consumer`` (a
consumer joins whose processing of one record outlasts ``max.poll.interval.ms``; the window
ends when the coordinator has given its partitions to the others).

Teaching timeouts (production values in brackets): classic ``session.timeout.ms`` 6000
(librdkafka 2.16 default 45000), ``heartbeat.interval.ms`` 500 (3000),
``topic.metadata.refresh.interval.ms`` 1000 (300000); broker ``group.consumer.session.timeout.ms``
10000 (45000) and ``group.consumer.heartbeat.interval.ms`` 1000 (5000), kafka/config/broker.properties.
Sources: librdkafka CONFIGURATION.md; Kafka documentation 4.3, Broker Configs and Consumer
Configs; KIP-345, KIP-429, KIP-848.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewPartitions

from .. import admin, coordinators, programs, runscope, workloads
from ..errors import KafkalabError, WaitTimeout
from ..ledger import now_ms, read_events
from ..programs import Program
from ..runscope import RunScope
from ..instruments.pod import ready_path
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf
from .rebalance_analysis import SCENARIOS

if TYPE_CHECKING:
    import pandas as pd


#: The sequence every protocol's group goes through in notebook 02.
MAIN_SCENARIOS: tuple[str, ...] = ("scale-out", "scale-in", "rolling-restart", "crash", "add-partitions")

#: The broker's KIP-848 group timeouts in this lab (kafka/config/broker.properties; Kafka 4.3
#: defaults 45000 and 5000 ms). ``broker_group_config()`` reads the live values.
CONSUMER_SESSION_TIMEOUT_MS = 10000
CONSUMER_HEARTBEAT_INTERVAL_MS = 1000

#: The notebook whose ``%%program`` cells the runs use unless given a program.
NOTEBOOK = "02_rebalancing"
#: Protocol -> the program of notebook 02 that every member of its group runs.
PROGRAMS: dict[str, str] = {"eager": "eager_member", "cooperative": "cooperative_member",
                            "static": "static_member", "consumer": "kip848_member"}
#: Protocol -> the program of notebook 02 that the slow consumer runs (scenario ``slow-consumer``).
SLOW_PROGRAMS: dict[str, str] = {"eager": "slow_eager_member", "consumer": "slow_kip848_member"}
#: librdkafka 2.x defaults of the classic settings (CONFIGURATION.md), for a program that sets none.
CLASSIC_DEFAULTS = {"partition.assignment.strategy": "range,roundrobin", "session.timeout.ms": 45000,
                    "heartbeat.interval.ms": 3000, "max.poll.interval.ms": 300000}


# ----------------------------------------------------------------------------- protocols


@dataclass(frozen=True)
class Protocol:
    """How the members of a group rebalance.

    Attributes:
        name: ``eager``, ``cooperative``, ``static`` or ``consumer``.
        group_protocol: ``classic`` or ``consumer`` (librdkafka ``group.protocol``, KIP-848).
        strategy: classic ``partition.assignment.strategy`` (``range``, ``cooperative-sticky``),
            None under KIP-848 (the broker assigns; librdkafka refuses the setting).
        static: every consumer slot gets ``group.instance.id`` (KIP-345).
        session_timeout_ms: how long the coordinator waits for a silent member, ms: the
            client's ``session.timeout.ms`` (classic) or the broker's
            ``group.consumer.session.timeout.ms`` (KIP-848).
        heartbeat_interval_ms: likewise ``heartbeat.interval.ms`` or
            ``group.consumer.heartbeat.interval.ms``, ms.
    """

    name: str
    group_protocol: str
    strategy: str | None
    static: bool
    session_timeout_ms: int
    heartbeat_interval_ms: int

    @property
    def incremental(self) -> bool:
        """True when members give back only what moves (cooperative-sticky, KIP-848)."""
        return self.group_protocol == "consumer" or self.strategy == "cooperative-sticky"

    @classmethod
    def from_program(cls, name: str, program: Program) -> "Protocol":
        """The protocol a consumer program asks for, read from its text (``programs.program_settings``):
        ``group.protocol``, ``partition.assignment.strategy``, ``group.instance.id`` (set at
        all: static), ``session.timeout.ms``, ``heartbeat.interval.ms``; librdkafka's defaults
        where the program sets none (``CLASSIC_DEFAULTS``). Under ``group.protocol=consumer`` the
        timeouts are the broker's (``CONSUMER_SESSION_TIMEOUT_MS``...; KIP-848). ``name``: the
        protocol's label in results and tables."""
        s = programs.program_settings(program.source)
        static = "group.instance.id" in s
        if s.get("group.protocol", "classic") == "consumer":
            return cls(name, "consumer", None, static, CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS)
        d = CLASSIC_DEFAULTS | s
        return cls(name, "classic", str(d["partition.assignment.strategy"]), static, int(d["session.timeout.ms"]),
                   int(d["heartbeat.interval.ms"]))

    def to_json(self) -> dict:
        return asdict(self)


PROTOCOLS: dict[str, Protocol] = {
    "eager": Protocol("eager", "classic", "range", False, 6000, 500),
    "cooperative": Protocol("cooperative", "classic", "cooperative-sticky", False, 6000, 500),
    "static": Protocol("static", "classic", "range", True, 6000, 500),
    "consumer": Protocol("consumer", "consumer", None, False, CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
}


def member_program(protocol_name: str, slow: bool = False) -> Program:
    """The program of notebook 02 that a group of ``protocol_name`` runs (``PROGRAMS``), or its
    slow consumer (``SLOW_PROGRAMS``), read from the saved notebook (``programs.from_notebook``):
    what the CLI and the tests run.

    Raises:
        KafkalabError: no such program for that protocol.
    """
    table = SLOW_PROGRAMS if slow else PROGRAMS
    if protocol_name not in table:
        what = "a slow-consumer program" if slow else "a program"
        raise KafkalabError(f"notebook 02 has {what} for {', '.join(table)} only, not {protocol_name!r}: "
                            "pass one (RebalanceConfig(program=..., slow_program=...))")
    return programs.from_notebook(NOTEBOOK, table[protocol_name])


def protocol(name: str) -> Protocol:
    """``PROTOCOLS[name]``.

    Raises:
        KafkalabError: unknown name (the message lists the known ones).
    """
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise KafkalabError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {name!r}") from None


# ----------------------------------------------------------------------------- client checks


def broker_group_config(timeout_s: float = 10.0) -> dict[str, str]:
    """The live broker settings that time group membership (broker with the lowest id):
    ``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``,
    ``group.min.session.timeout.ms``, ``group.max.session.timeout.ms``,
    ``group.initial.rebalance.delay.ms``, ``group.consumer.assignors`` (Kafka documentation,
    Broker Configs)."""
    names = ("group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms", "group.min.session.timeout.ms",
             "group.max.session.timeout.ms", "group.initial.rebalance.delay.ms", "group.consumer.assignors")
    return {n: v.value for n, v in admin.describe_config("broker", None, names, timeout_s).items()}


def group_timeouts(group_id: str, timeout_s: float = 30.0) -> tuple[int, int]:
    """A KIP-848 consumer group's session timeout and heartbeat interval, ms, as the broker
    applies them: the group's own ``consumer.session.timeout.ms`` and
    ``consumer.heartbeat.interval.ms`` if an admin set them, else the broker's defaults
    (DescribeConfigs on the GROUP resource answers either)."""
    values = admin.describe_config("group", group_id, ["consumer.session.timeout.ms",
                                                        "consumer.heartbeat.interval.ms"], timeout_s)
    return int(values["consumer.session.timeout.ms"].value), int(values["consumer.heartbeat.interval.ms"].value)


# ----------------------------------------------------------------------------- a run


@dataclass
class RebalanceConfig:
    """One run: a group of ``consumers`` consumers on a fresh topic of ``partitions``
    partitions, taken through ``scenarios`` in order. Every member runs ``program`` (default:
    notebook 02's program of ``protocol``, ``member_program``); ``protocol`` is then the
    group's label, and what the analysis expects of it is read from the program
    (``Protocol.from_program``). The slow consumer (scenario ``slow-consumer``) runs
    ``slow_program`` (default: notebook 02's, for ``eager`` and ``consumer``).

    Times in ms. ``slow_process_ms`` is how long the slow consumer works on each record at
    least (default: its ``max.poll.interval.ms``; the run then holds the work until the group
    has settled without it);
    ``slow_max_poll_ms`` is read from its program (its ``max.poll.interval.ms``).
    ``settle_timeout_s``: how long to wait for the group to settle, s. ``group_config``: the
    group's own configs, set on the group before its first member starts (``admin.alter_group_config``;
    KIP-848 groups: ``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``, which
    override the broker's ``group.consumer.*`` defaults within its ``group.consumer.min/max.*``
    bounds), and removed at cleanup (a group's configs outlive it).

    Raises:
        KafkalabError: too few consumers or partitions, an unknown scenario, or no program
            for the protocol.
    """

    protocol: str
    consumers: int = 3
    partitions: int = 6
    scenarios: tuple[str, ...] = ("rolling-restart",)
    settle_timeout_s: float = 40.0
    slow_process_ms: int | None = None
    slow_max_poll_ms: int | None = None
    records_per_partition: int = 20
    program: Program | None = None
    slow_program: Program | None = None
    group_config: dict[str, str] | None = None

    def __post_init__(self) -> None:
        self.scenarios = tuple(self.scenarios)
        if self.program is None:
            protocol(self.protocol)  # a known protocol's name
            self.program = member_program(self.protocol)
        if self.consumers < 2:
            raise KafkalabError("a rebalance needs at least 2 consumers")
        if self.partitions < self.consumers + 1:
            raise KafkalabError(f"give the topic more partitions than consumers ({self.consumers} consumers, "
                                f"{self.partitions} partitions), so that a new consumer takes some")
        if not self.scenarios:
            raise KafkalabError("no scenario")
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        if bad:
            raise KafkalabError(f"unknown scenario {bad[0]!r}: expected one of {', '.join(SCENARIOS)}")
        if "slow-consumer" not in self.scenarios:
            return
        if self.slow_program is None:
            self.slow_program = member_program(self.protocol, slow=True)
        self.slow_max_poll_ms = int((CLASSIC_DEFAULTS | programs.program_settings(self.slow_program.source))["max.poll.interval.ms"])
        if self.slow_process_ms is None:
            # At least max.poll.interval.ms; the run then holds the work (``work_until``) until
            # the group has settled without the slow consumer, however long that takes: a
            # member past the interval that sends no leave (a static member, KIP-345; any
            # member under KIP-848 with librdkafka 2.16.1, as observed here) is dropped only
            # when its session expires too.
            self.slow_process_ms = self.slow_max_poll_ms

    @property
    def spec(self) -> Protocol:
        """The protocol the members' program asks for (``Protocol.from_program``)."""
        assert self.program is not None
        return Protocol.from_program(self.protocol, self.program)


@dataclass
class Window:
    """From the settled group before scenario ``index`` to the settled group after it.

    ``start_ms``/``end_ms``: wall clock, ms since the epoch (the moments the settled group was
    observed); ``partitions``: the topic's partition count at the start; ``members_before``,
    ``members_after``: client ids in the group; ``notes``: what the scenario measured on the way
    (restart times, the slow consumer's error text...).
    """

    index: int
    scenario: str
    start_ms: int
    end_ms: int
    partitions: int
    members_before: list[str]
    members_after: list[str]
    notes: dict = field(default_factory=dict)


@dataclass
class RunRecord:
    """Everything one run left behind: where the ledgers are, what was done, what the
    coordinator wrote. ``rebalance_analysis.analyse`` reads it."""

    run_id: str
    protocol: Protocol
    consumers: int
    partitions: int
    topic: str
    group_id: str
    dir: str
    started_ms: int
    windows: list[Window]
    actions: list[dict]
    generations: list[dict]
    group_type: str | None = None
    partition_assignor: str | None = None

    @property
    def ledger_glob(self) -> str:
        return str(Path(self.dir) / "ledgers" / "*.jsonl")

    def to_json(self) -> dict:
        d = asdict(self)
        d["protocol"] = self.protocol.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "RunRecord":
        d = dict(d)
        d["protocol"] = Protocol(**d["protocol"])
        d["windows"] = [Window(**w) for w in d["windows"]]
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> "RunRecord":
        """Read ``run.json`` (the folder or the file)."""
        p = Path(path)
        return cls.from_json(json.loads((p / "run.json" if p.is_dir() else p).read_text()))


class RebalanceRun:
    """One consumer group of worker processes on a fresh topic; a context manager.

    ``with RebalanceRun(cfg) as run: run.start_group(); run.scenario("scale-out"); ...``.
    On exit every worker is stopped, the topic and the group are deleted (the group as soon
    as it is empty: static members stay in it for ``session.timeout.ms`` after they stop, so a
    group that is still non-empty stays in the run scope's registry, for
    ``kafkalab.runscope.cleanup_all``, also called at exit).
    """

    def __init__(self, cfg: RebalanceConfig):
        self.cfg = cfg
        self.proto = cfg.spec
        self.scope = RunScope("rebalance")  # names and cleanup
        self.run_id = self.scope.run_id
        self.dir = workloads.run_dir(self.run_id)
        (self.dir / "ledgers").mkdir(exist_ok=True)
        self.topic = self.scope.prefix  # rebalance-<run id>
        self.group_id = self.scope.name(self.proto.name)
        self.partitions = cfg.partitions
        self.workers: dict[str, workloads.Worker] = {}  # every incarnation, by client id
        self.slots: dict[int, str] = {}  # slot -> client id of its live incarnation
        self.incarnations: dict[int, int] = {}
        self.prepared: dict[int, tuple[str, Path]] = {}  # slot -> (client id, gate) of a process started ahead
        self.spare: dict[str, int] = {}  # scenario -> the slot prepared for its new member
        self.actions: list[dict] = []
        self.windows: list[Window] = []
        self.started_ms = now_ms()
        self._lock = threading.Lock()
        self._actions_file = open(self.dir / "actions.jsonl", "a", encoding="utf-8")
        self._settled_ms: int | None = None
        self.slow: str | None = None
        self.group_type: str | None = None
        self.partition_assignor: str | None = None
        self.last_view: dict = {}

    # --- bookkeeping
    def act(self, action: str, client_id: str | None = None, **extra) -> int:
        """Record one action (``start``, ``stop``, ``exited``, ``kill``...) now; returns its ts (ms)."""
        ts = now_ms()
        row = {"run_id": self.run_id, "ts_ms": ts, "action": action, "client_id": client_id, **extra}
        with self._lock:
            self.actions.append(row)
            self._actions_file.write(json.dumps(row) + "\n")
            self._actions_file.flush()
        return ts

    # --- processes
    def prepare(self, slot: int, program: Program | None = None, process_ms: float = 0.0,
                work_until: Path | None = None) -> str:
        """Start the process of the next incarnation of consumer ``slot`` (client id
        ``c<slot>.<n>``) ahead: it starts Python and its imports, then waits before the first
        line of ``program`` (default: the group's, ``cfg.program``) until ``start(slot)``
        (role ``pod``, ``kafkalab.instruments.pod``). Nothing reaches Kafka before then. Its
        simulated work on a record lasts ``process_ms``, then, with ``work_until``, until that
        file exists. Returns the client id."""
        n = self.incarnations.get(slot, -1) + 1
        self.incarnations[slot] = n
        name = f"c{slot}.{n}"
        prog = program or self.cfg.program
        assert prog is not None
        gate = self.dir / "gates" / f"{name}.go"
        gate.parent.mkdir(exist_ok=True)
        spec = ProgramSpec(name, self.run_id, str(self.dir / "ledgers" / f"{name}.jsonl"), "pod", prog.name,
                           prog.source, conf=lab_conf(name, self.group_id), topics=[self.topic],
                           options={"process_ms": process_ms, "work_until": str(work_until) if work_until else None,
                                    "start_gate": str(gate)})
        self.workers[name] = workloads.spawn(spec)
        self.prepared[slot] = (name, gate)
        return name

    def start(self, slot: int, program: Program | None = None, process_ms: float = 0.0,
              work_until: Path | None = None) -> str:
        """Start the pod of consumer ``slot``: the process ``prepare`` started ahead for it
        (then the arguments are those given to ``prepare``), else a new one (``prepare`` with
        these arguments). Its program runs from now: the ``start`` action's time."""
        if slot not in self.prepared:
            self.prepare(slot, program, process_ms, work_until)
        name, gate = self.prepared.pop(slot)
        self.act("start", name, slot=slot)
        gate.touch()
        self.slots[slot] = name
        return name

    def wait_prepared(self, timeout_s: float = 120.0) -> None:
        """Until every process ``prepare`` started waits at its gate (``<gate>.ready``).

        Raises:
            KafkalabError: a prepared process exited first (its log's tail in the message).
            WaitTimeout: not all of them ready within ``timeout_s`` (s).
        """
        def ready() -> bool:
            for name, gate in self.prepared.values():
                w = self.workers[name]
                if not w.alive:
                    raise KafkalabError(f"pod {name} exited before its start (exit {w.returncode}):\n{w.log_tail()}")
            return all(ready_path(gate).exists() for _, gate in self.prepared.values())

        wait_until(ready, timeout_s=timeout_s, interval_s=0.05,
                   what=f"{len(self.prepared)} prepared pod(s) of {self.group_id} waiting at their gates")

    def new_slot(self) -> int:
        """A slot number no process of this run has used."""
        return max([*self.incarnations, -1]) + 1

    def stop(self, slot: int) -> int:
        """SIGTERM the live incarnation of ``slot`` (it closes its consumer) and wait until it
        exits. Returns the time of the SIGTERM (ms)."""
        name = self.slots.pop(slot)
        ts = self.act("stop", name, slot=slot)
        rc = self.workers[name].terminate(30)
        self.act("exited", name, slot=slot, returncode=rc)
        return ts

    def kill(self, slot: int) -> int:
        """SIGKILL the live incarnation of ``slot`` (a crash). Returns the time (ms)."""
        name = self.slots.pop(slot)
        ts = self.act("kill", name, slot=slot)
        self.workers[name].kill()
        return ts

    def live(self) -> list[str]:
        return [self.slots[s] for s in sorted(self.slots)]

    def owned(self, name: str) -> set[int]:
        """Partitions ``name`` holds by its own ledger (assigned minus revoked)."""
        w = self.workers[name]
        held: set[int] = set()
        if not w.ledger.exists():
            return held
        for e in read_events(w.ledger):
            if e.kind == "assigned":
                held.add(e.partition)
            elif e.kind == "revoked":
                held.discard(e.partition)
        return held

    # --- the group
    def snapshot(self) -> dict:
        """The coordinator's view: state, type, assignor and member -> partitions.

        Members are named by the client id of the process. A static member is named by its
        ``group.instance.id`` instead, translated to its live incarnation: when a static
        member restarts, the coordinator swaps in the new member id but may keep reporting
        the old process's client id.
        """
        d = workloads.describe_group(self.group_id)

        def name(m) -> str:
            if self.proto.static and m.group_instance_id:
                slot = int(m.group_instance_id[1:])
                return self.slots.get(slot, m.group_instance_id)
            return m.client_id

        members = {name(m): sorted(tp.partition for tp in (m.assignment.topic_partitions if m.assignment else []))
                   for m in d.members}
        return {"state": d.state.name, "type": getattr(d.type, "name", str(d.type)),
                "assignor": d.partition_assignor, "members": members}

    def settled_now(self, members: Iterable[str]) -> bool:
        """One look: is the group settled with exactly ``members`` (see ``settle``)? The view
        is kept in ``self.last_view`` for error messages."""
        expected = set(members)
        try:
            snap = self.snapshot()
        except (KafkaException, TimeoutError) as e:  # a slow or failed DescribeGroups: ask again
            self.last_view = {"error": repr(e)}
            return False
        self.last_view = snap
        if snap["state"] != "STABLE" or set(snap["members"]) != expected:
            return False
        if sorted(p for ps in snap["members"].values() for p in ps) != list(range(self.partitions)):
            return False
        if any(self.owned(n) != set(snap["members"][n]) for n in expected):
            return False
        self.group_type, self.partition_assignor = snap["type"], snap["assignor"]
        return True

    def diagnosis(self) -> str:
        """The last view of the group, every live member's ledger, and the workers' log tails."""
        logs = [f"{n}: {w.log_tail(5)}" for n, w in self.workers.items() if w.log_tail(1)]
        owned = {n: sorted(self.owned(n)) for n in self.live()}
        return f"last view: {self.last_view}; ledgers: {owned}" + ("\n" + "\n".join(logs) if logs else "")

    def mark_settled(self, members: Iterable[str], what: str) -> int:
        """Record that the group was seen settled now; the next step happens strictly later
        (windows are (start, end] in ms). Returns the time (ms)."""
        ts = self.act("settled", None, members=sorted(members), what=what)
        wait_until(lambda: now_ms() > ts, timeout_s=1.0, interval_s=0.001, what="the clock to pass the settle time")
        self._settled_ms = ts
        return ts

    def settle(self, members: Iterable[str], what: str) -> int:
        """Wait until the coordinator reports the group STABLE with exactly ``members``
        (client ids), every partition assigned once, and every member's own ledger agreeing
        with the coordinator. Returns when it was first seen (ms since the epoch).

        Raises:
            WaitTimeout: not within ``cfg.settle_timeout_s``; the message has the last view
                and the workers' log tails.
        """
        expected = list(members)
        wait_until(lambda: self.settled_now(expected), timeout_s=self.cfg.settle_timeout_s, interval_s=0.1,
                   what=f"group {self.group_id} ({self.proto.name}) settled {what}", on_timeout=self.diagnosis)
        return self.mark_settled(expected, what)

    # --- setting up and tearing down
    def __enter__(self) -> "RebalanceRun":
        self.scope.add_topic(self.topic)
        self.scope.add_group(self.group_id)
        if self.cfg.group_config:  # removed at cleanup, after the workers stopped (closers run last first)
            admin.alter_group_config(self.group_id, dict(self.cfg.group_config), 30.0)
            self.scope.on_cleanup(lambda: admin.alter_group_config(self.group_id,
                                                                   {k: None for k in self.cfg.group_config or {}}, 30.0))
        self.scope.on_cleanup(self._stop_workers)
        if self.proto.group_protocol == "consumer":  # KIP-848: the timeouts the broker applies to this group
            # the group's own values as set (a broker that has not applied them yet would still
            # describe its defaults), else the broker's defaults
            own = self.cfg.group_config or {}
            session_ms, heartbeat_ms = group_timeouts(self.group_id)
            self.proto = replace(self.proto,
                                 session_timeout_ms=int(own.get("consumer.session.timeout.ms") or session_ms),
                                 heartbeat_interval_ms=int(own.get("consumer.heartbeat.interval.ms") or heartbeat_ms))
        admin.create_topics({self.topic: self.partitions})
        return self

    def start_group(self) -> int:
        """Start ``cfg.consumers`` consumers and wait until they settle (the window of the
        first scenario starts here). Returns the settle time (ms)."""
        for slot in range(self.cfg.consumers):
            self.start(slot)
        # The processes of the new members that later scenarios add start meanwhile, held at
        # their gate (``prepare``): the interpreter's start is not what the scenarios measure.
        if "scale-out" in self.cfg.scenarios:
            self.spare["scale-out"] = slot = self.new_slot()
            self.prepare(slot)
        if "slow-consumer" in self.cfg.scenarios:
            self.spare["slow-consumer"] = slot = self.new_slot()
            self.prepare(slot, self.cfg.slow_program, process_ms=self.cfg.slow_process_ms or 0.0,
                         work_until=self.dir / f"slow-{slot}.release")
        return self.settle(self.live(), f"with its first {self.cfg.consumers} members")

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop every live worker (SIGTERM, then SIGKILL), delete the topic, and delete the
        group if it is empty within 2 s, or at once for a static group (else
        ``kafkalab.runscope.cleanup_all`` retries it). Idempotent."""
        # A static group stays non-empty for session.timeout.ms after its members stopped:
        # asking again and again meanwhile is wasted time (cleanup_all deletes it later).
        self.scope.cleanup(group_timeout_s=0.0 if self.proto.static else 2.0)

    def _stop_workers(self) -> None:
        def stop(slot: int) -> None:
            try:
                self.stop(slot)
            except Exception:  # never leave a process behind because one failed to stop
                pass

        with ThreadPoolExecutor(max_workers=max(1, len(self.slots)), thread_name_prefix="rebalance-stop") as pool:
            list(pool.map(stop, list(self.slots)))  # every pod stopped at once, as a deleted Deployment is
        for w in self.workers.values():
            if w.alive:
                w.kill()
        if not self._actions_file.closed:
            self._actions_file.close()

    # --- scenarios
    def scenario(self, name: str) -> Window:
        """Run one scenario from the settled group to the settled group; returns its window."""
        if self._settled_ms is None:
            raise KafkalabError("start_group() first")
        start = self._settled_ms
        before = self.live()
        partitions = self.partitions
        notes: dict = {}
        self.act("scenario", None, scenario=name, index=len(self.windows))
        getattr(self, "_" + name.replace("-", "_"))(notes)
        w = Window(len(self.windows), name, start, self._settled_ms, partitions, before, self.live(), notes)
        self.windows.append(w)
        return w

    def _rolling_restart(self, notes: dict) -> None:
        # StatefulSet order: stop a pod, wait for it to be gone, start its replacement.
        # A dynamic member leaves the group on close (LeaveGroup); waiting for the group to
        # settle without it keeps the leave and the join two rebalances on every run. A static
        # member sends no LeaveGroup (KIP-345): the coordinator keeps its place for
        # session.timeout.ms, so the replacement starts at once.
        restarts = []
        for slot in sorted(self.slots):  # the replacements' processes start ahead, held at their gates
            if slot not in self.prepared:
                self.prepare(slot)
        # ...and the first pod stops once all of them wait there: their Python start and imports
        # (seconds of CPU each on 2 cores) then never fall inside a restart, where a static
        # member's replacement must join within session.timeout.ms of its predecessor's last heartbeat.
        self.wait_prepared()
        for slot in sorted(self.slots):
            old = self.slots[slot]
            held = sorted(self.owned(old))
            t_stop = self.stop(slot)
            if not self.proto.static:
                self.settle(self.live(), f"without {old}")
            new = self.start(slot)
            t_set = self.settle(self.live(), f"with {new} replacing {old}")
            first = min((e.ts_ms for e in read_events(self.workers[new].ledger, kinds="assigned")), default=None)
            restarts.append({"old": old, "new": new, "held_before": held, "held_after": sorted(self.owned(new)),
                             "stop_to_assigned_ms": None if first is None else first - t_stop,
                             "stop_to_settled_ms": t_set - t_stop})
        notes["restarts"] = restarts

    def _scale_out(self, notes: dict) -> None:
        slot = self.spare.pop("scale-out", None)
        name = self.start(self.new_slot() if slot is None else slot)
        self.settle(self.live(), f"with new member {name}")
        notes["added"] = name

    def _scale_in(self, notes: dict) -> None:
        slot = max(self.slots)
        name = self.slots[slot]
        notes["removed"] = name
        notes["held"] = sorted(self.owned(name))
        self.stop(slot)
        self.settle(self.live(), f"without {name}")

    def _crash(self, notes: dict) -> None:
        slot = min(self.slots)
        name = self.slots[slot]
        notes["killed"] = name
        notes["held"] = sorted(self.owned(name))
        notes["kill_ms"] = self.kill(slot)
        self.settle(self.live(), f"without crashed {name}")

    def _add_partitions(self, notes: dict) -> None:
        # First ask for fewer partitions: Kafka refuses (a partition count only grows).
        shrink = workloads.admin().create_partitions([NewPartitions(self.topic, self.partitions - 1)],
                                                     operation_timeout=30)[self.topic]
        try:
            shrink.result(timeout=40)
            notes["shrink_error"] = None
        except KafkaException as e:
            notes["shrink_error"] = f"{e.args[0].name()}: {e.args[0].str()}"
        new_total = self.partitions + len(self.slots)
        fut = workloads.admin().create_partitions([NewPartitions(self.topic, new_total)], operation_timeout=30)
        fut[self.topic].result(timeout=40)
        self.act("add-partitions", None, partitions=new_total)
        notes["partitions_before"], notes["partitions_after"] = self.partitions, new_total
        self.partitions = new_total
        self.settle(self.live(), f"over {new_total} partitions")

    def _slow_consumer(self, notes: dict) -> None:
        # Records in every partition (the members read from the earliest offset, committing
        # nothing), so whichever partitions the slow consumer gets, it has a record to work on.
        workloads.produce(self.topic, [(None, f"{self.run_id}-{p}-{i}".encode(), p, None) for p in range(self.partitions)
                                       for i in range(self.cfg.records_per_partition)])
        slot = self.spare.pop("slow-consumer", None)
        slot = self.new_slot() if slot is None else slot
        mp = self.cfg.slow_max_poll_ms
        # Its work on the record lasts slow_process_ms and then until this file appears: once the
        # group has settled without it (below), so it is removed while still busy on every run,
        # however slow the machine.
        release = self.dir / f"slow-{slot}.release"
        name = self.start(slot, self.cfg.slow_program, process_ms=self.cfg.slow_process_ms, work_until=release)
        self.slots.pop(slot)  # not expected to stay in the group
        self.slow = name
        w = self.workers[name]

        def first_record_ms() -> int | None:  # assigned and busy with its first record
            if not w.ledger.exists():
                return None
            return next((e.ts_ms for e in read_events(w.ledger) if e.kind == "consumed" and e.error is None), None)

        def poll_error() -> tuple[int, str] | None:  # back from the record: librdkafka reports the exceeded interval
            return next(((e.ts_ms, e.error) for e in read_events(w.ledger) if e.kind == "consumed" and e.error), None)

        stuck_from = wait_until(first_record_ms, timeout_s=self.cfg.settle_timeout_s,
                                what=f"slow consumer {name} to poll its first record")
        notes.update({"slow": name, "max_poll_interval_ms": mp, "process_ms": self.cfg.slow_process_ms,
                      "stuck_from_ms": stuck_from})
        # Either the coordinator gives its partitions to the others while it is still busy
        # (removed), or it polls again first (it was never removed).
        outcome = wait_until(lambda: "removed" if self.settled_now(self.live()) else ("back" if poll_error() else None),
                             timeout_s=self.cfg.slow_process_ms / 1000 + self.cfg.settle_timeout_s,
                             what=f"{name} removed from the group or back from its record", on_timeout=self.diagnosis)
        if outcome == "removed":
            self.mark_settled(self.live(), f"without {name}, whose processing outlasts max.poll.interval.ms={mp}")
            # What the slow consumer believes at this moment: it cannot know it was removed
            # before it polls again (a zombie).
            notes.update({"removed_while_alive": w.alive, "zombie_held": sorted(self.owned(name)),
                          "processed_before_removed": len(read_events(w.ledger, kinds="processed"))})
            release.touch()  # now its work may end: it polls again and learns it was removed
            back_ms, notes["poll_error"] = wait_until(poll_error, timeout_s=self.cfg.slow_process_ms / 1000 + 15,
                                                      what=f"{name} to report the exceeded max.poll.interval.ms")
            self.act("kill", name, slot=slot)
            w.kill()
        else:
            release.touch()
            back_ms, notes["poll_error"] = poll_error()
            notes.update({"removed_while_alive": False, "zombie_held": [],
                          "processed_before_removed": len(read_events(w.ledger, kinds="processed"))})
            self.act("kill", name, slot=slot)
            w.kill()
            self.settle(self.live(), f"without killed {name}")
        notes["back_ms"] = back_ms
        notes["process_ms"] = back_ms - stuck_from  # measured: from its first record to its next poll

    def record(self) -> RunRecord:
        """Read the coordinator's generations and write ``run.json``."""
        gens = coordinators.read_generations(self.group_id, self.started_ms - 1000)
        for g in gens:
            g["run_id"] = self.run_id
        with open(self.dir / "generations.jsonl", "w") as f:
            for g in gens:
                f.write(json.dumps(g) + "\n")
        for w in self.windows:
            if w.scenario == "slow-consumer":  # new generations while the slow consumer was busy with one record
                lo, hi = w.notes["stuck_from_ms"], w.notes["back_ms"]
                stuck = sorted(g["ts_ms"] for g in gens if lo < g["ts_ms"] < hi)
                w.notes["rebalances_while_stuck"] = len({g["generation"] for g in gens if lo < g["ts_ms"] < hi})
                # from its last poll to the first new generation: when the coordinator let it go
                w.notes["removed_after_ms"] = stuck[0] - lo if stuck else None
        rec = RunRecord(self.run_id, self.proto, self.cfg.consumers, self.cfg.partitions, self.topic, self.group_id,
                        str(self.dir), self.started_ms, list(self.windows), list(self.actions), gens,
                        self.group_type, self.partition_assignor)
        (self.dir / "run.json").write_text(json.dumps(rec.to_json(), indent=1))
        return rec


def leftovers(records: Sequence[RunRecord], timeout_s: float = 10.0) -> dict[str, list]:
    """Topics, groups and worker processes of these runs that still exist (all lists empty
    when everything was cleaned up)."""
    a = workloads.admin()
    topics = set(a.list_topics(timeout=timeout_s).topics)
    listed = a.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    groups = {g.group_id for g in listed.valid}
    alive = [w.name for w in workloads.live_workers() if any(w.spec.run_id == r.run_id for r in records)]
    return {"topics": sorted({r.topic for r in records} & topics),
            "groups": sorted({r.group_id for r in records} & groups), "processes": sorted(alive)}


def run_rebalance(cfg: RebalanceConfig) -> RunRecord:
    """Run ``cfg``: form the group, run every scenario in order, read the generations, clean
    up. Returns the record for ``rebalance_analysis.analyse``.

    Raises:
        KafkalabError: bad configuration; WaitTimeout: the group did not settle (the message
        names the step and the last view of the group).
    """
    with RebalanceRun(cfg) as run:
        run.start_group()
        for s in cfg.scenarios:
            run.scenario(s)
        return run.record()


class Launched:
    """Runs started in the background by ``launch``: ``get(key)`` waits for one."""

    def __init__(self, futures: dict[str, Future]):
        self.futures = futures

    def get(self, key: str, timeout_s: float = 120.0) -> RunRecord:
        """The record of run ``key``; raises what the run raised.

        Raises:
            WaitTimeout: not finished within ``timeout_s``.
        """
        from concurrent.futures import wait

        f = self.futures[key]
        if not wait([f], timeout=timeout_s).done:
            raise WaitTimeout(f"timed out after {timeout_s:.0f} s waiting for rebalance run {key!r}")
        return f.result()

    def all(self, timeout_s: float = 180.0) -> dict[str, RunRecord]:
        """Every record, waiting for each (the first failure is raised after all finished)."""
        deadline = time.monotonic() + timeout_s
        done: dict[str, RunRecord] = {}
        error: BaseException | None = None
        for k in self.futures:
            try:
                done[k] = self.get(k, max(1.0, deadline - time.monotonic()))
            except BaseException as e:  # keep waiting for the others, then raise
                error = error or e
        if error:
            raise error
        return done

    def finished(self) -> list[RunRecord]:
        """Records of the runs that finished without an error (for cleanup checks)."""
        return [f.result() for f in self.futures.values() if f.done() and f.exception() is None]


def launch(configs: dict[str, RebalanceConfig]) -> Launched:
    """Start every run in its own thread at once (each has its own topic and group) and return
    at once; ``Launched.get(key)`` waits for one. Wall time is that of the longest run."""
    pool = ThreadPoolExecutor(max_workers=len(configs), thread_name_prefix="rebalance")
    futures = {k: pool.submit(run_rebalance, cfg) for k, cfg in configs.items()}
    pool.shutdown(wait=False)
    return Launched(futures)


def plan_table(plan: dict[str, RebalanceConfig]) -> "pd.DataFrame":
    """Runs as a table: the protocol each program asks for, its program, consumers,
    partitions, scenarios."""
    import pandas as pd

    rows = []
    for key, c in plan.items():
        p = c.spec
        rows.append({"run": key, "program": c.program.name if c.program else None, "group.protocol": p.group_protocol,
                     "assignor": p.strategy or "(broker)", "static": p.static,
                     "session timeout ms": p.session_timeout_ms, "consumers": c.consumers,
                     "partitions": c.partitions, "scenarios": " → ".join(c.scenarios)})
    return pd.DataFrame(rows).set_index("run")


def run_many(configs: dict[str, RebalanceConfig], timeout_s: float = 300.0) -> dict[str, RunRecord]:
    """``launch`` and wait for all."""
    return launch(configs).all(timeout_s)


# ----------------------------------------------------------------------------- a hand-made run


def example_run(run_id: str = "example") -> tuple[list, "RunRecord"]:
    """A tiny hand-made eager run, for tests and for warming Spark up: ``(events, record)``.

    Two partitions. ``c0.0`` owns both from t=1000 ms; ``c1.0`` starts at 2000 (scale-out);
    ``c0.0`` revokes both at 2100; the coordinator writes generation 2 at 2300; ``c0.0`` gets
    partition 0 back at 2350, ``c1.0`` gets partition 1 at 2400; window (1500, 3000].
    Then a crash: ``c1.0`` is SIGKILLed at 3500 holding partition 1, ``c0.0`` revokes 0 at
    9000, generation 3 at 9200, ``c0.0`` gets 0 and 1 at 9300; window (3000, 9500].

    Expected: scale-out: 1 rebalance, 2 revoked, 1 needless (partition 0 came back),
    max pause 0.3 s (partition 1: 2100 to 2400), 0.55 partition-s; crash: 1 rebalance,
    1 revoked, 1 lost, max pause 5.8 s (partition 1: 3500 to 9300), 6.1 partition-s.
    """
    from ..ledger import Event

    rows = [("c0.0", 0, 1000, "assigned"), ("c0.0", 1, 1000, "assigned"),
            ("c0.0", 0, 2100, "revoked"), ("c0.0", 1, 2100, "revoked"),
            ("c0.0", 0, 2350, "assigned"), ("c1.0", 1, 2400, "assigned"),
            ("c0.0", 0, 9000, "revoked"), ("c0.0", 0, 9300, "assigned"), ("c0.0", 1, 9300, "assigned")]
    seq: dict[str, int] = {}
    events = []
    for client, partition, ts, kind in rows:
        seq[client] = seq.get(client, -1) + 1
        events.append(Event(run_id=run_id, kind=kind, ts_ms=ts, seq=seq[client], topic="t", partition=partition,
                            client_id=client))
    actions = [{"run_id": run_id, "ts_ms": 900, "action": "start", "client_id": "c0.0"},
               {"run_id": run_id, "ts_ms": 2000, "action": "start", "client_id": "c1.0"},
               {"run_id": run_id, "ts_ms": 3500, "action": "kill", "client_id": "c1.0"}]
    gens = [{"ts_ms": 1100, "generation": 1}, {"ts_ms": 2300, "generation": 2}, {"ts_ms": 9200, "generation": 3}]
    windows = [Window(0, "scale-out", 1500, 3000, 2, ["c0.0"], ["c0.0", "c1.0"]),
               Window(1, "crash", 3000, 9500, 2, ["c0.0", "c1.0"], ["c0.0"])]
    record = RunRecord(run_id, PROTOCOLS["eager"], 1, 2, "t", "g", ".", 0, windows, actions, gens, "CLASSIC", "range")
    return events, record


# ----------------------------------------------------------------------------- the CLI


def _split(values: tuple[str, ...], choices: Sequence[str], what: str) -> list[str]:
    out: list[str] = []
    for v in values:
        for x in v.split(","):
            x = x.strip()
            if x == "all":
                out.extend(c for c in choices if c not in out)
                continue
            if x not in choices:
                raise click.BadParameter(f"{x!r}: expected one of {', '.join(choices)} (or all)", param_hint=what)
            if x not in out:
                out.append(x)
    return out


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("rebalance")
@click.option("--protocol", "protocols", multiple=True, default=("eager",), show_default=True,
              metavar="eager|cooperative|static|consumer",
              help="Group protocol; repeat or comma-separate (or 'all') to run several groups at once.")
@click.option("--consumers", type=click.IntRange(2, 20), default=3, show_default=True, help="Consumers in the group.")
@click.option("--partitions", type=click.IntRange(3, 200), default=6, show_default=True,
              help="Partitions of the topic (more than consumers).")
@click.option("--scenario", "scenarios", multiple=True, default=("rolling-restart",), show_default=True,
              metavar="|".join(SCENARIOS),
              help="What happens to the group; repeat or comma-separate to run them in order on one group.")
@click.option("--timeout", "timeout_s", type=float, default=40.0, show_default=True,
              help="Seconds to wait for the group to settle after each step.")
@shows_programs
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: one object for one protocol and one scenario, else a list of them.")
@runscope.checks_cluster_itself
def cli_command(protocols: tuple[str, ...], consumers: int, partitions: int, scenarios: tuple[str, ...],
                timeout_s: float, as_json: bool) -> None:
    """Real consumer processes in a real group, restarted, added and killed like pods: count
    the rebalances, the revoked partitions and how long partitions went unconsumed. Every
    member runs notebook 02's program of its protocol (eager_member, cooperative_member,
    static_member, kip848_member; the slow consumer: slow_eager_member, slow_kip848_member).

    \b
    kafkalab run rebalance --protocol eager --consumers 3 --partitions 6 --scenario rolling-restart --json
    kafkalab run rebalance --protocol all --scenario scale-out,crash
    """
    from .. import spark as kspark
    from .rebalance_analysis import analyse, unexpected

    protos = _split(protocols, list(PROTOCOLS), "--protocol")
    scens = _split(scenarios, SCENARIOS, "--scenario")
    if partitions <= consumers:
        raise click.BadParameter(f"needs more partitions than consumers ({partitions} <= {consumers})",
                                 param_hint="--partitions")
    runscope.require_for_cli()
    configs = {p: RebalanceConfig(p, consumers, partitions, tuple(scens), settle_timeout_s=timeout_s) for p in protos}
    show_programs(*(prog for c in configs.values() for prog in (c.program, c.slow_program)))
    records = run_many(configs)
    results = analyse(kspark.session("kafkalab-rebalance"), list(records.values())).results
    rows = []
    for r in results:
        row = r.to_json()
        row["unexpected"] = {k: list(v) for k, v in unexpected(r).items()}
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2))
        return
    click.echo(f"{consumers} consumers, {partitions} partitions")
    click.echo(f"{'protocol':<12} {'scenario':<16} {'rebalances':>10} {'revoked':>8} {'max pause s':>12} "
               f"{'sum pause s':>12}  claims of notebook 02")
    for r in rows:
        claims = "hold" if not r["unexpected"] else "DIFFER: " + ", ".join(r["unexpected"])
        click.echo(f"{r['protocol']:<12} {r['scenario']:<16} {r['rebalances']:>10} {r['revoked']:>8} "
                   f"{r['max_pause_s']:>12.2f} {r['partition_pause_s']:>12.2f}  {claims}")
