"""Consumer groups whose members are client programs: one host worker process runs them all.

A ``ProgramGroup`` is a live group on fresh topics; every member runs one client program
(``kafkalab.programs``, role ``consumer``) as a thread of a ``MemberHost`` (``worker.HostSpec``),
each with its own ``lab``: a Python process per member would cost more than a whole notebook's
groups. What a member knows about itself is what its program wrote to its ledger (its
``on_assign``/``on_revoke`` callbacks through ``lab``); the coordinator's view comes from
DescribeGroups (``workloads.describe_group``). Notebook 01 (``experiments.assignment.GroupRun``)
and notebook 07 (``experiments.ordering.run_group_order``) run their members here.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Mapping, Sequence

from confluent_kafka import KafkaException

from . import admin, workloads
from . import ledger as ledgers
from .errors import KafkalabError
from .programs import Program
from .runscope import RunScope
from .waiting import wait_until
from .worker import HostSpec, ProgramSpec, lab_conf
from .workloads import Partition


def topic_names(topics: dict[str, int], run_prefix: str) -> dict[str, str]:
    """Given name -> real name ``<run_prefix>-<NAME>`` (topic order, and so range and
    round-robin order, is that of the given names)."""
    return {t: f"{run_prefix}-{t}" for t in topics}


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
    read from its ledger (``assigned``/``revoked`` events of its ``on_assign``/``on_revoke``)."""

    def __init__(self, host: MemberHost, key: str, index: int, spec: ProgramSpec):
        self.host = host
        self.key = key
        self.ledger_path = Path(spec.ledger)
        self.index = index
        self.client_id: str = spec.conf["client.id"]
        host.start(key, spec)

    def events(self) -> list[ledgers.Event]:
        """Every ledger event the program wrote so far, in order.

        Raises:
            KafkalabError: the program raised (its traceback in the message).
        """
        error = self.host.ended(self.key)
        if error:
            raise KafkalabError(f"{self.client_id}'s program failed:\n{error}")
        return ledgers.read_events(self.ledger_path, growing=True) if self.ledger_path.exists() else []

    def view(self) -> tuple[set[Partition], list[Partition]]:
        """What the member's ledger says: the partitions it holds (assigned minus revoked, in
        ledger order) and every partition revoked so far. Raises as ``events``."""
        held: set[Partition] = set()
        revoked: list[Partition] = []
        for e in self.events():
            if e.kind == "assigned":
                held.add((e.topic, e.partition))
            elif e.kind == "revoked":
                held.discard((e.topic, e.partition))
                revoked.append((e.topic, e.partition))
        return held, revoked

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
    expected = {(t, p) for t, n in topics.items() for p in range(n)}
    last: dict = {}

    def stable():
        nonlocal last
        views = {m.client_id: m.view()[0] for m in members}
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


class ProgramGroup:
    """A live group of ``consumers`` members on fresh topics, every member running ``program``
    (role ``consumer``: it subscribes to ``lab.topics`` and reports its rebalances with
    ``lab.on_assign``/``lab.on_revoke``) in ``host`` (default: a ``MemberHost`` of its own); a
    context manager that stops the members, deletes the topics and deletes the (then empty)
    group on exit. ``lab.conf`` holds only ``bootstrap.servers``, ``group.id``, ``client.id``
    (``worker.lab_conf``).

    Args:
        topics: given name -> partitions; the real names are ``topic_names`` (``names``).
        subscriptions: for member i, the given topic names it subscribes to (default: all).
        static: give each member a name for ``group.instance.id`` (KIP-345),
            ``<prefix>-instance-<i>``, which the program writes (``lab.instance_id``).
        options: every member's instruments' settings (``instruments.consumer.ConsumerOptions``);
            ``group_formed`` is set here: a file ``release`` writes (``lab.group_formed()``).
        group_config: group configs set before the topics and the members exist
            (``admin.alter_group_config``, e.g. ``{"consumer.heartbeat.interval.ms": 5000}``),
            removed at cleanup (``admin.delete_group_configs``: Kafka keeps a deleted group's configs).

    Raises:
        KafkalabError: no consumer, a topic without partitions, or subscriptions that leave a
            member or a topic out. ValueError: ``static`` with a program that does not write
            ``lab.instance_id``.
    """

    def __init__(self, consumers: int, topics: dict[str, int], program: Program, run_prefix: str | None = None,
                 static: bool = False, replication_factor: int = 1,
                 subscriptions: Sequence[Sequence[str]] | None = None, host: MemberHost | None = None,
                 group_config: Mapping[str, str | int] | None = None, options: Mapping | None = None):
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
        if static and "lab.instance_id" not in program.source:
            raise ValueError(f"static=True: program {program.name} must write its static membership itself "
                             '("group.instance.id": lab.instance_id in its settings)')
        self.subscriptions = [list(s) for s in subscriptions] if subscriptions is not None else None
        self.program = program
        self.host = host
        self.topics = dict(topics)
        self.scope = RunScope(run_prefix or "kl", unique=run_prefix is None)  # names, cleanup
        self.prefix = self.scope.prefix
        self.names = topic_names(self.topics, self.prefix)
        self.group_id = self.scope.name("group")
        self.n = consumers
        self.static = static
        self.replication_factor = replication_factor
        self.members: list[ProgramMember] = []
        self.lab_conf: dict[str, dict] = {}  # member name -> its lab.conf
        self.group_config = dict(group_config or {})
        self.options = dict(options or {})
        self.t0 = time.monotonic()

    def __enter__(self) -> "ProgramGroup":
        for t in self.names.values():
            self.scope.add_topic(t)
        self.scope.add_group(self.group_id)
        if self.host is None:
            self.host = MemberHost()
            self.scope.on_cleanup(self.host.close)  # closers run last-added first: members, then host
        self.scope.on_cleanup(self._close_members)
        try:
            if self.group_config:  # before the topics: a broker that knows them has applied it too
                self.scope.on_cleanup(lambda: admin.delete_group_configs([self.group_id]))  # Kafka keeps them
                admin.alter_group_config(self.group_id, self.group_config)
            admin.create_topics({self.names[t]: n for t, n in self.topics.items()},
                                replication_factor=self.replication_factor)
            for _ in range(self.n):
                self.add()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def add(self) -> ProgramMember:
        """Start one more member (``consumer-<i>``)."""
        i = len(self.members)
        given = self.subscriptions[i] if self.subscriptions and i < len(self.subscriptions) else list(self.topics)
        client_id = f"consumer-{i}"
        key = f"{self.group_id}.{client_id}"
        spec = ProgramSpec(name=client_id, run_id=self.group_id, ledger=str(self.host.dir / f"{key}.jsonl"),
                           role="consumer", program_name=self.program.name, source=self.program.source,
                           conf=lab_conf(client_id, self.group_id), topics=[self.names[t] for t in given],
                           options={**self.options, "group_formed": str(self._formed)},
                           instance_id=f"{self.prefix}-instance-{i}" if self.static else None)
        m = ProgramMember(self.host, key, i, spec)
        self.lab_conf[client_id] = dict(spec.conf)
        self.members.append(m)
        return m

    @property
    def _formed(self) -> Path:
        return self.host.dir / f"{self.group_id}.formed"

    def release(self) -> None:
        """Tell every member that the whole group has formed: ``lab.group_formed()`` turns True
        (a member that holds its partitions paused until then starts reading)."""
        self._formed.touch()

    def remove(self, index: int) -> None:
        """Close member ``index`` cleanly (it leaves the group)."""
        self.members.pop(index).close()

    def wait_formed(self, timeout_s: float = 30.0) -> tuple[dict[str, tuple[str, str | None, set[Partition]]], str]:
        """``wait_programs_stable`` for this group's members and topics."""
        return wait_programs_stable(self.group_id, self.members, {self.names[t]: n for t, n in self.topics.items()},
                                    timeout_s=timeout_s)

    def revoked_counts(self) -> dict[str, int]:
        """member name -> partitions revoked from it so far (every rebalance callback)."""
        return {m.client_id: len(m.view()[1]) for m in self.members}

    def _close_members(self) -> None:
        for m in self.members:
            self.host.stop(m.key)  # all at once: they leave together
        if self.members:
            self.host.wait_ended([m.key for m in self.members])
        self.members = []

    def __exit__(self, *exc) -> None:
        self.scope.cleanup()


def produce_with_programs(host: MemberHost, runs: Sequence[tuple[Program, str, Sequence[tuple[str | None, str]], str]],
                          timeout_s: float = 60.0) -> list[list[tuple[int, int]]]:
    """Run producer programs in ``host`` (role ``producer``), all started, then all awaited: each
    run is ``(program, topic, records, client_id)``, and ``lab.records()`` gives the program its
    ``records`` (``(key, value)``, values unique; the partitioner chooses; a key None reaches it
    as the text ``"None"``). Returns, per run, the ``(partition, offset)`` of each record in
    order, from the program's delivery reports (``acked`` ledger events).

    Raises:
        KafkalabError: a program failed, or a record got no delivery report without an error.
        WaitTimeout: the programs ran longer than ``timeout_s``.
    """
    started = []
    for program, topic, records, client_id in runs:
        key = f"{client_id}.{uuid.uuid4().hex[:8]}"
        path = host.dir / f"{key}.jsonl"
        host.start(key, ProgramSpec(client_id, host.run_id, str(path), "producer", program.name, program.source,
                                    conf=lab_conf(client_id), topics=[topic],
                                    options={"records": [[k, v, -1] for k, v in records]}))
        started.append((key, path))
    host.wait_ended([key for key, _ in started], timeout_s)
    out = []
    for (program, _, records, _), (key, path) in zip(runs, started):
        error = host.ended(key)
        if error:
            raise KafkalabError(f"program {program.name} failed:\n{error}")
        acked = {e.value: e for e in ledgers.read_events(path, kinds="acked")}
        bad = [v for _, v in records if v not in acked or acked[v].error]
        if bad:
            raise KafkalabError(f"program {program.name}: no delivery report without error for {len(bad)} records, "
                                f"e.g. {bad[:3]}")
        out.append([(acked[v].partition, acked[v].offset) for _, v in records])
    return out
