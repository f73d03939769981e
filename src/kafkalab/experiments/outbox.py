"""Exactly-once into a database (notebook 12, issue 38): the dual write, the transactional
outbox and the idempotent consumer, each crashed at an exact point.

A service that writes its database and produces an event cannot make the two one atomic step:
Kafka transactions (KIP-98, notebook 05) span Kafka partitions and the group's offsets, never a
database. The runs here, all with sqlite as the database:

- ``run_dual_write``: the service commits its database transaction, then produces (or the
  reverse: produces, waits for the delivery report, then commits), and dies between the two
  at its crash point (``kafkalab.instruments.outbox``: the ``crash_after``-th request). The
  first order loses its event; the second leaves an event for an order that does not exist.
- ``run_relay``: the transactional outbox. The service writes the order and its event (an
  outbox row) in one sqlite transaction; a relay reads the outbox in id order, produces with
  idempotence, and marks rows sent only after their delivery reports. The relay dies at each of
  its points; its restart sends the unmarked rows again: duplicates are possible, a lost event is not.
- ``run_consumer``: the idempotent consumer. The side effect and the event id (in a
  processed-events table, its primary key) in one sqlite transaction, the offset committed
  after. It dies at each point: nothing lost, nothing applied twice.
- ``run_end_to_end``: service, relay and consumer, each crashed once, in one pipeline.
- ``run_cost``: records/s of the plain dual write against outbox + relay, in one run.

Every count compares what a database holds with what a topic (or another database) holds,
by id: ``count`` here, and ``outbox_analysis`` the same in Spark. The programs are notebook
12's ``%%program`` cells (``notebook_program``).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import admin, coordinators, workloads
from ..errors import KafkalabError
from ..instruments.outbox import CRASH_POINTS
from ..ledger import read_events
from ..programs import Program, from_notebook
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf

#: The notebook whose ``%%program`` cells are this experiment's programs.
NOTEBOOK = "12_exactly_once_database"
#: Partitions of every topic here (the event id is the key: one order's events stay in order).
PARTITIONS = 3
#: The longest any step may take, seconds (a wait's bound, never a claim).
STEP_TIMEOUT_S = 90.0


def notebook_program(name: str) -> Program:
    """The program ``name`` of notebook 12 as saved (``dual_write``, ``produce_then_commit``,
    ``outbox_service``, ``relay``, ``idempotent_consumer``).

    Raises:
        ProgramError: the notebook or the program is missing.
    """
    return from_notebook(NOTEBOOK, name)


def make_requests(n: int) -> list[list]:
    """``n`` requests ``[order_id, amount]``: ``order-0001``... with amounts 1-97 (no randomness)."""
    return [[f"order-{i:04d}", i * 37 % 97 + 1] for i in range(1, n + 1)]


# ----------------------------------------------------------------------------- counting


@dataclass
class Counts:
    """What one side holds against what the other should: ``expected`` ids (e.g. the orders in
    the database), ``seen`` ids with repeats (e.g. the events in the topic, one per copy).

    Attributes:
        expected: distinct ids expected.
        seen: copies seen (a repeated id counts each time).
        lost: expected ids never seen, sorted.
        unexpected: seen ids that were not expected (an event for an order that does not exist), sorted.
        repeated: id -> extra copies (copies - 1) for ids seen more than once.
    """

    expected: int
    seen: int
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    repeated: dict[str, int] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        """Extra copies in all (an id seen 3 times counts 2)."""
        return sum(self.repeated.values())

    def row(self) -> dict:
        """One line of a table: expected, seen, lost, unexpected, duplicates (numbers)."""
        return {"expected": self.expected, "seen": self.seen, "lost": len(self.lost),
                "unexpected": len(self.unexpected), "duplicates": self.duplicates}


def count(expected: Iterable[str], seen: Iterable[str]) -> Counts:
    """Compare ``expected`` ids (repeats ignored) with ``seen`` ids (each copy counted): lost,
    unexpected and repeated ids (``Counts``). Pure; ``outbox_analysis.counts`` is its Spark twin.

    >>> count(["a", "b", "c"], ["a", "a", "b", "x"]).row()
    {'expected': 3, 'seen': 4, 'lost': 1, 'unexpected': 1, 'duplicates': 1}
    """
    want = set(expected)
    copies = Counter(seen)
    return Counts(len(want), sum(copies.values()), sorted(want - set(copies)), sorted(set(copies) - want),
                  {k: n - 1 for k, n in sorted(copies.items()) if n > 1})


def rest_of(requests: list[list], handed: int) -> list[list]:
    """The requests a restarted service handles: those after the ``handed`` ones its crashed run
    was handed (the caller of the request it died in got no answer and does not retry).

    Raises:
        ValueError: ``handed`` outside 0..len(requests).
    """
    if not 0 <= handed <= len(requests):
        raise ValueError(f"handed must be between 0 and {len(requests)}, not {handed}")
    return requests[handed:]


def latencies_ms(handed: dict[str, int], events: list[dict]) -> list[int]:
    """For each event id's first copy in ``events`` (``topic_events`` rows), its timestamp minus
    the time its request was handed to the service (``handed``: order id -> ms), in ms: how long
    an order waited for its event to be produced.

    >>> latencies_ms({"a": 100, "b": 100}, [{"event_id": "a", "timestamp_ms": 103},
    ...     {"event_id": "a", "timestamp_ms": 190}, {"event_id": "b", "timestamp_ms": 150}])
    [3, 50]
    """
    first: dict[str, int] = {}
    for e in sorted(events, key=lambda e: e["timestamp_ms"]):
        first.setdefault(e["event_id"], e["timestamp_ms"])
    return [first[k] - handed[k] for k in sorted(first) if k in handed]


def rate(records: int, first_ms: int, last_ms: int) -> float:
    """Records per second between two wall-clock times in ms (0 when no time passed).

    >>> rate(1000, 0, 500)
    2000.0
    """
    return records * 1000.0 / (last_ms - first_ms) if last_ms > first_ms else 0.0


# ----------------------------------------------------------------------------- reading (observing only)


def db_ids(path: str | Path, query: str) -> list[str]:
    """The first column of ``query`` on the sqlite file ``path``, read-only (an empty list when
    the file or the table does not exist yet): how the harness looks at a program's database."""
    if not Path(path).exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return [str(r[0]) for r in db.execute(query).fetchall()]
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return []
        raise
    finally:
        db.close()


def topic_events(topic: str) -> list[dict]:
    """Every record of ``topic`` as ``{partition, offset, event_id, timestamp_ms}``, from a
    librdkafka consumer with no group (``workloads.read_topic`` reads values only, so this reads
    the timestamps too)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from .. import config

    ends = admin.list_offsets([(topic, p) for p in range(PARTITIONS)])
    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": f"{topic}-reader",
                  "enable.auto.commit": False, "log_level": 3})
    out: list[dict] = []
    pos = {p: 0 for p in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

        def done() -> bool:
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error() is not None:
                    raise KafkalabError(f"reading {topic}: {m.error()}")
                out.append({"partition": m.partition(), "offset": m.offset(),
                            "event_id": json.loads(m.value())["event_id"], "timestamp_ms": m.timestamp()[1]})
                pos[m.partition()] = m.offset() + 1
            return all(pos[p] >= ends[(topic, p)] for p in range(PARTITIONS))

        wait_until(done, timeout_s=STEP_TIMEOUT_S, interval_s=0, what=f"{topic} read to its end offsets")
    finally:
        c.close()
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


# ----------------------------------------------------------------------------- the harness


class Bench:
    """One run's names, files and processes: a ``RunScope`` (topics and the consumer group,
    deleted by ``close``), a folder for its sqlite files and ledgers, and ``start``, which runs
    a program in a worker process with role ``outbox``. A context manager."""

    def __init__(self, prefix: str):
        self.scope = RunScope(prefix)
        self.dir = workloads.run_dir(self.scope.run_id)
        self.workers: list[workloads.Worker] = []
        self._n = 0

    def topic(self, name: str = "events") -> str:
        """Create a topic of ``PARTITIONS`` partitions, replication factor 3, for this run."""
        topic = self.scope.topic(name)
        admin.create_topics({topic: PARTITIONS})
        return topic

    def start(self, program: Program, topic: str, group: str | None = None, **options) -> workloads.Worker:
        """Run ``program`` in a worker process (role ``outbox``, options: ``OutboxOptions``)."""
        self._n += 1
        name = self.scope.name(f"{program.name}-{self._n}")
        ledger = self.dir / f"{program.name}-{self._n}.jsonl"
        spec = ProgramSpec(name, self.scope.run_id, str(ledger), "outbox", program.name, program.source,
                           conf=lab_conf(name, group), topics=[topic], options=options,
                           instance_id=f"{group}-member" if group else None)  # a restart is the same static member
        w = workloads.spawn(spec)
        self.workers.append(w)
        return w

    def close(self) -> None:
        """Kill what still runs, delete the run's topics (and its group, once its static
        member's session has expired: else ``runscope.cleanup_all`` deletes it later)."""
        for w in self.workers:
            if w.alive:
                w.kill()
        self.scope.cleanup(group_timeout_s=1.0)

    def __enter__(self) -> "Bench":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fail(w: workloads.Worker, what: str) -> KafkalabError:
    return KafkalabError(f"{w.name} {what} (exit code {w.returncode}); its log:\n{w.log_tail(30)}")


def crashed(w: workloads.Worker) -> None:
    """Wait until ``w`` has killed itself at its crash point (exit -9).

    Raises:
        KafkalabError: it exited otherwise (its log in the message). WaitTimeout: still running.
    """
    if w.wait(STEP_TIMEOUT_S) != -9:
        raise _fail(w, "did not die at its crash point")


def finished(w: workloads.Worker) -> None:
    """Wait until ``w`` has ended by itself with exit code 0.

    Raises:
        KafkalabError: another exit code. WaitTimeout: still running.
    """
    if w.wait(STEP_TIMEOUT_S) != 0:
        raise _fail(w, "failed")


def run_until(w: workloads.Worker, condition, what: str) -> None:
    """Wait until ``condition()`` (the program's work seen done), then stop ``w`` (SIGTERM) and
    check it ended cleanly.

    Raises:
        KafkalabError: ``w`` exited before, or not with 0. WaitTimeout: ``what`` not seen in time.
    """
    def check() -> bool:
        if not w.alive:
            raise _fail(w, f"ended before {what}")
        return condition()

    wait_until(check, timeout_s=STEP_TIMEOUT_S, interval_s=0.05, what=what)
    if w.terminate(STEP_TIMEOUT_S) != 0:
        raise _fail(w, "did not stop cleanly")


def _handed(w: workloads.Worker) -> int:
    return len(list(read_events(w.ledger, kinds="consumed")))


def serve(bench: Bench, program: Program, topic: str, db: Path, requests: list[list],
          crash_point: str | None = None, crash_after: int = 1) -> None:
    """Run the service ``program`` on ``requests``; if it has a crash point, wait for its crash
    and restart it on the requests after the one it died in (``rest_of``)."""
    w = bench.start(program, topic, db=str(db), requests=requests, crash_point=crash_point, crash_after=crash_after)
    if crash_point is None:
        return finished(w)
    crashed(w)
    finished(bench.start(program, topic, db=str(db), requests=rest_of(requests, _handed(w))))


def _has_outbox(db: Path) -> bool:
    return bool(db_ids(db, "SELECT name FROM sqlite_master WHERE name = 'outbox'"))


def _all_sent(db: Path) -> bool:
    return not db_ids(db, "SELECT id FROM outbox WHERE sent = 0") and bool(db_ids(db, "SELECT id FROM outbox"))


def relay_until_sent(bench: Bench, program: Program, topic: str, db: Path, crash_point: str | None = None,
                     crash_after: int = 1) -> None:
    """Run the relay ``program`` on ``db``'s outbox until every row is marked sent; with a crash
    point, wait for its crash first, then restart it."""
    if crash_point is not None:
        crashed(bench.start(program, topic, db=str(db), crash_point=crash_point, crash_after=crash_after))
    run_until(bench.start(program, topic, db=str(db)), lambda: _all_sent(db), f"every outbox row of {db.name} sent")


def _caught_up(group: str, topic: str) -> bool:
    ends = admin.list_offsets([(topic, p) for p in range(PARTITIONS)])
    done = coordinators.committed_offsets(group, topic)
    return all(done.get(p, 0) >= ends[(topic, p)] for p in range(PARTITIONS))


def consume_until_done(bench: Bench, program: Program, topic: str, sink: Path, crash_point: str | None = None,
                       crash_after: int = 1) -> str:
    """Run the consumer ``program`` on ``topic`` until its group has committed the end of every
    partition; with a crash point, wait for its crash first, then restart it. Returns the group."""
    group = bench.scope.group("consumer")
    if crash_point is not None:
        crashed(bench.start(program, topic, group, sink=str(sink), crash_point=crash_point, crash_after=crash_after))
    run_until(bench.start(program, topic, group, sink=str(sink)), lambda: _caught_up(group, topic),
              f"group {group} committed the end of {topic}")
    return group


# ----------------------------------------------------------------------------- the runs


@dataclass
class Outcome:
    """One crashed run, counted by id.

    Attributes:
        label: what ran (program and crash point).
        program: the program crashed.
        crash_point: where it died; crash_after: on which passage of that point.
        topic: the run's topic; db: the service's sqlite file; sink: the consumer's (or "").
        expected: ids that should have gone through (orders committed, events in the topic).
        seen: ids that did, one per copy (events in the topic, shipments in the sink).
        deliveries: for a consumer, records handed to it (``poll``), all runs together; else 0.
        counts: ``count(expected, seen)``.
    """

    label: str
    program: str
    crash_point: str
    crash_after: int
    topic: str
    db: str
    sink: str
    expected: list[str]
    seen: list[str]
    deliveries: int = 0
    counts: Counts | None = None

    def __post_init__(self) -> None:
        self.counts = count(self.expected, self.seen)

    def row(self) -> dict:
        """One line of a table: the run, its crash point and passage, then ``Counts.row()``."""
        return {"run": self.label, "crash point": self.crash_point, "crash on": self.crash_after} | self.counts.row()

    def to_json(self) -> dict:
        """The outcome as JSON-ready dicts and lists (``kafkalab run outbox --json``)."""
        return asdict(self) | {"counts": self.counts.row()}


def _check_point(point: str) -> None:
    if point not in CRASH_POINTS:
        raise ValueError(f"crash point must be one of {', '.join(CRASH_POINTS)}, not {point!r}")


def run_dual_write(program: Program, crash_point: str, requests: int = 60, crash_after: int = 30) -> Outcome:
    """The dual write: the service ``program`` (``dual_write`` or ``produce_then_commit``) on
    ``requests`` orders, killed at ``crash_point`` in its ``crash_after``-th request, restarted
    on the rest. Expected: the orders in its database; seen: the events in its topic.

    Raises:
        ValueError: unknown crash point. KafkalabError, WaitTimeout: a program failed or hung.
    """
    _check_point(crash_point)
    with Bench(f"dual-{program.name}") as b:
        topic, db = b.topic(), b.dir / "service.db"
        serve(b, program, topic, db, make_requests(requests), crash_point, crash_after)
        events = [e["event_id"] for e in topic_events(topic)]
        return Outcome(f"{program.name} @ {crash_point}", program.name, crash_point, crash_after, topic, str(db), "",
                       db_ids(db, "SELECT order_id FROM orders"), events)


def run_relay(service: Program, relay: Program, crash_point: str, requests: int = 60,
              crash_after: int = 2) -> Outcome:
    """The outbox relay: ``service`` writes ``requests`` orders and their outbox rows (no
    crash), then ``relay`` sends them, killed at ``crash_point`` on its ``crash_after``-th
    passage, and restarted until every row is sent. Expected: the outbox's event ids; seen: the
    events in the topic.

    Raises:
        ValueError, KafkalabError, WaitTimeout: as ``run_dual_write``.
    """
    _check_point(crash_point)
    with Bench(f"relay-{relay.name}") as b:
        topic, db = b.topic(), b.dir / "service.db"
        serve(b, service, topic, db, make_requests(requests))
        relay_until_sent(b, relay, topic, db, crash_point, crash_after)
        events = [e["event_id"] for e in topic_events(topic)]
        return Outcome(f"{relay.name} @ {crash_point}", relay.name, crash_point, crash_after, topic, str(db), "",
                       db_ids(db, "SELECT event_id FROM outbox"), events)


def _event(order_id: str, amount: int) -> bytes:
    return json.dumps({"event_id": order_id, "order_id": order_id, "amount": amount}).encode()


def run_consumer(program: Program, crash_point: str, events: int = 60, crash_after: int = 30) -> Outcome:
    """The idempotent consumer: ``events`` order events produced by the harness, then the
    consumer ``program``, killed at ``crash_point`` on its ``crash_after``-th record, restarted
    until its group has committed the end. Expected: the event ids; seen: the shipments (the
    side effect) in its sink, one per row.

    Raises:
        ValueError, KafkalabError, WaitTimeout: as ``run_dual_write``.
    """
    _check_point(crash_point)
    with Bench(f"consumer-{program.name}") as b:
        topic, sink = b.topic(), b.dir / "sink.db"
        reqs = make_requests(events)
        workloads.produce(topic, [(o.encode(), _event(o, a)) for o, a in reqs], conf={"enable.idempotence": True})
        consume_until_done(b, program, topic, sink, crash_point, crash_after)
        return Outcome(f"{program.name} @ {crash_point}", program.name, crash_point, crash_after, topic, "", str(sink),
                       [o for o, _ in reqs], db_ids(sink, "SELECT order_id FROM shipments"),
                       deliveries=sum(_consumed(w) for w in b.workers))


def _consumed(w: workloads.Worker) -> int:
    return len(list(read_events(w.ledger, kinds="consumed")))


@dataclass
class EndToEnd:
    """Service, relay and consumer in one pipeline, each crashed once (``crashes``: program ->
    [crash point, crash on]). ``orders``: the orders committed; ``events``: the event ids in the
    topic, one per copy; ``shipments``: the sink's side effects, one per row; ``deliveries``:
    records handed to the consumer. ``topic_counts``: orders against events (lost events,
    duplicates the relay sent); ``applied``: orders against shipments (lost, applied twice)."""

    crashes: dict[str, list]
    orders: list[str]
    events: list[str]
    shipments: list[str]
    deliveries: int
    topic_counts: Counts | None = None
    applied: Counts | None = None

    def __post_init__(self) -> None:
        self.topic_counts = count(self.orders, self.events)
        self.applied = count(self.orders, self.shipments)

    def to_json(self) -> dict:
        """The run as JSON-ready dicts and lists (``kafkalab run outbox --json``)."""
        return asdict(self) | {"topic_counts": self.topic_counts.row(), "applied": self.applied.row()}


#: The crash of each program in ``run_end_to_end`` by default: [crash point, on which passage].
END_TO_END_CRASHES = {"service": ["after-db-commit", 30], "relay": ["after-delivery", 2],
                      "consumer": ["after-db-commit", 30]}


def run_end_to_end(service: Program, relay: Program, consumer: Program, requests: int = 60,
                   crashes: dict[str, list] | None = None) -> EndToEnd:
    """The outbox pipeline with every program crashed once (``crashes``, default
    ``END_TO_END_CRASHES``): the service on ``requests`` orders, then the relay until every row
    is sent, then the consumer until its group has committed the end; each restarted after its
    crash.

    Raises:
        ValueError, KafkalabError, WaitTimeout: as ``run_dual_write``.
    """
    crashes = crashes or END_TO_END_CRASHES
    for point, _ in crashes.values():
        _check_point(point)
    with Bench("outbox-e2e") as b:
        topic, db, sink = b.topic(), b.dir / "service.db", b.dir / "sink.db"
        serve(b, service, topic, db, make_requests(requests), *crashes["service"])
        relay_until_sent(b, relay, topic, db, *crashes["relay"])
        n_relay = len(b.workers)
        consume_until_done(b, consumer, topic, sink, *crashes["consumer"])
        return EndToEnd(crashes, db_ids(db, "SELECT order_id FROM orders"),
                        [e["event_id"] for e in topic_events(topic)],
                        db_ids(sink, "SELECT order_id FROM shipments"),
                        sum(_consumed(w) for w in b.workers[n_relay:]))


@dataclass
class Cost:
    """``run_cost``: the same ``requests`` through the plain dual write and through outbox +
    relay, one after the other, no crash. Rates in records/s, from the first request handed to
    the service (its ledger) to the last event's timestamp in the topic (CreateTime, set by
    the producer as it produces). ``service_only``: outbox service alone (first to last request
    handed over, the database work without Kafka). ``*_latency_ms``: the median, over the orders,
    of the time from a request handed to the service to its event's timestamp (``latencies_ms``)."""

    requests: int
    dual_write: float
    outbox: float
    service_only: float
    dual_write_events: int
    outbox_events: int
    dual_write_latency_ms: float = 0.0
    outbox_latency_ms: float = 0.0

    @property
    def ratio(self) -> float:
        """Outbox + relay records/s over the dual write's (measured in the same run)."""
        return self.outbox / self.dual_write if self.dual_write else 0.0

    def to_json(self) -> dict:
        """The rates (records/s) and counts, with ``ratio``, JSON-ready."""
        return asdict(self) | {"ratio": self.ratio}


def _handed_ms(w: workloads.Worker) -> list[int]:
    return [e.ts_ms for e in read_events(w.ledger, kinds="consumed")]


def _median_latency(w: workloads.Worker, events: list[dict]) -> float:
    import statistics

    handed = {e.value: e.ts_ms for e in read_events(w.ledger, kinds="consumed")}
    return float(statistics.median(latencies_ms(handed, events)))


def run_cost(dual_write: Program, service: Program, relay: Program, requests: int = 500) -> Cost:
    """Records/s of the plain dual write against the outbox with its relay (started together),
    on the same ``requests`` orders, one after the other in one run (``Cost``).

    Raises:
        KafkalabError, WaitTimeout: a program failed or hung.
    """
    reqs = make_requests(requests)
    with Bench("cost-dual") as b:
        topic, db = b.topic(), b.dir / "service.db"
        serve(b, dual_write, topic, db, reqs)
        first = _handed_ms(b.workers[0])[0]
        dual = topic_events(topic)
        dual_rate = rate(len(dual), first, max(e["timestamp_ms"] for e in dual))
        dual_latency = _median_latency(b.workers[0], dual)
    with Bench("cost-outbox") as b:
        topic, db = b.topic(), b.dir / "service.db"
        service_w = b.start(service, topic, db=str(db), requests=reqs)
        wait_until(lambda: _has_outbox(db) or not service_w.alive, timeout_s=STEP_TIMEOUT_S, interval_s=0.01,
                   what=f"the outbox table in {db.name}")
        relay_w = b.start(relay, topic, db=str(db))   # the relay sends while the service writes
        finished(service_w)
        handed = _handed_ms(service_w)
        run_until(relay_w, lambda: _all_sent(db), f"every outbox row of {db.name} sent")
        out = topic_events(topic)
        out_rate = rate(len(out), handed[0], max(e["timestamp_ms"] for e in out))
        service_rate = rate(len(handed) - 1, handed[0], handed[-1])
        out_latency = _median_latency(service_w, out)
    return Cost(requests, dual_rate, out_rate, service_rate, len(dual), len(out), dual_latency, out_latency)


# ----------------------------------------------------------------------------- all of it, and the CLI


#: The crash table of notebook 12: (part, program, crash point, crash on which passage).
CRASH_TABLE = (
    ("dual write", "dual_write", "after-db-commit", 30),
    ("dual write", "produce_then_commit", "after-produce", 30),
    ("relay", "relay", "after-produce", 30),
    ("relay", "relay", "after-delivery", 2),
    ("relay", "relay", "after-mark", 2),
    ("consumer", "idempotent_consumer", "before-db-commit", 30),
    ("consumer", "idempotent_consumer", "after-db-commit", 30),
    ("consumer", "idempotent_consumer", "after-offset-commit", 30),
)


def run_crash(progs: dict[str, Program], part: str, name: str, point: str, after: int, requests: int = 60) -> Outcome:
    """One line of ``CRASH_TABLE`` with the programs ``progs`` (name -> Program), on ``requests``
    orders (events, for the consumer)."""
    if part == "dual write":
        return run_dual_write(progs[name], point, requests, crash_after=after)
    if part == "relay":
        return run_relay(progs["outbox_service"], progs[name], point, requests, crash_after=after)
    return run_consumer(progs[name], point, requests, crash_after=after)


#: The programs of notebook 12 this experiment runs.
PROGRAMS = ("dual_write", "produce_then_commit", "outbox_service", "relay", "idempotent_consumer")


import click  # noqa: E402  (the CLI's own imports)

from ..clickutil import show_programs, shows_programs  # noqa: E402


@click.command("outbox")
@click.option("--messages", type=click.IntRange(41, 10000), default=60, show_default=True,
              help="Orders per run (each crash comes on the 30th order, or in the 2nd batch of 20).")
@click.option("--no-cost", "no_cost", is_flag=True,
              help="Skip the cost: records/s of the dual write against outbox + relay (500 requests).")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print every result as JSON.")
def cli_command(messages: int, no_cost: bool, as_json: bool) -> None:
    """Notebook 12: the dual write, the outbox relay and the idempotent consumer, each crashed at
    each point; the pipeline with all three crashed; the cost. Runs notebook 12's programs as saved."""
    progs = {name: notebook_program(name) for name in PROGRAMS}
    show_programs(*progs.values())
    crashes = [run_crash(progs, *line, requests=messages) for line in CRASH_TABLE]
    e2e = run_end_to_end(progs["outbox_service"], progs["relay"], progs["idempotent_consumer"], requests=messages)
    spent = run_cost(progs["dual_write"], progs["outbox_service"], progs["relay"]) if not no_cost else None
    if as_json:
        click.echo(json.dumps({"crashes": [o.to_json() for o in crashes], "end_to_end": e2e.to_json(),
                               "cost": spent.to_json() if spent else None}, indent=2))
        return
    for o in crashes:
        c = o.counts.row()
        click.echo(f"{o.label} (on passage {o.crash_after}): expected {c['expected']}, seen {c['seen']}, "
                   f"lost {c['lost']}, unexpected {c['unexpected']}, duplicates {c['duplicates']}")
    t, a = e2e.topic_counts.row(), e2e.applied.row()
    click.echo(f"end to end, each program crashed once: {t['expected']} orders, {t['seen']} events "
               f"({t['duplicates']} duplicates, {t['lost']} lost), {a['seen']} shipments "
               f"({a['lost']} lost, {a['duplicates']} applied twice)")
    if spent:
        click.echo(f"cost: dual write {spent.dual_write:.0f} records/s, outbox + relay {spent.outbox:.0f} records/s "
                   f"({spent.ratio:.2f}x), the outbox service alone {spent.service_only:.0f} requests/s; median "
                   f"latency from request to event {spent.dual_write_latency_ms:.0f} ms (dual write), "
                   f"{spent.outbox_latency_ms:.0f} ms (outbox)")
