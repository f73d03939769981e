"""Partition assignment: which member of a consumer group reads which partition.

Runs real librdkafka consumers in a real group on fresh topics and reports the assignment
the group coordinator holds once the group is STABLE. Notebook 01 and
``kafkalab run assignment`` call the same functions.

Assignors (sources: librdkafka CONFIGURATION.md ``partition.assignment.strategy`` and
``group.remote.assignor``; KIP-429 cooperative rebalancing; KIP-848 broker-side assignment):

- classic protocol, client-side: ``range`` (per topic, contiguous ranges over members sorted
  by member id), ``roundrobin`` (all partitions of all topics dealt in turn),
  ``cooperative-sticky`` (balanced, keeps what it can, incremental rebalances).
- ``group.protocol=consumer`` (KIP-848, brokers >= 4.0, librdkafka >= 2.12 GA): the
  coordinator assigns with ``uniform`` or ``range``.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from .. import workloads
from ..errors import KafkalabError
from ..workloads import GroupMember, Partition

STRATEGIES = ("range", "roundrobin", "cooperative-sticky")
REMOTE_ASSIGNORS = ("uniform", "range")


@dataclass(frozen=True)
class Assignor:
    """A way of assigning: a classic client-side ``strategy`` or a KIP-848 ``remote_assignor``."""

    strategy: str | None = "range"
    group_protocol: str = "classic"
    remote_assignor: str | None = None

    def __post_init__(self) -> None:
        if self.group_protocol == "classic":
            if self.strategy not in STRATEGIES:
                raise KafkalabError(f"strategy must be one of {', '.join(STRATEGIES)}, not {self.strategy!r}")
        elif self.group_protocol == "consumer":
            if self.remote_assignor not in REMOTE_ASSIGNORS:
                raise KafkalabError(f"remote assignor must be one of {', '.join(REMOTE_ASSIGNORS)}, not {self.remote_assignor!r}")
        else:
            raise KafkalabError(f"group protocol must be classic or consumer, not {self.group_protocol!r}")

    @property
    def label(self) -> str:
        """``"range"``, ``"cooperative-sticky"``, ``"consumer/uniform"``..."""
        return self.strategy if self.group_protocol == "classic" else f"consumer/{self.remote_assignor}"

    @classmethod
    def parse(cls, label: str) -> "Assignor":
        """Inverse of ``label``."""
        if label.startswith("consumer/"):
            return cls(strategy=None, group_protocol="consumer", remote_assignor=label.split("/", 1)[1])
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
    """

    group_id: str
    assignor: str
    topics: dict[str, int]
    topic_names: dict[str, str]
    members: list[Member]
    elapsed_ms: int

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

    def to_json(self) -> dict:
        d = asdict(self)
        for m in d["members"]:
            m["partitions"] = [list(tp) for tp in m["partitions"]]
        return d


def topic_names(topics: dict[str, int], run_prefix: str) -> dict[str, str]:
    """Given name -> real name ``<run_prefix>-<NAME>`` (topic order, and so range and
    round-robin order, is that of the given names)."""
    return {t: f"{run_prefix}-{t}" for t in topics}


class GroupRun:
    """A live group of ``consumers`` members on fresh topics; a context manager that closes
    the members and deletes the topics on exit."""

    def __init__(self, consumers: int, topics: dict[str, int], assignor: Assignor,
                 run_prefix: str | None = None, static: bool = False, replication_factor: int = 1):
        if consumers < 1:
            raise KafkalabError("consumers must be at least 1")
        if not topics or any(n < 1 for n in topics.values()):
            raise KafkalabError(f"each topic needs at least 1 partition: {topics}")
        self.assignor = assignor
        self.topics = dict(topics)
        self.prefix = run_prefix or f"kl-{workloads.run_id()}"
        self.names = topic_names(self.topics, self.prefix)
        self.group_id = f"{self.prefix}-group"
        self.n = consumers
        self.static = static
        self.replication_factor = replication_factor
        self.members: list[GroupMember] = []
        self.t0 = time.monotonic()

    def __enter__(self) -> "GroupRun":
        workloads.create_topics({self.names[t]: n for t, n in self.topics.items()},
                                replication_factor=self.replication_factor)
        for i in range(self.n):
            self.add()
        return self

    def add(self) -> GroupMember:
        """Start one more member."""
        i = len(self.members)
        conf = workloads.consumer_config(
            self.group_id, i, strategy=self.assignor.strategy, group_protocol=self.assignor.group_protocol,
            remote_assignor=self.assignor.remote_assignor,
            group_instance_id=f"{self.prefix}-instance-{i}" if self.static else None)
        m = GroupMember(i, conf, list(self.names.values()))
        self.members.append(m)
        return m

    def remove(self, index: int) -> None:
        """Close member ``index`` cleanly (it leaves the group)."""
        m = self.members.pop(index)
        m.close()

    def wait_stable(self, timeout_s: float = 30.0) -> AssignmentResult:
        """Wait until the group is stable (see workloads.wait_group_stable); return the assignment."""
        real = {self.names[t]: n for t, n in self.topics.items()}
        assigned = workloads.wait_group_stable(self.group_id, self.members, real, timeout_s=timeout_s)
        members = []
        for m in self.members:
            s = m.snapshot()
            members.append(Member(s.client_id, s.member_id, s.group_instance_id, sorted(assigned[s.member_id])))
        return AssignmentResult(self.group_id, self.assignor.label, dict(self.topics), dict(self.names), members,
                                workloads.elapsed_ms(self.t0))

    def revoked_counts(self) -> dict[str, int]:
        """member name -> partitions revoked from it so far (every rebalance callback)."""
        return {m.state.client_id: len(m.snapshot().revoked) for m in self.members}

    def __exit__(self, *exc) -> None:
        for m in self.members:
            m.close()
        workloads.delete_topics(self.names.values())


def run_assignment(consumers: int, topics: dict[str, int], assignor: Assignor | str = "range",
                   run_prefix: str | None = None, timeout_s: float = 30.0) -> AssignmentResult:
    """Start ``consumers`` members subscribed to fresh ``topics`` (given name -> partitions)
    and return the stable assignment.

    Raises:
        KafkalabError: bad arguments; WaitTimeout: the group did not stabilise in ``timeout_s``.
    """
    a = Assignor.parse(assignor) if isinstance(assignor, str) else assignor
    with GroupRun(consumers, topics, a, run_prefix) as run:
        return run.wait_stable(timeout_s)


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

    def to_json(self) -> dict:
        return {"assignor": self.assignor, "left": self.left, "moved": [list(p) for p in self.moved],
                "revoked_from_survivors": self.revoked_from_survivors,
                "before": self.before.to_json(), "after": self.after.to_json()}


def run_leave(consumers: int, topics: dict[str, int], assignor: Assignor | str, leaver: int = 0,
              timeout_s: float = 30.0) -> LeaveResult:
    """Form a stable group, close member ``leaver`` cleanly, wait for the new stable
    assignment, and count what moved and what was revoked from the members that stayed."""
    a = Assignor.parse(assignor) if isinstance(assignor, str) else assignor
    with GroupRun(consumers, topics, a) as run:
        before = run.wait_stable(timeout_s)
        revoked_before = run.revoked_counts()
        left = run.members[leaver].state.client_id
        run.remove(leaver)
        after = run.wait_stable(timeout_s)
        revoked_after = run.revoked_counts()
    owner_before = {tp: m.name for m in before.members for tp in m.partitions}
    owner_after = {tp: m.name for m in after.members for tp in m.partitions}
    moved = sorted(tp for tp in owner_after if owner_after[tp] != owner_before.get(tp))
    revoked = sum(revoked_after[n] - revoked_before.get(n, 0) for n in revoked_after)
    return LeaveResult(a.label, before, after, left, moved, revoked)


@dataclass(frozen=True)
class SweepCase:
    consumers: int
    topics: int
    partitions: int
    assignor: str


def sweep(cases: list[SweepCase], parallel: int = 4, ledger: Path | None = None,
          timeout_s: float = 45.0) -> list[AssignmentResult]:
    """Run many assignment cases, ``parallel`` groups at a time (each its own topics and
    group). Topics are named T0, T1, ... each with ``partitions`` partitions. If ``ledger``
    is given, writes one JSON line per (case, member) for Spark (see ``sweep_rows``)."""
    def one(case: SweepCase) -> AssignmentResult:
        return run_assignment(case.consumers, {f"T{i}": case.partitions for i in range(case.topics)},
                              case.assignor, timeout_s=timeout_s)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(one, cases))
    if ledger is not None:
        ledger.parent.mkdir(parents=True, exist_ok=True)
        with open(ledger, "w") as f:
            for case, r in zip(cases, results):
                for row in sweep_rows(case, r):
                    f.write(json.dumps(row) + "\n")
    return results


def sweep_rows(case: SweepCase, result: AssignmentResult) -> Iterator[dict]:
    """One row per member: the case's parameters and how many partitions the member holds."""
    for m in result.members:
        yield {"assignor": case.assignor, "consumers": case.consumers, "topics": case.topics,
               "partitions": case.partitions, "member": m.name, "assigned": len(m.partitions),
               "group_id": result.group_id}


@contextmanager
def live_group(consumers: int, topics: dict[str, int], assignor: Assignor | str = "range") -> Iterator[GroupRun]:
    """``with live_group(3, {"A": 2}) as g: g.wait_stable()``: a group to poke at in a notebook."""
    a = Assignor.parse(assignor) if isinstance(assignor, str) else assignor
    with GroupRun(consumers, topics, a) as run:
        yield run
