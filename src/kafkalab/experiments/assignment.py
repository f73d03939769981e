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
in a host worker (``groups.MemberHost``; ``GroupRun`` is a ``groups.ProgramGroup``): one process
for all the members of a call (45 groups of section 4 included), each member a thread with its
own ``lab``. A call given no program runs the saved notebook's (``notebook_programs``).

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
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence, TypeVar

from .. import admin, workloads
from ..errors import KafkalabError
from ..groups import MemberHost, ProgramGroup, produce_with_programs, topic_names  # noqa: F401  (notebooks use them here)
from ..programs import Program, from_notebook, program_settings
from ..workloads import Partition

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


#: The notebook whose member programs run when a call is given none.
NOTEBOOK = "01_partition_assignment"


def notebook_programs(labels: Sequence[str]) -> dict[str, Program]:
    """``member_programs`` of the saved notebook 01's ``member`` and ``kip848_member``
    (``programs.from_notebook``): what runs when a call is given no program.

    Raises:
        KafkalabError: an unknown label, or a program without its assignor line.
    """
    return member_programs(labels, from_notebook(NOTEBOOK, "member"), from_notebook(NOTEBOOK, "kip848_member"))


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


# ----------------------------------------------------------------------------- live groups


class GroupRun(ProgramGroup):
    """A ``groups.ProgramGroup`` for an assignor: ``assignor`` (``Assignor`` or its label; any
    text when ``program`` is given: the program decides) names the run, and a group given no
    ``program`` runs the saved notebook 01's for it (``notebook_programs``). The other
    arguments are ``ProgramGroup``'s."""

    def __init__(self, consumers: int, topics: dict[str, int], assignor: "Assignor | str",
                 run_prefix: str | None = None, static: bool = False, replication_factor: int = 1,
                 subscriptions: Sequence[Sequence[str]] | None = None, program: Program | None = None,
                 host: MemberHost | None = None, group_config: Mapping[str, str | int] | None = None,
                 options: Mapping | None = None):
        self.label = assignor if isinstance(assignor, str) else assignor.label
        super().__init__(consumers, topics, program or notebook_programs([self.label])[self.label], run_prefix,
                         static, replication_factor, subscriptions, host, group_config, options)

    def wait_stable(self, timeout_s: float = 30.0) -> AssignmentResult:
        """Wait until the group is stable (``ProgramGroup.wait_formed``); return the assignment."""
        seen, reported = self.wait_formed(timeout_s)
        members = [Member(m.client_id, *seen[m.client_id][:2], sorted(seen[m.client_id][2]))
                   for m in self.members]
        subs = None
        if self.subscriptions is not None:
            subs = {m.client_id: self.subscriptions[m.index] if m.index < len(self.subscriptions)
                    else list(self.topics) for m in self.members}
        return AssignmentResult(self.group_id, self.label, dict(self.topics), dict(self.names), members,
                                int((time.monotonic() - self.t0) * 1000), reported, subs,
                                {m.client_id: dict(self.lab_conf[m.client_id]) for m in self.members})


def run_assignment(consumers: int, topics: dict[str, int], assignor: Assignor | str = "range",
                   run_prefix: str | None = None, timeout_s: float = 30.0,
                   subscriptions: Sequence[Sequence[str]] | None = None, program: Program | None = None,
                   host: MemberHost | None = None,
                   group_config: Mapping[str, str | int] | None = None) -> AssignmentResult:
    """Start ``consumers`` members subscribed to fresh ``topics`` (given name -> partitions)
    and return the stable assignment.

    Args:
        subscriptions: for member i, the topics (given names) it subscribes to; default all.
        program: the program every member runs (``GroupRun``; None: notebook 01's for ``assignor``).
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


def _per_label(run: Callable[..., T], assignors: Sequence[str] | None, programs: Mapping[str, Program] | None,
               host: MemberHost | None, parallel: int | None) -> dict[str, T]:
    """``run(label, program, host)`` for each label (``assignors``, else those of ``programs``,
    else ``LABELS``), in parallel, all in one ``MemberHost`` (``host``, or one for this call);
    ``programs`` None: the saved notebook's (``notebook_programs``)."""
    labels = list(assignors or (programs or {}).keys() or LABELS)
    programs = programs if programs is not None else notebook_programs(labels)
    with _host_for_call(host) as h:
        return in_parallel({a: partial(run, a, programs[a], h) for a in labels}, parallel)


def compare(consumers: int, topics: dict[str, int], assignors: Sequence[str] | None = None,
            parallel: int | None = None, timeout_s: float = 30.0,
            subscriptions: Sequence[Sequence[str]] | None = None,
            programs: Mapping[str, Program] | None = None, host: MemberHost | None = None) -> dict[str, AssignmentResult]:
    """``run_assignment`` once per assignor label, in parallel (each run has its own topics
    and group). Returns label -> result, in the order given.

    Args:
        assignors: labels (default: those of ``programs``, else ``LABELS``).
        programs: label -> the program its members run (``member_programs``; None: the saved
            notebook's), all in one ``MemberHost``: ``host``, or one made for this call.
    """
    return _per_label(lambda a, program, h: run_assignment(consumers, topics, a, None, timeout_s, subscriptions,
                                                           program, h), assignors, programs, host, parallel)


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


def run_leave(consumers: int, topics: dict[str, int], assignor: Assignor | str, program: Program | None = None,
              host: MemberHost | None = None, leaver: int | str = 0, timeout_s: float = 30.0) -> LeaveResult:
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
        left = run.members[index].client_id
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
    return _per_label(partial(run_leave, consumers, topics, leaver=leaver, timeout_s=timeout_s),
                      assignors, programs, host, parallel)


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
                       n_keys: int = 24, timeout_s: float = 30.0, program: Program | None = None,
                       producer_a: Program | None = None, producer_b: Program | None = None,
                       host: MemberHost | None = None) -> JoinPlacement:
    """Two topics ``A`` and ``B`` with ``partitions`` each, a group of ``consumers`` reading
    both (``program``, as for ``run_assignment``); the producer programs ``producer_a`` and
    ``producer_b`` (role ``producer``; None: notebook 01's ``keyed_producer``) send one record
    per key ``customer-0`` ... to their topic, in the group's host, and each delivery report
    says which partition each side of each key got. The partitioners are the ones the
    programs set (``partitioner_of``).

    Raises:
        KafkalabError: a program failed or a delivery report is missing; WaitTimeout: the
            group did not stabilise in ``timeout_s``.
    """
    keys = [f"customer-{i}" for i in range(n_keys)]
    producer_a = producer_a or from_notebook(NOTEBOOK, "keyed_producer")
    producer_b = producer_b or producer_a
    with GroupRun(consumers, {"A": partitions, "B": partitions}, assignor, program=program, host=host) as run:
        result = run.wait_stable(timeout_s)
        placed = produce_with_programs(run.host, [(producer, run.names[t], [(k, f"{value}-{k}") for k in keys],
                                                   f"producer-{t}")
                                                  for t, producer, value in (("A", producer_a, "order"),
                                                                             ("B", producer_b, "payment"))], timeout_s)
    owners = result.owners()
    rows = [KeyPlacement(k, pa, pb, owners[("A", pa)], owners[("B", pb)])
            for k, (pa, _), (pb, _) in zip(keys, placed[0], placed[1])]
    return JoinPlacement(run.label, partitioner_of(producer_a), partitioner_of(producer_b), result, rows)


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
    ``programs``: assignor label -> the program its members run (None: the saved notebook's),
    all cases in one ``MemberHost`` (``host``, or one for this call).

    ``kip848_heartbeat_interval_ms`` (ms): the heartbeat interval of the KIP-848 groups (labels
    ``consumer/...``), set as their group config ``consumer.heartbeat.interval.ms``; None: the
    broker's ``group.consumer.heartbeat.interval.ms``. librdkafka 2.16 gives a
    ConsumerGroupHeartbeat request that interval as its timeout and, when it times out, sends
    the same partial request again (rdkafka_request.c, rdkafka_cgrp.c), while the coordinator
    sends an assignment only to a full request or when the member's assignment changed
    (GroupMetadataManager.consumerGroupHeartbeat). An answer slower than one interval, which
    many members in one process on a loaded machine can take, so loses a revocation or an
    assignment for good (``groups.unreconciled``, ``groups.LOST_RESPONSE_NOTE``). Kafka's default, 5000 ms,
    leaves five times the margin of the lab's 1000 ms; it is also the lowest value a group config
    may take here: the controller checks it against its own
    ``group.consumer.min.heartbeat.interval.ms`` (default 5000; 3000 was refused, measured on
    Kafka 4.4.0), not the brokers' 1000.
    """
    programs = programs if programs is not None else notebook_programs(sorted({c.assignor for c in cases}))

    def one(case: SweepCase, host: MemberHost) -> AssignmentResult:
        kip848 = case.assignor.startswith("consumer/")
        return run_assignment(case.consumers, {f"T{i}": case.partitions for i in range(case.topics)},
                              case.assignor, timeout_s=timeout_s, program=programs[case.assignor], host=host,
                              group_config={"consumer.heartbeat.interval.ms": kip848_heartbeat_interval_ms}
                              if kip848 and kip848_heartbeat_interval_ms is not None else None)

    with _host_for_call(host) as h:
        results = list(in_parallel({i: partial(one, case, h) for i, case in enumerate(cases)}, parallel).values())
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
