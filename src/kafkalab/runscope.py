"""The run scope: what every experiment run starts from and leaves behind.

- ``require_whole_cluster()``: the precondition of every notebook (``kafkalab.require_cluster()``
  in its setup cell) and every ``kafkalab run NAME``: the cluster answers, every node is up and
  unpaused, every ISR is full. A node that is down or paused is restarted or resumed (and it
  says so); what cannot be fixed fails within ``PRECONDITION_BUDGET_S`` with the command that
  fixes it.
- ``RunScope``: unique topic and group names for one run (``<prefix>-<run id>-<name>``), and
  their cleanup. Every scope not cleaned up yet is in one registry, cleaned by
  ``cleanup_all()``, which runs at interpreter exit too (one ``atexit``): a notebook stopped
  by a failing cell still deletes its topics and groups when its kernel shuts down.

Child processes are reaped by their own handle (``kafkalab.workloads.Worker``); a scope that
starts processes registers a closer (``RunScope.on_cleanup``) that stops them before its
groups are deleted (a group with a live member cannot be deleted).

Sources: Kafka documentation 4.3, Operations > Replication (ISR) and KRaft (broker
registration and fencing); issue 12 of this project (the 10 s contract).
"""

from __future__ import annotations

import atexit
import socket
import sys
import threading
import uuid
from typing import Callable

from . import admin, cluster, config
from .cluster import ClusterStatus
from .errors import ClusterUnreachable, KafkalabError, WaitTimeout
from .waiting import wait_until

#: Seconds within which the precondition fails when it cannot make the cluster whole
#: (issue 12: "a clear error in at most 10 s"). Restoring a node may take longer: it passes.
PRECONDITION_BUDGET_S = 10.0


# ----------------------------------------------------------------------------- the precondition


def _answering_ports(bootstrap: str, timeout_s: float = 0.5) -> list[str]:
    """The ``host:port`` entries of ``bootstrap`` that accept a TCP connection now (a refused
    connection answers at once, so a cluster that is down is known in milliseconds)."""
    out = []
    for hp in bootstrap.split(","):
        host, _, port = hp.strip().rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
                out.append(hp.strip())
        except (OSError, ValueError):
            pass
    return out


def _node_name(role: str, node_id: int) -> str:
    return f"{role} {node_id}"


def _isr_gaps(bootstrap: str, timeout_s: float) -> dict[int, list[str]]:
    """Broker id -> partitions (``topic-N``) it replicates but is not in the ISR of, internal
    topics included; partitions without a leader are listed under -1."""
    md = cluster._admin(bootstrap).list_topics(timeout=timeout_s)
    gaps: dict[int, list[str]] = {}
    for t, tm in sorted(md.topics.items()):
        for p in sorted(tm.partitions.values(), key=lambda p: p.id):
            missing = set(p.replicas) - set(p.isrs)
            if p.leader < 0:
                missing.add(-1)
            for b in missing:
                gaps.setdefault(b, []).append(f"{t}-{p.id}")
    return gaps


def _same_port_plan(node_id: int) -> bool:
    """True unless the node's ``server.properties`` on disk was rendered for other ports than
    the current ``$KAFKALAB_PORT_BASE`` (then restarting it would move it onto another
    cluster's ports)."""
    c = cluster.cluster()
    if c.backend != "local":
        return True
    node = c.topology.node(node_id)
    return not node.config_path.exists() or node.config_path.read_text() == c.topology.render(node)


def require_whole_cluster(restore: bool = True, timeout_s: float = 5.0, restore_timeout_s: float = 90.0,
                          echo: Callable[[str], None] = print) -> ClusterStatus:
    """Make sure the cluster is whole before a run: it answers, every node (controllers and
    brokers) runs unpaused, all brokers are registered, every ISR is full, and every
    partition is led by its preferred replica (``cluster.balance_leaders`` elects it if not,
    and says so: a restarted broker leads nothing until then, so coordinators would move in
    the middle of the run).

    Notebooks call it as ``kafkalab.require_cluster()`` in their setup cell; the CLI calls it
    before every ``kafkalab run NAME``.

    Args:
        restore: start a node that is down and resume a paused one (``kafkalab.cluster.start``,
            ``resume``), then wait for every ISR to fill, saying what was done through ``echo``.
            False: fail instead, naming the node and ``kafkalab start N``.
        timeout_s: bound of the metadata request, and of the wait for a full ISR when no node
            had to be restored, seconds (keep it under ``PRECONDITION_BUDGET_S``).
        restore_timeout_s: bound of restarting a node and of its ISR catch-up, seconds.
        echo: where to say what was restored (``print``; the CLI writes to stderr).

    Returns:
        The ClusterStatus of the whole cluster.

    Raises:
        ClusterUnreachable: no broker answers (the message names ``kafkalab up``), or a node is
            down or paused and ``restore`` is False (it names the node and ``kafkalab start N``),
            or restoring a node failed.
        WaitTimeout: every node runs but an ISR stays short (names the broker missing from it).
    """
    bootstrap = config.bootstrap_servers()
    st = cluster.status()
    nodes = [*st.controllers.values(), *st.brokers.values()]
    # 1. the cluster answers
    if not _answering_ports(bootstrap) or not cluster.registered_brokers(bootstrap, timeout_s):
        states = ", ".join(f"{_node_name(n.role, n.node_id)} {'paused' if n.paused else 'up' if n.alive else 'down'}"
                           for n in nodes)
        raise ClusterUnreachable(
            f"no Kafka broker answered at {bootstrap}" + (f" (nodes: {states})" if any(n.alive for n in nodes) else "")
            + ". Start the cluster: `kafkalab up` (or `make lab`); see `kafkalab status`.")
    # 2. every node up and unpaused
    broken = [n for n in nodes if not n.alive or n.paused]
    if broken and not restore:
        raise ClusterUnreachable("; ".join(
            f"{_node_name(n.role, n.node_id)} is paused: resume it with `kafkalab resume {n.node_id}`" if n.paused
            else f"{_node_name(n.role, n.node_id)} is down: start it with `kafkalab start {n.node_id}`"
            for n in broken) + " (or everything at once: `kafkalab up`)")
    for n in broken:
        what = "paused" if n.paused else "down"
        if not n.paused and not _same_port_plan(n.node_id):
            raise ClusterUnreachable(
                f"{_node_name(n.role, n.node_id)} is down, and its config on disk is for another port plan than "
                f"{bootstrap} ($KAFKALAB_PORT_BASE changed?): not restarting it. With the port plan of this "
                f"cluster, start it: `kafkalab start {n.node_id}`")
        echo(f"kafkalab: {_node_name(n.role, n.node_id)} was {what}; "
             f"{'resuming' if n.paused else 'starting'} it (`kafkalab {'resume' if n.paused else 'start'} {n.node_id}`)")
        try:
            if n.paused:
                cluster.resume(n.node_id)
            else:
                cluster.start(n.node_id, timeout_s=restore_timeout_s)
        except KafkalabError as e:
            raise ClusterUnreachable(
                f"{_node_name(n.role, n.node_id)} was {what} and could not be restored: {e}\n"
                f"Start it yourself: `kafkalab start {n.node_id}` (its log: `kafkalab logs {n.node_id}`)") from None
    # 3. every broker registered and every ISR full
    wait_s = restore_timeout_s if broken else timeout_s
    gaps: dict[int, list[str]] = {}

    def whole() -> bool:
        nonlocal gaps
        ids = cluster.registered_brokers(bootstrap, timeout_s)
        gaps = {b: ["(not registered)"] for b in set(config.BROKER_IDS) - ids}
        if not gaps:
            gaps = _isr_gaps(bootstrap, timeout_s)
        return not gaps

    try:
        wait_until(whole, timeout_s=wait_s, interval_s=0.25, what="every broker registered and every ISR full")
    except WaitTimeout:
        raise WaitTimeout("; ".join(
            f"broker {b} is missing from the ISR of {len(ps)} partition(s), e.g. {', '.join(ps[:3])}"
            if b >= 0 else f"{len(ps)} partition(s) have no leader, e.g. {', '.join(ps[:3])}"
            for b, ps in sorted(gaps.items()))
            + f" after {wait_s:.0f} s. It runs but does not catch up: see `kafkalab logs N`, or restart it: "
            "`kafkalab stop N` then `kafkalab start N`.") from None
    moved = cluster.balance_leaders(bootstrap, timeout_s=wait_s)
    if moved:
        echo(f"kafkalab: {len(moved)} partition(s) were led by a broker other than their preferred replica "
             "(after a restart); elected the preferred leaders, as `kafka-leader-election "
             "--election-type preferred` would")
    if broken:
        echo("kafkalab: the cluster is whole again: every node up, every ISR full")
        st = cluster.status()
    return st


def require_for_cli() -> ClusterStatus:
    """``require_whole_cluster`` as ``kafkalab run`` calls it: what was restored is said on
    stderr, so a command's ``--json`` output on stdout stays clean."""
    return require_whole_cluster(echo=lambda message: print(message, file=sys.stderr, flush=True))


def checks_cluster_itself(callback: Callable) -> Callable:
    """Mark the callback of a ``kafkalab run`` command that checks its own arguments first and
    then calls ``require_for_cli()`` itself; the CLI calls the precondition before every other
    command's callback (``kafkalab.cli.RunGroup``). Use it as the innermost decorator."""
    callback.requires_whole_cluster = True
    return callback


# ----------------------------------------------------------------------------- unique names


_ID_LOCK = threading.Lock()
_ISSUED: set[str] = set()  # every run id this process gave out


def run_id() -> str:
    """A short unique id for one run, e.g. ``"r3f9c2a"``: prefixes topic and group names so
    runs never see each other's data. Random (24 bits), and never the same twice in one
    process: among a thousand random ids two would be equal about 3 times in 100."""
    with _ID_LOCK:
        while True:
            rid = "r" + uuid.uuid4().hex[:6]
            if rid not in _ISSUED:
                _ISSUED.add(rid)
                return rid


_LOCK = threading.Lock()
_OPEN: "list[RunScope]" = []  # every scope not (completely) cleaned up, oldest first


class RunScope:
    """Names of one run's topics and consumer groups, and their cleanup.

    ``RunScope("tour")`` names topics and groups ``tour-<run id>-<name>``
    (``unique=False``: ``<prefix>-<name>``, for a prefix the caller chose). Names made
    elsewhere are adopted with ``add_topic``/``add_group``. ``cleanup()`` runs the closers
    (``on_cleanup``, last registered first), deletes the groups (waiting while a member is
    still leaving), then the topics, and waits until the metadata no longer lists them.
    Until then the scope is in the registry that ``cleanup_all`` (and interpreter exit)
    empties. Calling ``cleanup`` twice is harmless. Thread-safe registration.
    """

    def __init__(self, prefix: str = "run", unique: bool = True):
        self.run_id = run_id()
        self.prefix = f"{prefix}-{self.run_id}" if unique else prefix
        self.topics: list[str] = []
        self.groups: list[str] = []
        self.pending_groups: list[str] = []  # groups a cleanup could not delete yet (not empty)
        self.cleaned = False
        self._closers: list[Callable[[], None]] = []
        with _LOCK:
            _OPEN.append(self)

    def name(self, name: str) -> str:
        """``<prefix>-<name>``, not remembered (e.g. a transactional.id)."""
        return f"{self.prefix}-{name}"

    def topic(self, name: str) -> str:
        """A topic name for this run, remembered for cleanup (before it is created)."""
        return self.add_topic(self.name(name))

    def group(self, name: str) -> str:
        """A consumer group id for this run, remembered for cleanup."""
        return self.add_group(self.name(name))

    def add_topic(self, topic: str) -> str:
        """Remember a topic named elsewhere for cleanup; returns it."""
        self.topics.append(topic)
        self.cleaned = False
        return topic

    def add_group(self, group_id: str) -> str:
        """Remember a consumer group named elsewhere for cleanup; returns it."""
        self.groups.append(group_id)
        self.cleaned = False
        return group_id

    def on_cleanup(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` first at cleanup (stop this run's processes, close its clients);
        closers run last registered first, and one that raises does not stop the others."""
        self._closers.append(closer)

    def cleanup(self, timeout_s: float = 30.0, group_timeout_s: float | None = None) -> list[str]:
        """Run the closers, delete this run's groups and topics, wait until the topics are
        gone from the metadata. A group still not empty after ``group_timeout_s`` (default
        ``timeout_s``; a static member stays for its ``session.timeout.ms``) is kept in
        ``pending_groups`` and the scope in the registry, for ``cleanup_all`` to retry.

        Returns:
            The topics deleted.

        Raises:
            WaitTimeout: a topic is still in the metadata after ``timeout_s``.
        """
        errors = []
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception as e:  # never leave topics behind because one closer failed
                errors.append(e)
        groups = sorted(set(self.groups) | set(self.pending_groups))
        self.pending_groups = admin.delete_groups(groups, timeout_s=timeout_s if group_timeout_s is None
                                                  else group_timeout_s) if groups else []
        topics = list(dict.fromkeys(self.topics))
        admin.delete_topics(topics, timeout_s=timeout_s)
        self.groups = list(self.pending_groups)
        self.cleaned = not self.pending_groups
        if self.cleaned:
            with _LOCK:
                if self in _OPEN:
                    _OPEN.remove(self)
        if errors:
            raise errors[0]
        return topics

    def keep(self) -> None:
        """Keep this run's topics and groups (for a look afterwards): the scope leaves the
        registry, so neither ``cleanup_all`` nor interpreter exit deletes them."""
        with _LOCK:
            if self in _OPEN:
                _OPEN.remove(self)

    def __enter__(self) -> "RunScope":
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"RunScope({self.prefix!r}, topics={len(self.topics)}, groups={len(self.groups)})"


def open_scopes() -> list[RunScope]:
    """The scopes not cleaned up yet (oldest first)."""
    with _LOCK:
        return list(_OPEN)


def cleanup_all(timeout_s: float = 15.0) -> list[str]:
    """Clean up every open scope (newest first): stop what still runs, delete topics and
    groups, retrying groups an earlier cleanup left non-empty, within ``timeout_s`` in all
    (best effort: errors are swallowed). A notebook's cleanup cell calls it; interpreter exit
    too.

    Returns:
        The consumer groups still not deleted (empty list: all clean).
    """
    import time

    deadline = time.monotonic() + timeout_s
    for scope in reversed(open_scopes()):
        left = max(0.5, deadline - time.monotonic())
        try:
            scope.cleanup(timeout_s=left)
        except Exception:
            pass
    return sorted(g for s in open_scopes() for g in s.pending_groups)


def _cleanup_at_exit() -> None:
    if open_scopes():
        try:
            cleanup_all(timeout_s=10.0)
        except Exception:  # the cluster may be gone at exit; nothing else to do
            pass


atexit.register(_cleanup_at_exit)
