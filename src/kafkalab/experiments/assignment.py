"""Partition assignment: which member of a consumer group reads which partition.

Runs real librdkafka consumers in a real group on fresh topics and reports the assignment
the group coordinator holds once the group is STABLE. Notebook 01 and
``kafkalab run assignment`` call the same functions.

Assignors (sources: librdkafka CONFIGURATION.md ``partition.assignment.strategy`` and
``group.remote.assignor``; KIP-429 cooperative rebalancing; KIP-848 broker-side assignment):

- classic protocol, client-side: ``range`` (per topic, contiguous ranges over members sorted
  by member id), ``roundrobin`` (all partitions of all topics dealt in turn),
  ``cooperative-sticky`` (balanced, keeps what it can, incremental rebalances).
  ``classic/default`` sets no ``partition.assignment.strategy`` at all: librdkafka's default
  (``range,roundrobin``; the group leader picks the first strategy every member supports).
- ``group.protocol=consumer`` (KIP-848, brokers >= 4.0, librdkafka >= 2.12 GA): the
  coordinator assigns with ``uniform`` or ``range``; ``consumer/default`` sets no
  ``group.remote.assignor``, so the broker's first ``group.consumer.assignors`` entry is used.

The members are client programs (``kafkalab.programs``): notebook 01 shows ``member`` (a
classic-protocol consumer whose ``partition.assignment.strategy`` line names the assignor) and
``kip848_member`` (``group.protocol=consumer`` and ``group.remote.assignor``); every other
assignor runs a copy of one of them with that one line changed (``member_programs``). They run
in a host worker (``MemberHost``, ``worker.HostSpec``): one process for all the members of a
call (45 groups of section 4 included), each member a thread with its own ``lab``, since a
Python process per member would cost more than the whole notebook. Without a program,
``GroupRun`` still runs in-process ``workloads.GroupMember`` threads (the solutions' exercise
on a member whose poll loop stops while its client lives on).

Member order, which decides range and round-robin: librdkafka's assignors sort members by
``group.instance.id`` if set, else by member id (rdkafka_assignor.c). Under the classic
protocol the coordinator makes member ids ``<client.id>-<UUID>``, so here (client ids
``consumer-0`` ... ``consumer-9``) the order is the consumer index. Under KIP-848 the client
makes its member id, a random UUID, and the broker's RangeAssignor sorts by it (Kafka 4.3
group-coordinator ``RangeAssignor.sortMemberIds``): the order changes from run to run.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence, TypeVar

from confluent_kafka import KafkaException

from .. import admin, workloads
from .. import ledger as ledgers
from ..errors import KafkalabError
from ..programs import Program, program_settings
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import HostSpec, ProgramSpec, lab_conf
from ..workloads import GroupMember, MemberState, Partition

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")

STRATEGIES = ("range", "roundrobin", "cooperative-sticky")
REMOTE_ASSIGNORS = ("uniform", "range")

#: Every assignor label ``Assignor.parse`` accepts, in the order the notebook shows them.
LABELS = ("range", "roundrobin", "cooperative-sticky", "consumer/uniform", "consumer/range")
#: Labels that leave the choice to the defaults (client's for classic, broker's for KIP-848).
DEFAULT_LABELS = ("classic/default", "consumer/default")


@dataclass(frozen=True)
class Assignor:
    """A way of assigning: a classic client-side ``strategy`` or a KIP-848 ``remote_assignor``.

    ``strategy=None`` (classic) or ``remote_assignor=None`` (consumer) means "set nothing":
    the client's default strategy list, or the broker's default remote assignor.
    """

    strategy: str | None = "range"
    group_protocol: str = "classic"
    remote_assignor: str | None = None

    def __post_init__(self) -> None:
        if self.group_protocol == "classic":
            if self.strategy is not None and self.strategy not in STRATEGIES:
                raise KafkalabError(f"strategy must be one of {', '.join(STRATEGIES)}, not {self.strategy!r}")
        elif self.group_protocol == "consumer":
            if self.remote_assignor is not None and self.remote_assignor not in REMOTE_ASSIGNORS:
                raise KafkalabError(f"remote assignor must be one of {', '.join(REMOTE_ASSIGNORS)}, not {self.remote_assignor!r}")
        else:
            raise KafkalabError(f"group protocol must be classic or consumer, not {self.group_protocol!r}")

    @property
    def label(self) -> str:
        """``"range"``, ``"cooperative-sticky"``, ``"consumer/uniform"``, ``"classic/default"``..."""
        if self.group_protocol == "classic":
            return self.strategy or "classic/default"
        return f"consumer/{self.remote_assignor or 'default'}"

    @property
    def eager(self) -> bool:
        """True when a rebalance revokes every partition first (classic range/roundrobin, and
        librdkafka's default list, whose strategies are both eager)."""
        return self.group_protocol == "classic" and self.strategy != "cooperative-sticky"

    @classmethod
    def parse(cls, label: str) -> "Assignor":
        """Inverse of ``label``."""
        if label.startswith("consumer/"):
            name = label.split("/", 1)[1]
            return cls(strategy=None, group_protocol="consumer", remote_assignor=None if name == "default" else name)
        if label in ("classic/default", "default"):
            return cls(strategy=None)
        return cls(strategy=label)


@dataclass
class Member:
    """One group member as the coordinator reports it. ``partitions``: sorted (topic, partition)."""

    name: str
    member_id: str
    group_instance_id: str | None
    partitions: list[Partition]


@dataclass
class AssignmentResult:
    """The stable assignment of one run.

    ``topics``: the names given (e.g. ``"A"``) -> partition count; ``topic_names``: given name
    -> real topic name (run prefix + ``-NAME``). ``members`` in consumer order.
    ``partition_assignor``: the assignor name the coordinator reports for the group
    (DescribeGroups / ConsumerGroupDescribe), e.g. ``"range"`` or ``"uniform"``.
    ``subscriptions``: member name -> the given topic names it subscribed to, when members
    did not all subscribe to every topic (None: they did).
    ``lab_conf``: member name -> what the harness put in its ``lab.conf`` (addresses and names
    only), when the members ran a program (empty otherwise).
    """

    group_id: str
    assignor: str
    topics: dict[str, int]
    topic_names: dict[str, str]
    members: list[Member]
    elapsed_ms: int
    partition_assignor: str = ""
    subscriptions: dict[str, list[str]] | None = None
    lab_conf: dict[str, dict] = field(default_factory=dict)

    @property
    def counts(self) -> list[int]:
        """Partitions per member, in consumer order."""
        return [len(m.partitions) for m in self.members]

    @property
    def imbalance(self) -> int:
        """Most minus fewest partitions held by one member (0 or 1 is as even as it gets)."""
        return max(self.counts) - min(self.counts)

    @property
    def idle(self) -> int:
        """Members with no partition."""
        return sum(1 for c in self.counts if c == 0)

    def short(self) -> dict[str, list[str]]:
        """member name -> ``["A-0", "B-1"]`` with the given topic names, for tables and plots."""
        back = {v: k for k, v in self.topic_names.items()}
        return {m.name: [f"{back.get(t, t)}-{p}" for t, p in m.partitions] for m in self.members}

    def owners(self) -> dict[tuple[str, int], str]:
        """``(given topic name, partition)`` -> name of the member that holds it."""
        back = {v: k for k, v in self.topic_names.items()}
        return {(back.get(t, t), p): m.name for m in self.members for t, p in m.partitions}

    def co_partitioned(self, a: str, b: str) -> bool:
        """True when, for every partition number i of topics ``a`` and ``b`` (given names, same
        partition count), partition i of both is held by the same member: what a consumer
        joining the two topics by key needs."""
        if self.topics[a] != self.topics[b]:
            raise KafkalabError(f"{a} and {b} have different partition counts: {self.topics[a]} vs {self.topics[b]}")
        own = self.owners()
        return all(own[(a, i)] == own[(b, i)] for i in range(self.topics[a]))

    def order(self) -> list[str]:
        """Member names in the order range and round-robin use: static members first by
        ``group.instance.id``, then the rest by member id."""
        return [m.name for m in sorted(self.members, key=_sort_key)]

    def to_json(self) -> dict:
        d = asdict(self)
        for m in d["members"]:
            m["partitions"] = [list(tp) for tp in m["partitions"]]
        return d


def _sort_key(m: Member) -> tuple[bool, str]:
    return (m.group_instance_id is None, m.group_instance_id or m.member_id)


def topic_names(topics: dict[str, int], run_prefix: str) -> dict[str, str]:
    """Given name -> real name ``<run_prefix>-<NAME>`` (topic order, and so range and
    round-robin order, is that of the given names)."""
    return {t: f"{run_prefix}-{t}" for t in topics}


# ----------------------------------------------------------------------------- predictions


def predict_range(order: Sequence[str], topics: dict[str, int]) -> dict[str, list[Partition]]:
    """What a range assignor gives, topic by topic: ``P // C`` contiguous partitions to each
    member in ``order``, one extra to each of the first ``P % C``. Members past ``P`` get nothing
    from that topic. Same rule in librdkafka's range assignor, Java's RangeAssignor and the
    Kafka 4.3 broker-side (KIP-848) RangeAssignor, for members subscribed to the same topics.

    Args:
        order: member keys in the assignor's order (see ``AssignmentResult.order``).
        topics: topic -> partition count.
    Returns:
        member key -> sorted ``(topic, partition)`` list (every member present).
    """
    out: dict[str, list[Partition]] = {m: [] for m in order}
    n = len(order)
    for topic, parts in topics.items():
        quota, extra = divmod(parts, n)
        start = 0
        for i, m in enumerate(order):
            size = quota + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + size))
            start += size
    return {m: sorted(tps) for m, tps in out.items()}


def predict_roundrobin(order: Sequence[str], topics: dict[str, int],
                       subscriptions: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[Partition]]:
    """What round-robin gives: every partition of every topic, sorted by topic name then
    partition, dealt to the members in ``order`` in turn; a member not subscribed to the
    partition's topic is skipped and the turn passes on (librdkafka
    rdkafka_roundrobin_assignor.c; Java RoundRobinAssignor).

    Args:
        subscriptions: member key -> topics it subscribed to; None: every member, every topic.
    """
    out: dict[str, list[Partition]] = {m: [] for m in order}
    everything = sorted((t, p) for t, n in topics.items() for p in range(n))
    n = len(order)
    nxt = -1
    for topic, part in everything:
        for _ in range(n):
            nxt = (nxt + 1) % n
            if subscriptions is None or topic in subscriptions[order[nxt]]:
                break
        else:
            raise KafkalabError(f"no member subscribes to {topic}")
        out[order[nxt]].append((topic, part))
    return {m: sorted(tps) for m, tps in out.items()}


_RULES = {"range": predict_range, "roundrobin": predict_roundrobin}


def predict(result: AssignmentResult, rule: str) -> dict[str, list[str]]:
    """The assignment ``rule`` (``"range"`` or ``"roundrobin"``) predicts for the members and
    topics of ``result``, in the shape of ``result.short()``: compare the two to check that
    the live assignor follows the rule.

    Uses the real topic names (round-robin sorts by them), ``result.order()`` and, for
    round-robin, ``result.subscriptions``.
    """
    if rule not in _RULES:
        raise KafkalabError(f"rule must be one of {', '.join(_RULES)}, not {rule!r}")
    real = {result.topic_names[t]: n for t, n in result.topics.items()}
    if rule == "roundrobin":
        subs = None if result.subscriptions is None else {
            name: [result.topic_names[t] for t in topics] for name, topics in result.subscriptions.items()}
        predicted = predict_roundrobin(result.order(), real, subs)
    elif result.subscriptions is not None:
        raise KafkalabError("predict(..., 'range') covers members subscribed to the same topics only")
    else:
        predicted = predict_range(result.order(), real)
    back = {v: k for k, v in result.topic_names.items()}
    return {m.name: [f"{back[t]}-{p}" for t, p in predicted[m.name]] for m in result.members}


# ----------------------------------------------------------------------------- the programs

#: The line of ``member`` that names the classic assignor (librdkafka CONFIGURATION.md,
#: ``partition.assignment.strategy``), and of ``kip848_member`` the broker-side one
#: (``group.remote.assignor``, KIP-848), each with its trailing comma.
STRATEGY_LINE = re.compile(r'"partition\.assignment\.strategy":\s*"[^"]*",?')
REMOTE_ASSIGNOR_LINE = re.compile(r'"group\.remote\.assignor":\s*"[^"]*",?')


def _one_match(pattern: re.Pattern, program: Program) -> str:
    found = pattern.findall(program.source)
    if len(found) != 1:
        raise KafkalabError(f"program {program.name} should set {pattern.pattern.split(':')[0]} once "
                            f"(the line the other assignors change); found it {len(found)} times")
    return found[0]


def member_program(label: str, member: Program, kip848_member: Program | None = None) -> Program:
    """The program that runs assignor ``label`` (one of ``LABELS`` or ``DEFAULT_LABELS``): a
    classic label runs ``member`` with its ``partition.assignment.strategy`` line set to the
    label (``classic/default``: the line commented out, librdkafka's default list); a
    ``consumer/...`` label runs ``kip848_member`` with its ``group.remote.assignor`` line set
    (``consumer/default``: commented out, the broker's first ``group.consumer.assignors``).
    The program itself when its line already says so; else a copy (``Program.replace``) named
    ``<program>_<assignor>``, which differs from the shown cell in that one line.

    Raises:
        KafkalabError: unknown label; ``kip848_member`` missing for a consumer label; the
            program does not set its line exactly once.
    """
    a = Assignor.parse(label)
    if a.group_protocol == "classic":
        program, pattern, key, value = member, STRATEGY_LINE, "partition.assignment.strategy", a.strategy
    else:
        if kip848_member is None:
            raise KafkalabError(f"{label} needs the KIP-848 program (kip848_member)")
        program, pattern, key, value = kip848_member, REMOTE_ASSIGNOR_LINE, "group.remote.assignor", a.remote_assignor
    old = _one_match(pattern, program)
    new = f'"{key}": "{value}",' if value else f'# "{key}" not set,'
    if new.rstrip(",") == old.rstrip(","):
        return program
    suffix = re.sub(r"\W+", "_", (value or "default"))
    return program.replace(old, new, name=f"{program.name}_{suffix}")


def member_programs(labels: Sequence[str], member: Program, kip848_member: Program | None = None) -> dict[str, Program]:
    """``member_program`` for each label: label -> program, in the order given."""
    return {label: member_program(label, member, kip848_member) for label in labels}


def assignor_lines(programs: Mapping[str, Program]) -> dict[str, str]:
    """label -> the line that names the assignor in the program that runs it (what the copies
    change), e.g. ``{"roundrobin": '"partition.assignment.strategy": "roundrobin",'}``."""
    out = {}
    for label, program in programs.items():
        found = (STRATEGY_LINE.findall(program.source) or REMOTE_ASSIGNOR_LINE.findall(program.source)
                 or re.findall(r'# "(?:partition\.assignment\.strategy|group\.remote\.assignor)" not set,', program.source))
        out[label] = f"{program.name}: " + (found[0] if found else "(no assignor line)")
    return out


def partitioner_of(program: Program) -> str:
    """The ``partitioner`` a producer program sets, or librdkafka's default
    (``consistent_random``, CONFIGURATION.md) when it sets none."""
    return str(program_settings(program.source).get("partitioner", "consistent_random (default)"))


class MemberHost:
    """One host worker process (``worker.HostSpec``) that runs client programs as threads,
    each with its own ``lab``: the members of every group of one call (and the producers of
    section 6). A context manager: on exit it stops every program still running (SIGTERM: a
    member leaves its group) and removes its folder. Create it in a thread that lives as long
    as the host should (the worker dies with the thread that spawned it).
    """

    def __init__(self, name: str = "members"):
        self.run_id = f"{name}-{uuid.uuid4().hex[:8]}"
        self.dir = workloads.run_dir(self.run_id)
        self.inbox = self.dir / "inbox"
        self.inbox.mkdir(parents=True, exist_ok=True)
        self.worker = workloads.spawn(HostSpec(name, self.run_id, str(self.dir / "host.jsonl"), str(self.inbox)))

    def start(self, key: str, spec: ProgramSpec) -> None:
        """Start ``spec`` in the host under ``key`` (unique in this host)."""
        path = self.inbox / f"{key}.json"
        tmp = self.inbox / f"{key}.json.part"
        tmp.write_text(json.dumps(asdict(spec)))
        tmp.rename(path)

    def stop(self, key: str) -> None:
        """Ask program ``key`` to stop (its ``lab.running()`` turns False)."""
        (self.inbox / f"{key}.stop").touch()

    def ended(self, key: str) -> str | None:
        """None while program ``key`` runs; once it ended, its traceback ("" if it returned)."""
        end = self.inbox / f"{key}.end"
        if not end.exists():
            if not self.worker.alive:
                raise KafkalabError(f"the member host died (exit {self.worker.returncode}); its log: {self.worker.log_path}")
            return None
        return end.read_text()

    def wait_ended(self, keys: Sequence[str], timeout_s: float = 30.0) -> None:
        """Until every program of ``keys`` has ended."""
        wait_until(lambda: all(self.ended(k) is not None for k in keys), timeout_s=timeout_s, interval_s=0.05,
                   what=f"{len(keys)} program(s) of the member host to end")

    def close(self) -> None:
        """Stop every program, end the host, remove its folder."""
        self.worker.terminate(timeout_s=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "MemberHost":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ProgramMember:
    """One group member run as a program in a ``MemberHost``; what it knows about itself is
    read from its ledger (``assigned``/``revoked`` events of its ``on_assign``/``on_revoke``).
    Same face as ``workloads.GroupMember`` (``state``, ``snapshot``, ``close``)."""

    def __init__(self, host: MemberHost, key: str, index: int, spec: ProgramSpec):
        self.host = host
        self.key = key
        self.ledger_path = Path(spec.ledger)
        self.state = MemberState(index=index, client_id=spec.conf["client.id"],
                                 group_instance_id=spec.instance_id)
        host.start(key, spec)

    def snapshot(self) -> MemberState:
        """The member's view: partitions held (assigned minus revoked, in ledger order), every
        partition revoked, member id (as its last rebalance callback saw it).

        Raises:
            KafkalabError: the program raised (its traceback in the message).
        """
        error = self.host.ended(self.key)
        if error:
            raise KafkalabError(f"{self.state.client_id}'s program failed:\n{error}")
        s = self.state
        out = MemberState(s.index, s.client_id, s.group_instance_id)
        events = ledgers.read_events(self.ledger_path, growing=True, missing_ok=True)
        for e in events:
            tp = (e.topic, e.partition)
            if e.kind == "assigned":
                out.assignment.add(tp)
                out.assigned.append(tp)
            elif e.kind == "revoked":
                out.assignment.discard(tp)
                out.revoked.append(tp)
            if e.member_id:
                out.member_id = e.member_id
        return out

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the program (it closes its consumer: a LeaveGroup) and wait until it ended."""
        self.host.stop(self.key)
        self.host.wait_ended([self.key], timeout_s)


def wait_programs_stable(group_id: str, members: Sequence[ProgramMember], topics: dict[str, int],
                         timeout_s: float = 30.0) -> tuple[dict[str, tuple[str, str | None, set[Partition]]], str]:
    """Until the coordinator reports the group STABLE with exactly these members (by
    ``client.id``), every partition of ``topics`` assigned once, and each member's own view
    (its ledger) equal to the coordinator's. Returns (client id -> (member id,
    group.instance.id, partitions), the assignor the coordinator reports).

    Raises:
        WaitTimeout: with the last state seen and, for a KIP-848 group, the members whose own
            view lags what the coordinator holds for them (``unreconciled``): the signature of
            a heartbeat response lost to librdkafka's request timeout; KafkalabError: a
            member's program failed.
    """
    expected = workloads.partitions_of(topics)
    last: dict = {}

    def stable():
        nonlocal last
        views = {m.state.client_id: m.snapshot().assignment for m in members}
        try:
            d = workloads.describe_group(group_id)
        except (KafkaException, TimeoutError):
            return None
        coordinator = {m.client_id: (m.member_id, m.group_instance_id,
                                     {(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else [])})
                       for m in d.members}
        target = {m.client_id: {(tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions}
                  for m in d.members if getattr(m, "target_assignment", None) is not None}
        last = {"state": d.state.name, "coordinator": {c: sorted(v[2]) for c, v in coordinator.items()},
                "members": {c: sorted(v) for c, v in views.items()}}
        if target:  # KIP-848: the assignment the coordinator is reconciling each member towards
            last["target"] = {c: sorted(v) for c, v in target.items()}
        if d.state.name != "STABLE" or len(d.members) != len(members) or set(coordinator) != set(views):
            return None
        flat = [tp for v in coordinator.values() for tp in v[2]]
        if len(flat) != len(set(flat)) or set(flat) != expected:
            return None
        if any(views[c] != coordinator[c][2] for c in views):
            return None
        return coordinator, d.partition_assignor or ""

    def seen() -> str:
        lagging = unreconciled(last.get("members", {}), last.get("coordinator", {}), last.get("target", {}))
        return f"last seen: {last}" + (f"\n{LOST_RESPONSE_NOTE}: {lagging}" if lagging else "")

    return wait_until(stable, timeout_s=timeout_s, interval_s=0.2,
                      what=f"group {group_id} stable with {len(members)} members covering {len(expected)} partitions",
                      on_timeout=seen)


#: What a member whose own view lags the coordinator's record of it means under KIP-848 with
#: librdkafka 2.16: the ConsumerGroupHeartbeat that carried its new assignment was answered
#: after librdkafka's request timeout (the heartbeat interval the broker gives, 1 s here:
#: group.consumer.heartbeat.interval.ms) and dropped; librdkafka then retries with a partial
#: heartbeat, and the coordinator sends an assignment only on a full request or a change
#: (Kafka GroupMetadataManager.consumerGroupHeartbeat), so the member never learns it.
LOST_RESPONSE_NOTE = ("members whose own view lags what the coordinator holds for them (a KIP-848 heartbeat "
                      "response carrying their assignment was lost to librdkafka's 1-heartbeat-interval request "
                      "timeout and never sent again)")


def unreconciled(views: Mapping[str, Sequence], current: Mapping[str, Sequence],
                 target: Mapping[str, Sequence]) -> dict[str, dict[str, list]]:
    """The members of a KIP-848 group stuck between two assignments, as one ``describe`` and
    their own ledgers show them: client id -> ``{"holds": ..., "coordinator": ..., "target":
    ...}`` for each member whose own view (``views``: what its rebalance callbacks recorded)
    still holds partitions its target took away while the coordinator's current assignment
    for it equals its own view (a revocation it never heard of), or whose own view differs
    from a target the coordinator records as delivered (an assignment it never heard of). A
    member only waiting for partitions another member has yet to release is not listed. Empty
    for a classic group (no ``target``).
    """
    out = {}
    for client, want in target.items():
        held, now, want = sorted(views.get(client, [])), sorted(current.get(client, [])), sorted(want)
        lost_revocation = bool(set(held) - set(want)) and now == held
        lost_assignment = now == want and held != want
        if lost_revocation or lost_assignment:
            out[client] = {"holds": held, "coordinator": now, "target": want}
    return out


# ----------------------------------------------------------------------------- live groups


class GroupRun:
    """A live group of ``consumers`` members on fresh topics; a context manager that closes
    the members, deletes the topics and deletes the (then empty) group on exit.

    ``subscriptions``: for member i, the given topic names it subscribes to (default: all).
    ``static``: give each member a ``group.instance.id`` (KIP-345): ``<prefix>-instance-<i>``, which
    a ``program`` writes itself (``"group.instance.id": lab.instance_id``).
    ``program``: the client program every member runs (role ``consumer``: it subscribes to
    ``lab.topics`` and reports its rebalances with ``lab.on_assign``/``lab.on_revoke``), in
    ``host`` (default: a ``MemberHost`` of its own); ``lab.conf`` then holds only
    ``bootstrap.servers``, ``group.id``, ``client.id`` (``worker.lab_conf``), and ``assignor`` may be any label (the program decides). None: in-process
    ``workloads.GroupMember`` threads configured by ``assignor`` (``consumer_config``).
    ``group_config``: group configs set before the topics and the members exist
    (``admin.alter_group_config``, e.g. ``{"consumer.heartbeat.interval.ms": 5000}``), removed
    at cleanup (``admin.delete_group_configs``: Kafka keeps a deleted group's configs).
    """

    def __init__(self, consumers: int, topics: dict[str, int], assignor: "Assignor | str",
                 run_prefix: str | None = None, static: bool = False, replication_factor: int = 1,
                 subscriptions: Sequence[Sequence[str]] | None = None, program: Program | None = None,
                 host: MemberHost | None = None, group_config: Mapping[str, str | int] | None = None):
        if consumers < 1:
            raise KafkalabError("consumers must be at least 1")
        if not topics or any(n < 1 for n in topics.values()):
            raise KafkalabError(f"each topic needs at least 1 partition: {topics}")
        if subscriptions is not None:
            if len(subscriptions) != consumers:
                raise KafkalabError(f"{len(subscriptions)} subscriptions for {consumers} consumers")
            unknown = {t for sub in subscriptions for t in sub} - set(topics)
            if unknown or any(not sub for sub in subscriptions):
                raise KafkalabError(f"each subscription needs topics among {sorted(topics)}: {subscriptions}")
            orphans = set(topics) - {t for sub in subscriptions for t in sub}
            if orphans:
                raise KafkalabError(f"no member subscribes to {sorted(orphans)}: nobody could be assigned them")
        self.subscriptions = [list(s) for s in subscriptions] if subscriptions is not None else None
        if isinstance(assignor, str):
            self.label = assignor
            try:
                assignor = Assignor.parse(assignor)
            except KafkalabError:
                if program is None:
                    raise
                assignor = None
        else:
            self.label = assignor.label
        self.assignor = assignor
        self.program = program
        self.host = host
        self.topics = dict(topics)
        self.scope = RunScope(run_prefix or "kl", unique=run_prefix is None)  # names, cleanup
        self.prefix = self.scope.prefix
        self.names = topic_names(self.topics, self.prefix)
        self.group_id = self.scope.name("group")
        self.n = consumers
        self.static = static
        if static and program is not None and "lab.instance_id" not in program.source:
            raise ValueError(f"static=True: program {program.name} must write its static membership itself "
                             '("group.instance.id": lab.instance_id in its settings)')
        self.replication_factor = replication_factor
        self.members: list[GroupMember | ProgramMember] = []
        self.lab_conf: dict[str, dict] = {}  # member name -> its lab.conf (program members)
        self.group_config = dict(group_config or {})
        self.t0 = time.monotonic()

    def __enter__(self) -> "GroupRun":
        for t in self.names.values():
            self.scope.add_topic(t)
        self.scope.add_group(self.group_id)
        if self.program is not None and self.host is None:
            self.host = MemberHost()
            self.scope.on_cleanup(self.host.close)  # closers run last-added first: members, then host
        self.scope.on_cleanup(self._close_members)
        try:
            if self.group_config:  # before the topics: a broker that knows them has applied it too
                self.scope.on_cleanup(lambda: admin.delete_group_configs([self.group_id]))  # Kafka keeps them
                admin.alter_group_config(self.group_id, self.group_config)
            admin.create_topics({self.names[t]: n for t, n in self.topics.items()},
                                replication_factor=self.replication_factor)
            for i in range(self.n):
                self.add()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def add(self) -> "GroupMember | ProgramMember":
        """Start one more member."""
        i = len(self.members)
        given = self.subscriptions[i] if self.subscriptions and i < len(self.subscriptions) else list(self.topics)
        if self.program is not None:
            client_id = f"consumer-{i}"
            key = f"{self.group_id}.{client_id}"
            spec = ProgramSpec(name=client_id, run_id=self.group_id, ledger=str(self.host.dir / f"{key}.jsonl"),
                               role="consumer", program_name=self.program.name, source=self.program.source,
                               conf=lab_conf(client_id, self.group_id), topics=[self.names[t] for t in given],
                               instance_id=f"{self.prefix}-instance-{i}" if self.static else None)
            m = ProgramMember(self.host, key, i, spec)
            self.lab_conf[client_id] = dict(spec.conf)
            self.members.append(m)
            return m
        conf = workloads.consumer_config(
            self.group_id, i, strategy=self.assignor.strategy, group_protocol=self.assignor.group_protocol,
            remote_assignor=self.assignor.remote_assignor,
            group_instance_id=f"{self.prefix}-instance-{i}" if self.static else None)
        if self.assignor.group_protocol == "classic" and self.assignor.strategy is None:
            conf.pop("partition.assignment.strategy", None)  # the client's own default
        m = GroupMember(i, conf, [self.names[t] for t in given])
        self.members.append(m)
        return m

    def remove(self, index: int) -> None:
        """Close member ``index`` cleanly (it leaves the group)."""
        m = self.members.pop(index)
        m.close()

    def wait_stable(self, timeout_s: float = 30.0) -> AssignmentResult:
        """Wait until the group is stable (see workloads.wait_group_stable); return the assignment."""
        real = {self.names[t]: n for t, n in self.topics.items()}
        members = []
        if self.program is not None:
            seen, reported = wait_programs_stable(self.group_id, self.members, real, timeout_s=timeout_s)
            for m in self.members:
                member_id, instance, parts = seen[m.state.client_id]
                members.append(Member(m.state.client_id, member_id, instance, sorted(parts)))
        else:
            assigned = workloads.wait_group_stable(self.group_id, self.members, real, timeout_s=timeout_s)
            for m in self.members:
                s = m.snapshot()
                members.append(Member(s.client_id, s.member_id, s.group_instance_id, sorted(assigned[s.member_id])))
            try:
                reported = workloads.describe_group(self.group_id).partition_assignor or ""
            except (KafkaException, TimeoutError):
                reported = ""
        subs = None
        if self.subscriptions is not None:
            subs = {m.state.client_id: self.subscriptions[m.state.index] if m.state.index < len(self.subscriptions)
                    else list(self.topics) for m in self.members}
        return AssignmentResult(self.group_id, self.label, dict(self.topics), dict(self.names), members,
                                workloads.elapsed_ms(self.t0), reported, subs,
                                {m.state.client_id: dict(self.lab_conf[m.state.client_id]) for m in self.members
                                 if m.state.client_id in self.lab_conf})

    def revoked_counts(self) -> dict[str, int]:
        """member name -> partitions revoked from it so far (every rebalance callback)."""
        return {m.state.client_id: len(m.snapshot().revoked) for m in self.members}

    def _close_members(self) -> None:
        programs = [m for m in self.members if isinstance(m, ProgramMember)]
        for m in programs:
            self.host.stop(m.key)  # all at once: they leave together
        for m in self.members:
            if not isinstance(m, ProgramMember):
                m.close()
        if programs:
            self.host.wait_ended([m.key for m in programs])
        self.members = []

    def __exit__(self, *exc) -> None:
        self.scope.cleanup()


def run_assignment(consumers: int, topics: dict[str, int], assignor: Assignor | str = "range",
                   run_prefix: str | None = None, timeout_s: float = 30.0,
                   subscriptions: Sequence[Sequence[str]] | None = None, program: Program | None = None,
                   host: MemberHost | None = None,
                   group_config: Mapping[str, str | int] | None = None) -> AssignmentResult:
    """Start ``consumers`` members subscribed to fresh ``topics`` (given name -> partitions)
    and return the stable assignment.

    Args:
        subscriptions: for member i, the topics (given names) it subscribes to; default all.
        program: the program every member runs (``GroupRun``); ``assignor`` is then its label.
        host: the ``MemberHost`` to run it in (default: one of its own).
        group_config: group configs set before the group forms (``GroupRun``).

    Raises:
        KafkalabError: bad arguments; WaitTimeout: the group did not stabilise in ``timeout_s``.
    """
    with GroupRun(consumers, topics, assignor, run_prefix, subscriptions=subscriptions, program=program,
                  host=host, group_config=group_config) as run:
        return run.wait_stable(timeout_s)


def in_parallel(calls: Mapping[str, Callable[[], T]], parallel: int | None = None) -> dict[str, T]:
    """Run independent experiments at once (threads; each experiment has its own topics and
    group) and return name -> result in the order given. The first failure is raised after
    every call has finished, so no group is left running."""
    with ThreadPoolExecutor(max_workers=parallel or max(1, len(calls))) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: f.result() for name, f in futures.items()}


def compare(consumers: int, topics: dict[str, int], assignors: Sequence[str] | None = None,
            parallel: int | None = None, timeout_s: float = 30.0,
            subscriptions: Sequence[Sequence[str]] | None = None,
            programs: Mapping[str, Program] | None = None, host: MemberHost | None = None) -> dict[str, AssignmentResult]:
    """``run_assignment`` once per assignor label, in parallel (each run has its own topics
    and group). Returns label -> result, in the order given.

    Args:
        assignors: labels (default: those of ``programs``, else ``LABELS``).
        programs: label -> the program its members run (``member_programs``), all in one
            ``MemberHost``: ``host``, or one made for this call; None: in-process members
            (``GroupRun``).
    """
    labels = list(assignors or (programs or {}).keys() or LABELS)
    if programs is None:
        return in_parallel({a: partial(run_assignment, consumers, topics, a, None, timeout_s, subscriptions)
                            for a in labels}, parallel)
    with _host_for_call(host) as h:
        return in_parallel({a: partial(run_assignment, consumers, topics, a, None, timeout_s, subscriptions,
                                       programs[a], h) for a in labels}, parallel)


@contextmanager
def _host_for_call(host: MemberHost | None) -> Iterator[MemberHost]:
    """``host`` as it is (its owner closes it), or a ``MemberHost`` for this call only."""
    if host is not None:
        yield host
        return
    with MemberHost() as own:
        yield own


def broker_config(name: str, timeout_s: float = 10.0) -> str:
    """The value of broker setting ``name`` on the live broker with the lowest id (the brokers
    here share one configuration), as the broker reports it (``admin.describe_config``).

    Raises:
        KafkalabError: the broker has no setting ``name``.
    """
    return admin.describe_config("broker", None, [name], timeout_s)[name].value or ""


# ----------------------------------------------------------------------------- a member leaves


@dataclass
class LeaveResult:
    """What changed when one member left: ``before``/``after`` assignments, partitions that
    changed owner (``moved``), and partitions revoked from members that stayed
    (``revoked_from_survivors``: the stop-the-world cost; eager revokes everything)."""

    assignor: str
    before: AssignmentResult
    after: AssignmentResult
    left: str
    moved: list[Partition] = field(default_factory=list)
    revoked_from_survivors: int = 0

    @property
    def leaver_partitions(self) -> list[Partition]:
        """What the member that left held before it left (real topic names)."""
        return next(m.partitions for m in self.before.members if m.name == self.left)

    @property
    def survivors_held_before(self) -> int:
        """Partitions the members that stayed held before the leave."""
        return sum(len(m.partitions) for m in self.before.members if m.name != self.left)

    @property
    def moved_beyond_leaver(self) -> list[Partition]:
        """Partitions that changed owner although their owner stayed in the group."""
        return sorted(set(self.moved) - set(self.leaver_partitions))

    def to_json(self) -> dict:
        return {"assignor": self.assignor, "left": self.left, "moved": [list(p) for p in self.moved],
                "revoked_from_survivors": self.revoked_from_survivors,
                "leaver_partitions": [list(p) for p in self.leaver_partitions],
                "survivors_held_before": self.survivors_held_before,
                "before": self.before.to_json(), "after": self.after.to_json()}


def leaver_index(before: AssignmentResult, leaver: int | str) -> int:
    """Index in ``before.members`` of the member to close: ``leaver`` itself if it is an int,
    else the member first (``"first"``) or last (``"last"``) in the assignor's order
    (``AssignmentResult.order``). Under KIP-848 member ids are random, so only the stable
    group can say which member that is.

    Raises:
        KafkalabError: ``leaver`` is neither an index of ``before.members`` nor "first"/"last".
    """
    if isinstance(leaver, int) and not isinstance(leaver, bool):
        if not 0 <= leaver < len(before.members):
            raise KafkalabError(f"leaver index {leaver} is not one of the {len(before.members)} members")
        return leaver
    if leaver not in ("first", "last"):
        raise KafkalabError(f"leaver must be a consumer index, 'first' or 'last', not {leaver!r}")
    name = before.order()[0 if leaver == "first" else -1]
    return next(i for i, m in enumerate(before.members) if m.name == name)


def run_leave(consumers: int, topics: dict[str, int], assignor: Assignor | str, leaver: int | str = 0,
              timeout_s: float = 30.0, program: Program | None = None, host: MemberHost | None = None) -> LeaveResult:
    """Form a stable group, close member ``leaver`` cleanly, wait for the new stable
    assignment, and count what moved and what was revoked from the members that stayed.

    Args:
        leaver: consumer index, or ``"first"``/``"last"``: the member first or last in the
            assignor's order (``leaver_index``); range gives the first one partition 0 of every
            topic, and the last one nothing when partitions are fewer than members.
        program, host: as for ``run_assignment``; the leaver's program is stopped (its
            ``lab.running()`` turns False and it closes its consumer).
    """
    with GroupRun(consumers, topics, assignor, program=program, host=host) as run:
        before = run.wait_stable(timeout_s)
        revoked_before = run.revoked_counts()
        index = leaver_index(before, leaver)
        left = run.members[index].state.client_id
        run.remove(index)
        after = run.wait_stable(timeout_s)
        revoked_after = run.revoked_counts()
    owner_before = {tp: m.name for m in before.members for tp in m.partitions}
    owner_after = {tp: m.name for m in after.members for tp in m.partitions}
    moved = sorted(tp for tp in owner_after if owner_after[tp] != owner_before.get(tp))
    revoked = sum(revoked_after[n] - revoked_before.get(n, 0) for n in revoked_after)
    return LeaveResult(run.label, before, after, left, moved, revoked)


def compare_leave(consumers: int, topics: dict[str, int], assignors: Sequence[str] | None = None,
                  leaver: int | str = "first", parallel: int | None = None,
                  timeout_s: float = 30.0, programs: Mapping[str, Program] | None = None,
                  host: MemberHost | None = None) -> dict[str, LeaveResult]:
    """``run_leave`` once per assignor label, in parallel. Returns label -> result.
    ``programs``, ``host``: as for ``compare``."""
    labels = list(assignors or (programs or {}).keys() or LABELS)
    if programs is None:
        return in_parallel({a: partial(run_leave, consumers, topics, a, leaver, timeout_s) for a in labels}, parallel)
    with _host_for_call(host) as h:
        return in_parallel({a: partial(run_leave, consumers, topics, a, leaver, timeout_s, programs[a], h)
                            for a in labels}, parallel)


# ----------------------------------------------------------------------------- co-partitioned joins


@dataclass
class KeyPlacement:
    """Where one key's records landed in topics A and B, and who consumes each side."""

    key: str
    partition_a: int
    partition_b: int
    member_a: str
    member_b: str


@dataclass
class JoinPlacement:
    """Records with the same keys produced to two topics, and the members that read them.

    A consumer can join A and B by key on its own only if, for every key, the member that
    reads the key's A partition also reads its B partition (``same_member == len(keys)``).
    """

    assignor: str
    partitioner_a: str
    partitioner_b: str
    assignment: AssignmentResult
    keys: list[KeyPlacement]

    @property
    def same_partition(self) -> int:
        """Keys whose A and B records are in the same partition number."""
        return sum(1 for k in self.keys if k.partition_a == k.partition_b)

    @property
    def same_member(self) -> int:
        """Keys whose A and B records are read by the same member."""
        return sum(1 for k in self.keys if k.member_a == k.member_b)

    def to_json(self) -> dict:
        return {"assignor": self.assignor, "partitioner_a": self.partitioner_a, "partitioner_b": self.partitioner_b,
                "same_partition": self.same_partition, "same_member": self.same_member,
                "keys": [asdict(k) for k in self.keys], "assignment": self.assignment.to_json()}


def run_join_placement(consumers: int = 3, partitions: int = 4, assignor: Assignor | str = "range",
                       n_keys: int = 24, partitioner_a: str | None = None, partitioner_b: str | None = None,
                       timeout_s: float = 30.0, program: Program | None = None,
                       producer_a: Program | None = None, producer_b: Program | None = None,
                       host: MemberHost | None = None) -> JoinPlacement:
    """Two topics ``A`` and ``B`` with ``partitions`` each, a group of ``consumers`` reading
    both; produce one record per key ``customer-0`` ... to each topic (confluent-kafka,
    ``partitioner`` as given, else librdkafka's default ``consistent_random``: CRC32 of the
    key) and report which partition and which member each side of each key got.

    With ``program`` (the members' program) and ``producer_a``/``producer_b`` (producer
    programs, role ``producer``: they send ``lab.records()``, the keys in order, and report
    each delivery with ``lab.delivered``), everything runs as those programs in ``host``;
    the partitioners are then the ones the producer programs set (``partitioner_of``).
    """
    keys = [f"customer-{i}" for i in range(n_keys)]
    if (producer_a is None) != (producer_b is None):
        raise KafkalabError("give both producer programs, or neither")
    with GroupRun(consumers, {"A": partitions, "B": partitions}, assignor, program=program, host=host) as run:
        result = run.wait_stable(timeout_s)
        placed: dict[str, list[int]] = {}
        if producer_a is not None:
            partitioner_a, partitioner_b = partitioner_of(producer_a), partitioner_of(producer_b)
            placed = _produce_with_programs(run, {"A": (producer_a, "order"), "B": (producer_b, "payment")}, keys,
                                            timeout_s)
        else:
            for topic, partitioner, value in (("A", partitioner_a, b"order"), ("B", partitioner_b, b"payment")):
                conf = {"partitioner": partitioner} if partitioner else {}
                placed[topic] = [p for p, _ in workloads.produce(run.names[topic], [(k.encode(), value) for k in keys],
                                                                  conf=conf)]
    owners = result.owners()
    rows = [KeyPlacement(k, placed["A"][i], placed["B"][i], owners[("A", placed["A"][i])], owners[("B", placed["B"][i])])
            for i, k in enumerate(keys)]
    return JoinPlacement(run.label, partitioner_a or "consistent_random (default)",
                         partitioner_b or "consistent_random (default)", result, rows)


def _produce_with_programs(run: GroupRun, producers: Mapping[str, tuple[Program, str]], keys: Sequence[str],
                           timeout_s: float) -> dict[str, list[int]]:
    """Run one producer program per topic (given name -> (program, value)) in the group's host,
    each sending one record per key, and return given name -> the partition of each key's
    record, in key order, from the programs' delivery reports (``acked`` ledger events).

    Raises:
        KafkalabError: a program failed, or a delivery report carries an error or is missing.
    """
    if run.host is None:
        raise KafkalabError("producer programs run in the group's member host: give the group a program")
    started = {}
    for topic, (program, value) in producers.items():
        key = f"{run.group_id}.producer-{topic}"
        path = run.host.dir / f"{key}.jsonl"
        run.host.start(key, ProgramSpec(name=f"producer-{topic}", run_id=run.group_id, ledger=str(path), role="producer",
                                        program_name=program.name, source=program.source,
                                        conf=lab_conf(f"producer-{topic}"),
                                        topics=[run.names[topic]],
                                        options={"records": [[k, f"{value}-{k}", -1] for k in keys]}))
        started[topic] = (key, path)
    run.host.wait_ended([k for k, _ in started.values()], timeout_s)
    out = {}
    for topic, (key, path) in started.items():
        error = run.host.ended(key)
        if error:
            raise KafkalabError(f"producer program for {topic} failed:\n{error}")
        acked = {e.key: e for e in ledgers.read_events(path, kinds="acked")}
        bad = [k for k in keys if k not in acked or acked[k].error]
        if bad:
            raise KafkalabError(f"producer program for {topic}: no delivery report without error for {bad[:5]}")
        out[topic] = [acked[k].partition for k in keys]
    return out


# ----------------------------------------------------------------------------- sweeps


@dataclass(frozen=True)
class SweepCase:
    consumers: int
    topics: int
    partitions: int
    assignor: str


def grid(consumers: Sequence[int], topics: Sequence[int], partitions: Sequence[int],
         assignors: Sequence[str] = LABELS) -> list[SweepCase]:
    """Every combination, assignor-major: ``grid([3], [1, 2], [2, 4])`` is 4 cases per assignor."""
    return [SweepCase(c, t, p, a) for a in assignors for c in consumers for t in topics for p in partitions]


def sweep(cases: list[SweepCase], parallel: int = 4, ledger: Path | None = None,
          timeout_s: float = 45.0, programs: Mapping[str, Program] | None = None,
          host: MemberHost | None = None,
          kip848_heartbeat_interval_ms: int | None = None) -> list[AssignmentResult]:
    """Run many assignment cases, ``parallel`` groups at a time (each its own topics and
    group). Topics are named T0, T1, ... each with ``partitions`` partitions. If ``ledger``
    is given, writes one JSON line per (case, member) for Spark (see ``sweep_rows``).
    ``programs``: assignor label -> the program its members run, all cases in one
    ``MemberHost`` (``host``, or one for this call; None: in-process members).

    ``kip848_heartbeat_interval_ms`` (ms): the heartbeat interval of the KIP-848 groups (labels
    ``consumer/...``), set as their group config ``consumer.heartbeat.interval.ms``; None: the
    broker's ``group.consumer.heartbeat.interval.ms``. librdkafka 2.16 gives a
    ConsumerGroupHeartbeat request that interval as its timeout and, when it times out, sends
    the same partial request again (rdkafka_request.c, rdkafka_cgrp.c), while the coordinator
    sends an assignment only to a full request or when the member's assignment changed
    (GroupMetadataManager.consumerGroupHeartbeat). An answer slower than one interval, which
    many members in one process on a loaded machine can take, so loses a revocation or an
    assignment for good (``unreconciled``, ``LOST_RESPONSE_NOTE``). Kafka's default, 5000 ms,
    leaves five times the margin of the lab's 1000 ms; it is also the lowest value a group config
    may take here: the controller checks it against its own
    ``group.consumer.min.heartbeat.interval.ms`` (default 5000; 3000 was refused, measured on
    Kafka 4.3.1), not the brokers' 1000.
    """
    def one(case: SweepCase, host: MemberHost | None = None) -> AssignmentResult:
        kip848 = case.assignor.startswith("consumer/")
        return run_assignment(case.consumers, {f"T{i}": case.partitions for i in range(case.topics)},
                              case.assignor, timeout_s=timeout_s,
                              program=programs[case.assignor] if programs is not None else None, host=host,
                              group_config={"consumer.heartbeat.interval.ms": kip848_heartbeat_interval_ms}
                              if kip848 and kip848_heartbeat_interval_ms is not None else None)

    if programs is None:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            results = list(pool.map(one, cases))
    else:
        with _host_for_call(host) as h, ThreadPoolExecutor(max_workers=parallel) as pool:
            results = list(pool.map(partial(one, host=h), cases))
    if ledger is not None:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        with open(ledger, "w") as f:
            for case, r in zip(cases, results):
                for row in sweep_rows(case, r):
                    f.write(json.dumps(row) + "\n")
    return results


def sweep_rows(case: SweepCase, result: AssignmentResult) -> Iterator[dict]:
    """One row per member: the case's parameters, how many partitions the member holds, the
    group (one group per case run) and how long the group took to become stable (ms)."""
    for m in result.members:
        yield {"assignor": case.assignor, "consumers": case.consumers, "topics": case.topics,
               "partitions": case.partitions, "member": m.name, "assigned": len(m.partitions),
               "group_id": result.group_id, "elapsed_ms": result.elapsed_ms}


# ----------------------------------------------------------------------------- tables


def as_table(results: Mapping[str, AssignmentResult]) -> "pd.DataFrame":
    """Members (rows) x assignors (columns): the partitions each member holds (``"A-0 B-0"``,
    or ``"-"`` for nothing), then rows ``imbalance``, ``idle`` and ``coordinator says`` (the
    assignor name the group coordinator reports)."""
    import pandas as pd

    columns = {}
    for label, r in results.items():
        held = {name: " ".join(parts) or "-" for name, parts in r.short().items()}
        held.update({"imbalance": r.imbalance, "idle": r.idle, "coordinator says": r.partition_assignor})
        columns[label] = pd.Series(held, dtype=object)
    return pd.DataFrame(columns)


def members_table(result: AssignmentResult) -> "pd.DataFrame":
    """One row per member: member id, ``group.instance.id``, position in the assignor's order
    (``order()``, 0 first) and the partitions it holds."""
    import pandas as pd

    order = result.order()
    held = result.short()
    return pd.DataFrame([{"member": m.name, "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                          "order": order.index(m.name), "partitions": " ".join(held[m.name]) or "-"}
                         for m in result.members]).set_index("member")


def leave_table(leaves: Mapping[str, LeaveResult]) -> "pd.DataFrame":
    """One row per assignor: who left, what it held, what the survivors held and gave up, and
    how many partitions changed owner (the leaver's and the survivors')."""
    import pandas as pd

    rows = []
    for label, l in leaves.items():
        back = {v: k for k, v in l.before.topic_names.items()}
        fmt = lambda tps: " ".join(f"{back[t]}-{p}" for t, p in tps) or "-"  # noqa: E731
        rows.append({"assignor": label, "eager": Assignor.parse(label).eager, "left": l.left,
                     "leaver held": fmt(l.leaver_partitions), "survivors held": l.survivors_held_before,
                     "revoked from survivors": l.revoked_from_survivors, "moved": len(l.moved),
                     "moved although owner stayed": fmt(l.moved_beyond_leaver)})
    return pd.DataFrame(rows).set_index("assignor")


def join_table(placements: Mapping[str, JoinPlacement]) -> "pd.DataFrame":
    """One row per join placement: assignor, partitioners, whether the assignment is
    co-partitioned, and for how many keys both sides share a partition number and a member."""
    import pandas as pd

    return pd.DataFrame([{"case": name, "assignor": j.assignor, "partitioner A": j.partitioner_a,
                          "partitioner B": j.partitioner_b, "A-i and B-i on one member": j.assignment.co_partitioned("A", "B"),
                          "keys": len(j.keys), "same partition": j.same_partition, "same member": j.same_member}
                         for name, j in placements.items()]).set_index("case")


# ----------------------------------------------------------------------------- cleanup


def run_names(results: Sequence[AssignmentResult | LeaveResult | JoinPlacement]) -> dict[str, set[str]]:
    """The topics and consumer groups these runs created: ``{"topics": {...}, "groups": {...}}``."""
    topics: set[str] = set()
    groups: set[str] = set()
    for r in results:
        inner = [r.before, r.after] if isinstance(r, LeaveResult) else [r.assignment] if isinstance(r, JoinPlacement) else [r]
        for x in inner:
            topics |= set(x.topic_names.values())
            groups.add(x.group_id)
    return {"topics": topics, "groups": groups}


def leftovers(results: Sequence[AssignmentResult | LeaveResult | JoinPlacement], timeout_s: float = 10.0) -> dict[str, list[str]]:
    """Topics and consumer groups of these runs that still exist on the cluster (both lists
    are empty when every run cleaned up after itself)."""
    names = run_names(results)
    topics, groups = names["topics"], names["groups"]
    a = workloads.admin()
    existing_topics = set(a.list_topics(timeout=timeout_s).topics)
    listed = a.list_consumer_groups(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    existing_groups = {g.group_id for g in listed.valid}
    return {"topics": sorted(topics & existing_topics), "groups": sorted(groups & existing_groups)}


@contextmanager
def live_group(consumers: int, topics: dict[str, int], assignor: Assignor | str = "range") -> Iterator[GroupRun]:
    """``with live_group(3, {"A": 2}) as g: g.wait_stable()``: a group to poke at in a notebook."""
    a = Assignor.parse(assignor) if isinstance(assignor, str) else assignor
    with GroupRun(consumers, topics, a) as run:
        yield run
