"""Notebook 07: ordering. Within a partition yes, across partitions no; keys, partitioners,
retries and ``max.in.flight.requests.per.connection``.

Experiments (each one function returning a result object that is also JSON):

========================  ==================================================================
``run_group_order``       ``kafkalab run ordering --partitions P --consumers C --keys K
                          --messages N``: one producer numbers N records, P partitions, C
                          consumers in one group; inversions globally, per key, per partition
``run_retry_reorder``     ``kafkalab run ordering --retry-reorder --idempotence on|off
                          --max-in-flight M --messages N``: the fault proxy drops the first
                          Produce request; does the retry land after later records?
``run_partitioners``      the same keys from librdkafka (default and ``murmur2_random``) and
                          from Kafka's Java console producer: which partition each lands in
``run_unkeyed``           records without a key from librdkafka (sticky, sticky off) and the
                          Java console producer: which partition each lands in, in send order
``run_add_partitions``    the same keys before and after growing a topic; shrinking is refused
``run_throughput``        records/s of the timed producer programs (shown, never asserted)
========================  ==================================================================

The producers are the notebook's ``%%program`` cells (``kafkalab.programs``), run as they are in
worker processes (``worker.ProgramSpec``; role ``producer``, ``gated`` for the retry
programs, ``kafkalab.instruments.armed``, or ``measuring`` for the timed producers of the cost
table): every setting that decides where a record goes or
whether a retry can be overtaken (``partitioner``, ``sticky.partitioning.linger.ms``,
``enable.idempotence``, ``max.in.flight.requests.per.connection``) is written in the program.
The consumers of ``run_group_order`` are the notebook's ``group_reader``, run as group
members in one host worker (``groups.ProgramGroup``). ``kafkalab run ordering`` reads the same
cells (``programs.from_notebook``).

How the anomalies are made certain rather than likely:

- *Global order across partitions.* The N records are in the log before any consumer reads:
  each member (``group_reader``) pauses its partitions in its ``on_assign`` callback, and all
  resume together once the harness saw the group stable (``lab.group_formed()``). A ``consume()`` call then returns several records of one
  partition in a row, with records of other partitions between them in producer order, so
  the merged order cannot be sorted (``ordering_analysis.interleaving_witness`` is the proof).
- *Retries.* ``kafkalab.faults.FaultProxy`` swallows exactly one Produce request (the first
  after a warm-up record); every record travels in its own request (``batch.num.messages=1``).
  The producer waits ``socket.timeout.ms`` (2000 ms here) for an answer that never comes, then
  retries, while the requests behind it were already appended.

Sources: Kafka documentation, Introduction ("Kafka only provides a total order over records
within a partition") and Producer Configs (``max.in.flight.requests.per.connection``: "if
set to more than 1 and enable.idempotence is set to false, there is a risk of message
reordering after a failed send due to retries"); KIP-98 (idempotent producer, sequence
numbers); librdkafka CONFIGURATION.md v2.16 (``max.in.flight`` default 1000000,
``enable.idempotence`` false, ``partitioner`` consistent_random, ``batch.num.messages``,
``socket.timeout.ms``); Java ``ProducerConfig`` 4.3 (``max.in.flight.requests.per.connection``
5, ``enable.idempotence`` true) and ``BuiltInPartitioner.partitionForKey`` (murmur2).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import click

from .. import admin, cluster, defaults, producers, workloads
from ..errors import KafkalabError
from ..faults import FaultProxy, Rule
from ..groups import MemberHost, ProgramGroup, produce_with_programs
from ..instruments import fault_gate
from ..ledger import Event, now_ms, read_events
from ..programs import Program, from_notebook
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf
from .ordering_analysis import Consumed, InversionCounts, count_inversions, interleaving_witness

if TYPE_CHECKING:
    import pandas as pd


#: The notebook whose ``%%program`` cells this family runs.
NOTEBOOK = "07_ordering"


def notebook_program(name: str) -> Program:
    """The program ``name`` of notebook 07, as saved (``programs.from_notebook``)."""
    return from_notebook(NOTEBOOK, name)


def spawn_producer(program: Program, topic: str, records: Iterable[tuple[str | None, str, int]], client_id: str,
                   run_id: str, bootstrap: str | None = None, role: str = "producer",
                   options: dict | None = None) -> workloads.Worker:
    """Start the producer ``program`` in a worker process: ``lab.records()`` gives it
    ``records`` as ``(key, value, partition)`` (partition -1: the partitioner chooses; a key
    None reaches the program as the text ``"None"``, so a program that sends no key ignores
    it). ``lab.conf`` is ``bootstrap.servers`` (``bootstrap``, default the CLIENT listeners) and
    ``client.id``: nothing that changes what happens."""
    ledger = workloads.run_dir(run_id) / f"{client_id}.jsonl"
    conf = lab_conf(client_id, bootstrap_servers=bootstrap)
    opts = {"records": [[k, v, p] for k, v, p in records], **(options or {})}
    return workloads.spawn(ProgramSpec(client_id, run_id, str(ledger), role, program.name, program.source,
                                       conf=conf, topics=[topic], options=opts))


def finish_producer(child: workloads.Worker, timeout_s: float) -> dict[str, tuple[int, int]]:
    """Wait for a producer program to end; value -> ``(partition, offset)`` of every delivery
    report it wrote (``lab.delivered``).

    Raises:
        KafkalabError: the program failed, or a delivery report carries an error.
        WaitTimeout: it ran longer than ``timeout_s``.
    """
    if child.wait(timeout_s) != 0:
        raise KafkalabError(f"program {child.spec.program_name} exited {child.returncode}:\n{child.log_tail()}")
    out: dict[str, tuple[int, int]] = {}
    for e in read_events(child.ledger):
        if e.kind == "acked":
            if e.error is not None:
                raise KafkalabError(f"program {child.spec.program_name}: a delivery report failed: {e.error}")
            out[e.value] = (e.partition, e.offset)
    return out


def produce_together(runs: list[tuple[Program, list[tuple[str | None, str]], str]], topic: str,
                     timeout_s: float = 60.0) -> list[list[tuple[int, int]]]:
    """Run each ``(program, records, client_id)`` to ``topic`` in one host worker of its own
    (``groups.produce_with_programs``: all started, then each awaited; where one producer's
    records land does not depend on the others). One list of ``(partition, offset)`` per run.

    Raises:
        KafkalabError: a program failed, or a record got no successful delivery report.
    """
    with MemberHost("producers") as host:
        return produce_with_programs(host, [(prog, topic, records, cid) for prog, records, cid in runs], timeout_s)


def key_of(seq: int, keys: int) -> str | None:
    """Key of record ``seq`` when the producer cycles through ``keys`` keys: ``"k<seq % keys>"``,
    or None when ``keys`` is 0 (no key)."""
    return f"k{seq % keys}" if keys > 0 else None


# ----------------------------------------------------------------------------- the proxy


def start_proxy(timeout_s: float = 120.0) -> FaultProxy:
    """Start a ``FaultProxy`` on the proxy ports, waiting while another process holds them
    (another notebook's or a terminal's proxy: the ports are shared by the whole machine).

    Raises:
        WaitTimeout: the ports stayed taken for ``timeout_s`` (the message names the owner).
    """
    from ..errors import PortInUse

    last: list[str] = []

    def started() -> FaultProxy | None:
        try:
            return FaultProxy().start()
        except PortInUse as e:
            last[:] = [str(e)]
            return None

    return wait_until(started, timeout_s=timeout_s, interval_s=1.0, what="the fault proxy ports 9096/9196/9296 free",
                      on_timeout=lambda: "; ".join(last))


# ----------------------------------------------------------------------------- article 000: a group


@dataclass
class GroupOrderResult:
    """What ``run_group_order`` saw.

    Attributes:
        partitions, consumers, keys, messages: the experiment's shape (keys 0: no key).
        reader: the name of the members' program.
        partitions_used: partitions that received at least one record.
        active_consumers: members that received at least one record.
        records_per_consumer: ``client.id`` -> records received.
        consumed: records handed to the application (equal to ``messages``: each once).
        redelivered: records received more than once (0 unless a rebalance happened).
        global_inversions, per_key_inversions, per_partition_inversions: ``InversionCounts``.
        witness: ``interleaving_witness`` ``(a, b, c)`` or None.
        consume_ms: from releasing the members to the last record received, ms.
        records: every record received (``Consumed``), not in the JSON.
    """

    topic: str
    group: str
    partitions: int
    consumers: int
    keys: int
    messages: int
    reader: str
    partitions_used: int
    active_consumers: int
    records_per_consumer: dict[str, int]
    consumed: int
    redelivered: int
    global_inversions: int
    per_key_inversions: int
    per_partition_inversions: int
    witness: tuple[int, int, int] | None
    consume_ms: int
    elapsed_ms: int
    records: list[Consumed] = field(default_factory=list, repr=False)

    @property
    def counts(self) -> InversionCounts:
        return InversionCounts(self.global_inversions, self.per_key_inversions, self.per_partition_inversions)

    def to_json(self) -> dict:
        """Every field but ``records``."""
        return {k: v for k, v in asdict(self).items() if k != "records"}


def received(events: Iterable[Event]) -> list[Consumed]:
    """The records a group's members recorded (``consumed`` events without an error, from
    every member's ledger), in the order they were handed over: by the moment the ``consume()``
    call returned them (``lab.consumed`` gives one ``ts_ms`` to a call's records), then member,
    then ledger order. Records of one call share a ``batch``; ``seq`` is the record's value."""
    got = sorted((e for e in events if e.kind == "consumed" and e.error is None),
                 key=lambda e: (e.ts_ms, e.client_id, e.seq))
    out: list[Consumed] = []
    batch, last = -1, None
    for i, e in enumerate(got):
        if (e.client_id, e.ts_ms) != last:
            batch, last = batch + 1, (e.client_id, e.ts_ms)
        out.append(Consumed(int(e.value), e.key, e.partition, e.offset, e.client_id, i, batch))
    return out


def run_group_order(program: Program, partitions: int, consumers: int, keys: int, messages: int,
                    reader: Program | None = None, timeout_s: float = 60.0) -> GroupOrderResult:
    """Article 000's experiment: the producer ``program`` (notebook 07's ``keyed_producer``:
    librdkafka's default partitioner, idempotent so that a retry on a loaded machine cannot
    reorder a partition; section 4 of notebook 07 shows how a plain producer's retry does; a
    clean-clone run on 2026-11-25 saw a per-key inversion with a plain one) sends ``messages``
    records numbered 0..N-1 (the value is the number; key ``k<n % keys>``; with ``keys`` 0 the
    program must send no key, e.g. ``keyed_producer`` with ``key=key, `` removed) to a fresh
    topic of ``partitions`` partitions; ``consumers`` members of one group run ``reader``
    (notebook 07's ``group_reader``, the default: range, each member holds its partitions
    paused until ``lab.group_formed()``) in one host worker (``groups.ProgramGroup``). Once
    the coordinator reports the group stable, the harness releases them all together
    (``ProgramGroup.release``); inversions (``ordering_analysis``) are counted over what their
    ledgers recorded (``received``).

    Args:
        partitions: partitions of the topic, >= 1.
        consumers: members of the group, >= 1.
        keys: distinct keys, cycled (0: records without a key, spread by librdkafka).
        messages: records, >= 2.
        timeout_s: for the group to form and for all records to arrive, each.

    Returns:
        GroupOrderResult (topic and group deleted).

    Raises:
        KafkalabError: bad arguments, a program failed, or a record was not delivered.
        WaitTimeout: the group did not stabilise, or records were missing after ``timeout_s``.
    """
    if partitions < 1 or consumers < 1 or keys < 0 or messages < 2:
        raise KafkalabError(f"need partitions >= 1, consumers >= 1, keys >= 0, messages >= 2; got "
                            f"{partitions}, {consumers}, {keys}, {messages}")
    t_start = time.monotonic()
    reader = reader or notebook_program("group_reader")
    with ProgramGroup(consumers, {"seq": partitions}, reader) as run:
        topic = run.names["seq"]
        placed = produce_together([(program, [(key_of(i, keys), str(i)) for i in range(messages)], "seq-producer")],
                                  topic, timeout_s)[0]
        run.wait_formed(timeout_s)
        t_go = now_ms()
        run.release()
        records: list[Consumed] = []

        def all_in() -> bool:
            records[:] = received(e for m in run.members for e in m.events())
            return len({(r.partition, r.offset) for r in records}) >= messages

        wait_until(all_in, timeout_s=timeout_s, interval_s=0.05, what=f"{messages} records received by group {run.group_id}",
                   on_timeout=lambda: f"received {len(records)}")
        consume_ms = max(e.ts_ms for m in run.members for e in m.events() if e.kind == "consumed") - t_go
    counts = count_inversions(records)
    positions = Counter((r.partition, r.offset) for r in records)
    per_consumer = Counter(r.consumer for r in records)
    return GroupOrderResult(
        topic=topic, group=run.group_id, partitions=partitions, consumers=consumers, keys=keys, messages=messages,
        reader=reader.name, partitions_used=len({p for p, _ in placed}), active_consumers=len(per_consumer),
        records_per_consumer={f"consumer-{i}": per_consumer.get(f"consumer-{i}", 0) for i in range(consumers)},
        consumed=len(records), redelivered=sum(n - 1 for n in positions.values()),
        witness=interleaving_witness(records), consume_ms=consume_ms,
        elapsed_ms=int((time.monotonic() - t_start) * 1000), records=records, **counts.to_json())


# ----------------------------------------------------------------------------- article 003: retries


@dataclass
class RetryReorderResult:
    """What ``run_retry_reorder`` saw (the warm-up record is left out of every count).

    Attributes:
        program: the name of the producer program that ran (its settings are in its source).
        messages: records numbered 0..N-1, each in its own Produce request.
        dropped_requests: Produce requests the proxy swallowed (1).
        max_in_flight_seen: most Produce requests of this producer awaiting an answer on one
            connection at once, as the proxy counted them.
        out_of_order_answers: answers ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (the broker refusing a
            sequence gap: idempotence at work).
        producer_epochs: producer epochs in the requests (-1 without idempotence).
        log_order: sequence numbers in offset order.
        duplicates: extra copies in the log.
        global/per_key/per_partition_inversions: ``InversionCounts`` (one partition, one key,
            read in offset order: the three are equal).
        elapsed_ms: from the first record produced to the last delivery report.
        exchanges: the Produce requests and answers of this producer (dicts), for a table.
    """

    topic: str
    program: str
    messages: int
    dropped_requests: int
    max_in_flight_seen: int
    out_of_order_answers: int
    producer_epochs: list[int]
    log_order: list[int]
    duplicates: int
    global_inversions: int
    per_key_inversions: int
    per_partition_inversions: int
    elapsed_ms: int
    client_id: str
    exchanges: list[dict] = field(default_factory=list, repr=False)
    records: list[Consumed] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        """The program's name: the run's label in tables and plots."""
        return self.program

    @property
    def counts(self) -> InversionCounts:
        return InversionCounts(self.global_inversions, self.per_key_inversions, self.per_partition_inversions)

    def to_json(self) -> dict:
        """Every field but ``exchanges`` and ``records``."""
        return {k: v for k, v in asdict(self).items() if k not in ("exchanges", "records")}

    def exchanges_table(self) -> "pd.DataFrame":
        """The proxy's view of the Produce requests and answers, oldest first."""
        import pandas as pd

        return pd.DataFrame(self.exchanges)


#: The warm-up record's value: sent and acknowledged before the proxy rule exists, so the
#: connection, the metadata and (idempotent) the producer id and the broker's sequence state
#: for the partition are in place when the dropped request comes.
WARM_UP = "warm-up"


def run_retry_reorder(program: Program, messages: int = 10, proxy: FaultProxy | None = None,
                      timeout_s: float = 60.0) -> RetryReorderResult:
    """Article 003's reordering, made to happen: the producer ``program`` (a notebook 07 retry
    program, role ``gated``: ``linger.ms=0``, ``batch.num.messages=1`` so each record is
    its own Produce request, ``socket.timeout.ms`` 2000 ms) sends a warm-up record, calls
    ``lab.wait_for_fault()``, then sends records 0..N-1 (``lab.records()``) to a one-partition topic,
    all with key ``k``, through the fault proxy. Once the warm-up is acknowledged the harness
    adds the proxy's rule, which swallows the request carrying record 0: the broker never sees
    it and nothing answers. What follows depends on the program's settings:

    - idempotence off, more than one in flight: records 1..N-1 go out behind it and are
      appended; after ``socket.timeout.ms`` the client retries record 0, which lands last.
    - ``max.in.flight=1``: nothing goes out until record 0's retry is answered.
    - idempotence on (up to 5 in flight): the broker refuses records 1.. with
      ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (a gap after the warm-up's sequence); librdkafka
      resends them after record 0.

    Args:
        program: the producer program (``%%program`` cell), run as it is.
        messages: N, >= 2.
        proxy: a running ``FaultProxy`` (default: one started and stopped here).
        timeout_s: for the delivery reports and for reading the topic back.

    Returns:
        RetryReorderResult (topic deleted).

    Raises:
        KafkalabError: bad arguments, librdkafka refused the settings (``max.in.flight`` above
            5 with idempotence), or records were not delivered in ``timeout_s``.
    """
    if messages < 2:
        raise KafkalabError(f"--messages must be >= 2 (one to drop, one to overtake it), not {messages}")
    own = proxy is None
    if own:
        proxy = start_proxy()
    run = RunScope("reorder")
    rule = None
    child = None
    try:
        topic = run.topic("t")
        admin.create_topics({topic: 1})
        cid = f"{run.run_id}-{program.name}"
        folder = workloads.run_dir(run.run_id)
        ledger = folder / f"{cid}.jsonl"
        ready, go = fault_gate.ready_path(ledger), fault_gate.go_path(ledger)
        child = spawn_producer(program, topic, [("k", str(i), 0) for i in range(messages)], cid, run.run_id,
                               bootstrap=proxy.bootstrap_servers, role="gated")

        def warmed_up() -> bool:
            if not child.alive and not ready.exists():
                raise KafkalabError(f"program {program.name} exited {child.returncode} before its warm-up was "
                                    f"acknowledged:\n{child.log_tail()}")
            return ready.exists()

        wait_until(warmed_up, timeout_s=timeout_s, interval_s=0.01, what=f"{cid}: the warm-up record acknowledged")
        rule = proxy.add_rule(Rule("drop_request", "Produce", client_id=cid, times=1))
        t0 = time.monotonic()
        go.touch()
        reports = finish_producer(child, timeout_s)
        elapsed_ms = int((time.monotonic() - t0) * 1000)
        if len(reports) != messages:
            raise KafkalabError(f"{cid}: {len(reports)} of {messages} records acknowledged")
        log = [c for c in workloads.read_topic(topic, 1, timeout_s=timeout_s) if c.value != WARM_UP]
        records = [Consumed(int(c.value), "k", c.partition, c.offset, "reader", i) for i, c in enumerate(log)]
        counts = count_inversions(records)
        events = proxy.events(api="Produce", client_id=cid)
        requests = [e for e in events if e.kind == "request"]
        exchanges = []
        for e in events:
            row: dict[str, Any] = {"t_ms": round(e.t_ms), "conn": e.conn, "corr": e.correlation_id, "kind": e.kind,
                                   "proxy": e.action, "in_flight": e.in_flight}
            if e.batches:
                b = e.batches[0]
                row.update(producer_epoch=b["producer_epoch"], base_sequence=b["base_sequence"], records=e.records)
            if e.results:
                row.update(broker_says=e.results[0]["error"], base_offset=e.results[0]["base_offset"])
            exchanges.append(row)
        values = [r.seq for r in records]
        return RetryReorderResult(
            topic=topic, program=program.name, messages=messages,
            dropped_requests=sum(1 for e in requests if e.action == "dropped"),
            max_in_flight_seen=max((e.in_flight for e in requests), default=0),
            out_of_order_answers=sum(1 for e in events if e.kind == "response"
                                     for r in e.results if r["error"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"),
            producer_epochs=sorted({b["producer_epoch"] for e in requests for b in e.batches}),
            log_order=values, duplicates=len(values) - len(set(values)), elapsed_ms=elapsed_ms, client_id=cid,
            exchanges=exchanges, records=records, **counts.to_json())
    finally:
        if child is not None and child.alive:
            child.kill()
        if rule is not None:
            proxy.remove_rule(rule)
        run.cleanup()
        if own:
            proxy.stop()


def run_retry_matrix(programs: Iterable[Program], messages: int = 10, proxy: FaultProxy | None = None,
                     timeout_s: float = 60.0) -> list[RetryReorderResult]:
    """``run_retry_reorder`` for each producer program at the same time (one thread each; each
    producer has its own topic, ``client.id`` and proxy rule, so each loses exactly its own
    first request after its warm-up). Results in the order of ``programs``.

    Raises:
        what ``run_retry_reorder`` raises, for the first setting that failed.
    """
    from concurrent.futures import ThreadPoolExecutor

    programs = list(programs)
    own = proxy is None
    if own:
        proxy = start_proxy()
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(programs)), thread_name_prefix="retry") as pool:
            futures = [pool.submit(run_retry_reorder, prog, messages, proxy, timeout_s) for prog in programs]
            return [f.result() for f in futures]
    finally:
        if own:
            proxy.stop()


# ----------------------------------------------------------------------------- throughput


#: The value size of the cost table's bursts, bytes.
THROUGHPUT_VALUE_BYTES = 100


def run_throughput(programs: Sequence[Program], records: int = 3000, rounds: int = 1) -> list[producers.ProgramBurst]:
    """The cost of keeping order with the producers on screen: each timed producer program (the
    notebook's ``timed_producer``, batches of 10 records, and copies edited with
    ``Program.replace``: ``max.in.flight.requests.per.connection`` 1, or idempotence with 5)
    sends ``records`` values of 100 bytes to a fresh one-partition topic on the CLIENT listeners
    (no proxy), in turn, ``rounds`` times: ``producers.run_bursts``, each run as it is in a
    worker process and timed by its own stopwatch from the first timed ``produce`` to the last
    delivery report (a warm-up record is not timed). Small batches make many Produce requests,
    where the number in flight matters. Numbers are for showing, never for asserting.

    Raises:
        KafkalabError: a program failed (e.g. librdkafka refused its settings) or a record was
            not delivered.
    """
    return producers.run_bursts(programs, records, THROUGHPUT_VALUE_BYTES, rounds, scope="orderperf")


def throughput_table(bursts: Iterable[producers.ProgramBurst]) -> "pd.DataFrame":
    """Best records/s per program, with the settings it wrote (``enable.idempotence``,
    ``max.in.flight.requests.per.connection``, ``batch.num.messages``, ``linger.ms``; None where
    it wrote none) and every burst's seconds."""
    import pandas as pd

    df = pd.DataFrame([{"program": b.program, "enable.idempotence": b.settings.get("enable.idempotence"),
                        "max.in.flight": b.settings.get("max.in.flight.requests.per.connection"),
                        "batch.num.messages": b.settings.get("batch.num.messages"),
                        "linger.ms": b.settings.get("linger.ms"),
                        "records/s": round(b.records_per_s), "seconds": round(b.seconds, 3)} for b in bursts])
    return df.groupby(["program", "enable.idempotence", "max.in.flight", "batch.num.messages", "linger.ms"],
                      sort=False, dropna=False).agg({"records/s": "max", "seconds": list})


# ----------------------------------------------------------------------------- partitioners


#: Clients of ``run_partitioners``, in table order.
PARTITIONER_CLIENTS: tuple[str, ...] = ("librdkafka default", "librdkafka murmur2_random", "Java console producer")


@dataclass
class PartitionerResult:
    """Where each key landed, per client (``PARTITIONER_CLIENTS``), and the predictions.

    Attributes:
        landed: client -> key -> partition (read back from the topic).
        crc32: key -> ``defaults.librdkafka_partition`` (CRC32 % partitions).
        murmur2: key -> ``defaults.java_partition`` (toPositive(murmur2) % partitions).
    """

    topic: str
    partitions: int
    keys: list[str]
    landed: dict[str, dict[str, int]]
    crc32: dict[str, int]
    murmur2: dict[str, int]

    def table(self) -> "pd.DataFrame":
        """One row per key: the two predictions and where each client put it."""
        import pandas as pd

        rows = {k: {"CRC32 predicts": self.crc32[k], "murmur2 predicts": self.murmur2[k],
                    **{c: self.landed[c].get(k) for c in PARTITIONER_CLIENTS}} for k in self.keys}
        return pd.DataFrame(rows).T.rename_axis("key")

    def to_json(self) -> dict:
        return asdict(self)


def java_console_produce(topic: str, records: Iterable[tuple[str | None, str]], timeout_s: float = 120.0) -> None:
    """Produce ``(key, value)`` text records with Kafka's own ``kafka-console-producer`` (the
    Java client of the brokers' release, at its defaults: ``batch.size`` 16384 bytes), fed on
    stdin as ``key:value`` lines (``--reader-property parse.key=true --reader-property
    key.separator=:``), or as bare values when every key is None (records without a key).

    Raises:
        ValueError: some keys are None and others are not.
        KafkalabError: the tool exited non-zero (with its stderr).
    """
    records = list(records)
    unkeyed = [k is None for k, _ in records]
    if any(unkeyed) and not all(unkeyed):
        raise ValueError("either every record has a key or none has")
    args = ["--topic", topic]
    if all(unkeyed):
        lines = "".join(f"{v}\n" for _, v in records)
    else:
        args += ["--reader-property", "parse.key=true", "--reader-property", "key.separator=:"]
        lines = "".join(f"{k}:{v}\n" for k, v in records)
    cp = subprocess.run(cluster.tool_command("kafka-console-producer", args), input=lines, capture_output=True,
                        text=True, timeout=timeout_s)
    if cp.returncode != 0:
        raise KafkalabError(f"kafka-console-producer exited {cp.returncode}:\n{cp.stderr[-2000:]}")


def run_partitioners(programs: Mapping[str, Program], keys: Iterable[str], partitions: int = 6,
                     timeout_s: float = 60.0) -> PartitionerResult:
    """Send each key once from three producers to one fresh topic of ``partitions``
    partitions and read back where each record landed: the two librdkafka producer programs
    ``programs`` (by the labels ``PARTITIONER_CLIENTS[0]`` and ``[1]``: notebook 07's
    ``keyed_producer``, default partitioner ``consistent_random``, and ``murmur2_producer``,
    ``partitioner=murmur2_random``), and the Java client (``kafka-console-producer``, default
    partitioner). Values are ``<client>|<key>``.

    Raises:
        KafkalabError: a producer failed.
        WaitTimeout: the topic could not be read back in ``timeout_s``.

    Sources: librdkafka CONFIGURATION.md (``partitioner``); Kafka clients
    ``BuiltInPartitioner.partitionForKey``.
    """
    keys = list(keys)
    missing = [c for c in PARTITIONER_CLIENTS[:2] if c not in programs]
    if missing:
        raise KafkalabError(f"no program for {missing}: give one per librdkafka client of PARTITIONER_CLIENTS")
    run = RunScope("partitioners")
    try:
        topic = run.topic("keys")
        admin.create_topics({topic: partitions})
        c_default, c_murmur, c_java = PARTITIONER_CLIENTS
        produce_together([(programs[c], [(k, f"{c}|{k}") for k in keys], f"keys-{i}")
                          for i, c in enumerate((c_default, c_murmur))], topic, timeout_s)
        java_console_produce(topic, [(k, f"{c_java}|{k}") for k in keys])
        landed: dict[str, dict[str, int]] = {c: {} for c in PARTITIONER_CLIENTS}
        for c in workloads.read_topic(topic, partitions, timeout_s=timeout_s):
            client, key = c.value.split("|", 1)
            landed[client][key] = c.partition
        return PartitionerResult(topic, partitions, keys, landed,
                                 {k: defaults.librdkafka_partition(k.encode(), partitions) for k in keys},
                                 {k: defaults.java_partition(k.encode(), partitions) for k in keys})
    finally:
        run.cleanup()


# ----------------------------------------------------------------------------- records without a key

#: The producers of ``run_unkeyed``, in the order they send.
UNKEYED_CLIENTS: tuple[str, ...] = ("librdkafka sticky 60 s", "librdkafka sticky off", "Java console producer",
                                    "librdkafka random, sticky 60 s", "librdkafka murmur2, sticky off")

#: ``sticky.partitioning.linger.ms`` of the first producer: longer than the whole burst.
STICKY_LINGER_MS = 60000

#: ``batch.size`` of ``kafka-console-producer`` 4.3 (its ``--batch-size`` default, bytes): the Java
#: built-in partitioner stays on one partition until about this many bytes went to it (KIP-794).
JAVA_CONSOLE_BATCH_SIZE = 16384


@dataclass
class UnkeyedResult:
    """Where each record without a key landed, per producer (``UNKEYED_CLIENTS``), in the order
    it was sent: ``landed[client][i]`` is the partition of that client's record ``i``."""

    topic: str
    partitions: int
    records: int
    value_bytes: int
    landed: dict[str, list[int]]

    def runs(self, client: str) -> list[tuple[int, int]]:
        """``(partition, records)`` for each stretch of consecutive records that went to one
        partition, in send order."""
        out: list[list[int]] = []
        for p in self.landed[client]:
            if out and out[-1][0] == p:
                out[-1][1] += 1
            else:
                out.append([p, 1])
        return [(p, n) for p, n in out]

    def table(self) -> "pd.DataFrame":
        import pandas as pd

        rows = {}
        for c in self.landed:
            lengths = [n for _, n in self.runs(c)]
            rows[c] = {"partitions used": len(set(self.landed[c])), "stretches": len(lengths),
                       "longest stretch": max(lengths), "records per stretch (mean)": round(sum(lengths) / len(lengths), 1),
                       "first stretches": " ".join(f"p{p}x{n}" for p, n in self.runs(c)[:6])}
        return pd.DataFrame(rows).T.rename_axis("producer")

    def to_json(self) -> dict:
        return asdict(self) | {"runs": {c: self.runs(c) for c in self.landed}}


def run_unkeyed(programs: Mapping[str, Program], records: int = 600, partitions: int = 6, value_bytes: int = 100,
                timeout_s: float = 60.0) -> UnkeyedResult:
    """Send ``records`` records without a key, each ``value_bytes`` long and numbered, from five
    producers (``UNKEYED_CLIENTS``: the four librdkafka ones are the producer ``programs`` by
    label, notebook 07's ``unkeyed_producer`` and its edits; each sends one warm-up record
    first) to one fresh topic of ``partitions`` partitions, and read back where each landed:

    - librdkafka with ``sticky.partitioning.linger.ms=60000`` (default 10): NULL keys go to a
      *sticky* partition, picked at random and kept for that long (default partitioner
      ``consistent_random``). The producer first sends one warm-up record and waits for it:
      librdkafka keeps a sticky partition only while it is available (its leader's connection is
      up), and picks again for every record until then;
    - librdkafka with ``sticky.partitioning.linger.ms=0``: each record's partition picked at
      random (``consistent_random``: "Empty and NULL keys are randomly partitioned");
    - Kafka's Java ``kafka-console-producer``: the built-in partitioner keeps one partition
      until about ``batch.size`` bytes went to it (KIP-480 sticky, KIP-794 uniform sticky);
    - librdkafka with ``partitioner=random`` and 60 s: sticky too (warm-up first, as above);
    - librdkafka with ``partitioner=murmur2`` and stickiness off: never sticky, and never random:
      "NULL keys are mapped to single partition" (CONFIGURATION.md); with ``consistent``,
      ``murmur2`` and ``fnv1a`` librdkafka calls the partitioner itself whatever the setting
      (``rd_kafka_topic_new0``, src/rdkafka_topic.c, sets ``random_partitioner`` for them).

    Raises:
        KafkalabError: a producer failed.
        WaitTimeout: the topic could not be read back in ``timeout_s``.

    Sources: librdkafka CONFIGURATION.md v2.16 (``partitioner``, ``sticky.partitioning.linger.ms``),
    ``rd_kafka_topic_new0`` (src/rdkafka_topic.c) and ``rd_kafka_msg_partitioner``
    (src/rdkafka_msg.c); KIP-480; KIP-794; Kafka clients 4.3 ``BuiltInPartitioner``.
    """
    if value_bytes < 40 or records < 1 or partitions < 1:
        raise KafkalabError(f"need value_bytes >= 40 (client name and number), records >= 1, partitions >= 1; got "
                            f"{value_bytes}, {records}, {partitions}")
    missing = [c for c in UNKEYED_CLIENTS if c != UNKEYED_CLIENTS[2] and c not in programs]
    if missing:
        raise KafkalabError(f"no program for {missing}: give one per librdkafka client of UNKEYED_CLIENTS")
    run = RunScope("unkeyed")
    try:
        topic = run.topic("nokey")
        admin.create_topics({topic: partitions})

        def values(client: str) -> list[str]:
            head = [f"{client}|{i:06d}|" for i in range(records)]
            return [h + "x" * (value_bytes - len(h)) for h in head]

        c_java = UNKEYED_CLIENTS[2]
        java_console_produce(topic, [(None, v) for v in values(c_java)])
        produce_together([(programs[c], [(None, v) for v in values(c)], f"nokey-{i}")
                          for i, c in enumerate(UNKEYED_CLIENTS) if c != c_java], topic, timeout_s)
        landed: dict[str, list[int]] = {c: [-1] * records for c in UNKEYED_CLIENTS}
        for c in workloads.read_topic(topic, partitions, timeout_s=timeout_s):
            client, _, rest = c.value.partition("|")
            if client in landed:  # not the warm-up record
                landed[client][int(rest.split("|", 1)[0])] = c.partition
        missing = {c: ps.count(-1) for c, ps in landed.items() if -1 in ps}
        if missing:
            raise KafkalabError(f"records not read back, per producer: {missing}")
        return UnkeyedResult(topic, partitions, records, value_bytes, landed)
    finally:
        run.cleanup()


# ----------------------------------------------------------------------------- adding partitions


@dataclass
class AddPartitionsResult:
    """Where each key landed before and after the topic grew from ``before`` to ``after``
    partitions (librdkafka's default partitioner), and the broker's answer to shrinking it."""

    topic: str
    before: int
    after: int
    keys: list[str]
    landed_before: dict[str, int]
    landed_after: dict[str, int]
    predicted_before: dict[str, int]
    predicted_after: dict[str, int]
    shrink_error: str | None

    @property
    def moved(self) -> list[str]:
        """Keys whose records now go to another partition."""
        return [k for k in self.keys if self.landed_before[k] != self.landed_after[k]]

    def table(self) -> "pd.DataFrame":
        import pandas as pd

        rows = {k: {f"partition with {self.before}": self.landed_before[k], f"partition with {self.after}": self.landed_after[k],
                    "moved": self.landed_before[k] != self.landed_after[k]} for k in self.keys}
        return pd.DataFrame(rows).T.rename_axis("key")

    def to_json(self) -> dict:
        return asdict(self) | {"moved": self.moved}


def run_add_partitions(program: Program, keys: Iterable[str], before: int = 3, after: int = 6,
                       timeout_s: float = 60.0) -> AddPartitionsResult:
    """Send each key with the producer ``program`` (notebook 07's ``keyed_producer``) to a fresh
    topic of ``before`` partitions, grow it to ``after`` (``CreatePartitions``), run the program
    again (a new producer) on each key, and see from the delivery reports where both rounds
    landed. Then ask for ``before`` partitions again: Kafka cannot remove
    partitions, and the broker's refusal is returned as ``shrink_error``.

    Raises:
        KafkalabError: a producer failed or the topic did not grow.
        WaitTimeout: the metadata did not show ``after`` partitions within ``timeout_s``.

    Source: Kafka documentation, Operations > "Modifying topics" ("Kafka does not currently
    support reducing the number of partitions for a topic"; adding partitions changes the
    partition of keyed data).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    keys = list(keys)
    if after <= before:
        raise KafkalabError(f"after ({after}) must be more than before ({before})")
    run = RunScope("addparts")
    try:
        topic = run.topic("keys")
        admin.create_topics({topic: before})
        a = workloads.admin()
        first = produce_together([(program, [(k, f"1|{k}") for k in keys], "round-1")], topic, timeout_s)[0]
        for fut in a.create_partitions([NewPartitions(topic, after)], operation_timeout=timeout_s).values():
            try:
                fut.result()
            except KafkaException as e:
                raise KafkalabError(f"could not grow {topic} to {after}: {e.args[0].str()}") from None
        wait_until(lambda: len(a.list_topics(topic, timeout=5).topics[topic].partitions) == after
                   and all(p.leader >= 0 for p in a.list_topics(topic, timeout=5).topics[topic].partitions.values()),
                   timeout_s=timeout_s, what=f"{topic} with {after} partitions, each with a leader")
        second = produce_together([(program, [(k, f"2|{k}") for k in keys], "round-2")], topic, timeout_s)[0]
        shrink_error = None
        for fut in a.create_partitions([NewPartitions(topic, before)], operation_timeout=timeout_s).values():
            try:
                fut.result()
            except KafkaException as e:
                shrink_error = f"{e.args[0].name()}: {e.args[0].str()}"
        return AddPartitionsResult(
            topic, before, after, keys, {k: p for k, (p, _) in zip(keys, first)}, {k: p for k, (p, _) in zip(keys, second)},
            {k: defaults.librdkafka_partition(k.encode(), before) for k in keys},
            {k: defaults.librdkafka_partition(k.encode(), after) for k in keys}, shrink_error)
    finally:
        run.cleanup()


# ----------------------------------------------------------------------------- the notebook's programs, edited


#: The lines of ``unkeyed_producer`` (notebook 07) that its variants edit.
STICKY_LINE = f'"sticky.partitioning.linger.ms": {STICKY_LINGER_MS},'
PARTITIONER_LINE = '"partitioner": "consistent_random",'


def unkeyed_variants(program: Program) -> dict[str, Program]:
    """The four librdkafka producers of ``run_unkeyed`` (``UNKEYED_CLIENTS``) made from
    ``program`` (notebook 07's ``unkeyed_producer``: ``consistent_random``, sticky for 60 s) by
    editing its ``partitioner`` and ``sticky.partitioning.linger.ms`` lines, as the notebook
    shows.

    Raises:
        ProgramError: the program no longer has those lines, once each.
    """
    c_sticky, c_off, _, c_random, c_murmur2 = UNKEYED_CLIENTS
    sticky_off = program.replace(STICKY_LINE, '"sticky.partitioning.linger.ms": 0,', name="sticky_off")
    return {
        c_sticky: program,
        c_off: sticky_off,
        c_random: program.replace(PARTITIONER_LINE, '"partitioner": "random",', name="random_sticky"),
        c_murmur2: sticky_off.replace(PARTITIONER_LINE, '"partitioner": "murmur2",', name="murmur2_sticky_off"),
    }


def without_key(program: Program) -> Program:
    """``program`` (notebook 07's ``keyed_producer``) sending no key: ``key=key, `` removed."""
    return program.replace("key=key, ", "", name=f"{program.name}_without_key")


def retry_program(idempotence: bool, max_in_flight: int | None) -> Program:
    """The notebook's retry program for the CLI's ``--idempotence``/``--max-in-flight``:
    ``idempotent_producer`` (idempotence on), else ``plain_producer`` with its
    ``max.in.flight.requests.per.connection`` line set to ``max_in_flight`` (None: as shown).

    With idempotence and a ``max_in_flight``, ``idempotent_producer`` with that setting written
    beside ``enable.idempotence`` (librdkafka refuses more than 5).
    """
    if idempotence:
        idem = notebook_program("idempotent_producer")
        if max_in_flight is None:
            return idem
        return idem.replace('"enable.idempotence": True,',
                            f'"max.in.flight.requests.per.connection": {max_in_flight}, "enable.idempotence": True,',
                            name=f"idempotent_producer_in_flight_{max_in_flight}")
    plain = notebook_program("plain_producer")
    if max_in_flight is None:
        return plain
    return plain.replace('"max.in.flight.requests.per.connection": 1000000,',
                         f'"max.in.flight.requests.per.connection": {max_in_flight},',
                         name=f"plain_producer_in_flight_{max_in_flight}")


# ----------------------------------------------------------------------------- CLI


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("ordering")
@click.option("--partitions", type=click.IntRange(1, 100), default=10, show_default=True, help="Partitions (P).")
@click.option("--consumers", type=click.IntRange(1, 50), default=10, show_default=True, help="Consumers in the group (C).")
@click.option("--keys", type=click.IntRange(0), default=10, show_default=True, help="Distinct keys, cycled (K; 0: no key).")
@click.option("--messages", type=click.IntRange(2, 100_000), default=None,
              help="Records (N). Default 1000, or 10 with --retry-reorder.")
@click.option("--retry-reorder", is_flag=True, help="Article 003: the fault proxy drops the first Produce request.")
@click.option("--idempotence", type=click.Choice(["on", "off"]), default="off", show_default=True,
              help="enable.idempotence (with --retry-reorder).")
@click.option("--max-in-flight", type=click.IntRange(1), default=None,
              help="max.in.flight.requests.per.connection (with --retry-reorder; default librdkafka's).")
@click.option("--unkeyed", is_flag=True,
              help="Records without a key from librdkafka (sticky, sticky off) and the Java console producer: "
                   "where each lands, in send order (--partitions, --messages; default 600).")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cli_command(partitions: int, consumers: int, keys: int, messages: int | None, retry_reorder: bool,
                idempotence: str, max_in_flight: int | None, unkeyed: bool, as_json: bool) -> None:
    """Count order inversions: globally, per key, per partition."""
    if unkeyed and retry_reorder:
        raise click.UsageError("--unkeyed and --retry-reorder are two experiments: choose one")
    if unkeyed:
        variants = unkeyed_variants(notebook_program("unkeyed_producer"))
        show_programs(*variants.values(), also="and Kafka's kafka-console-producer (the Java client, its defaults)")
        u = run_unkeyed(variants, messages or 600, partitions)
        if as_json:
            click.echo(json.dumps(u.to_json(), indent=2))
        else:
            click.echo(u.table().to_string())
        return
    if retry_reorder:
        program = retry_program(idempotence == "on", max_in_flight)
        show_programs(program)
        r: Any = run_retry_reorder(program, messages or 10)
    else:
        keyed = notebook_program("keyed_producer")
        program, reader = (keyed if keys else without_key(keyed)), notebook_program("group_reader")
        show_programs(program, reader)
        r = run_group_order(program, partitions, consumers, keys, messages or 1000, reader)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    if retry_reorder:
        click.echo(f"{r.label}: proxy dropped {r.dropped_requests} request(s); most in flight {r.max_in_flight_seen}; "
                   f"log order {r.log_order}")
    else:
        click.echo(f"{r.messages} records, {r.partitions} partitions ({r.partitions_used} used), {r.consumers} consumers "
                   f"({r.active_consumers} received records), {r.keys} keys")
    click.echo(f"inversions: global {r.global_inversions}, per key {r.per_key_inversions}, "
               f"per partition {r.per_partition_inversions}")
