"""Notebook 00, a tour of the lab cluster: what runs, where records go, what is on disk,
and the first trap (librdkafka's defaults are not the Java client's).

Each step is one function the notebook calls; ``run_tour`` chains the ones that need no
Spark for ``kafkalab run tour --json``. A ``kafkalab.runscope.RunScope`` names this run's
topics and consumer groups and deletes them at the end, or at interpreter exit if the
notebook stopped early.

The producer and the consumer are the notebook's ``%%program`` cells (``kafkalab.programs``):
``flight_producer`` (keyed), ``unkeyed_producer`` and ``flight_reader``, run as they are in
worker processes (``worker.ProgramSpec``, roles ``producer`` and ``consumer`` of
``kafkalab.instruments``) on the CLIENT listeners; ``kafkalab run tour`` reads the same cells
(``programs.from_notebook``).

Sources: Kafka documentation 4.3, Operations > KRaft (``kafka-metadata-quorum``),
Implementation > Log; KIP-595 (Raft for the metadata quorum: voters and observers);
librdkafka CONFIGURATION.md; see ``kafkalab.defaults`` and ``kafkalab.segments``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterable

import click
from .. import admin, cluster, config, defaults, dumplog, runscope, segments, workloads
from ..cluster import ClusterStatus
from ..data import Flight
from ..errors import KafkalabError
from ..ledger import read_events
from ..programs import Program, from_notebook
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf

if TYPE_CHECKING:
    import pandas as pd


# ----------------------------------------------------------------------------- the quorum


@dataclass
class QuorumStatus:
    """``kafka-metadata-quorum describe --status``, parsed.

    ``voters``: node ids that vote in the KRaft quorum (the controllers); ``observers``:
    node ids that replicate the metadata log without voting (the brokers). KIP-595.
    """

    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    max_follower_lag: int
    max_follower_lag_time_ms: int
    voters: list[int]
    observers: list[int]


def _node_ids(text: str) -> list[int]:
    """``[{"id": 1, ...}, ...]`` (Kafka 3.7+) or ``[1,2,3]`` (earlier) -> ``[1, 2, 3]``."""
    items = json.loads(text)
    return sorted(int(x["id"]) if isinstance(x, dict) else int(x) for x in items)


def parse_quorum_status(text: str) -> QuorumStatus:
    """Parse the ``Key: value`` lines of ``kafka-metadata-quorum describe --status``.

    Raises:
        ValueError: a field is missing (the output format changed).
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            fields[key.strip()] = value.strip()
    try:
        return QuorumStatus(
            cluster_id=fields["ClusterId"],
            leader_id=int(fields["LeaderId"]),
            leader_epoch=int(fields["LeaderEpoch"]),
            high_watermark=int(fields["HighWatermark"]),
            max_follower_lag=int(fields["MaxFollowerLag"]),
            max_follower_lag_time_ms=int(fields["MaxFollowerLagTimeMs"]),
            voters=_node_ids(fields["CurrentVoters"]),
            observers=_node_ids(fields.get("CurrentObservers", "[]")),
        )
    except KeyError as e:
        raise ValueError(f"kafka-metadata-quorum output without {e.args[0]}:\n{text}") from None


def describe_quorum() -> tuple[QuorumStatus, str]:
    """Run ``kafka-metadata-quorum describe --status`` (a JVM start, about 1 s) against the
    brokers; return the parsed status and the raw text."""
    out = cluster.tool("kafka-metadata-quorum", "describe", "--status").stdout
    return parse_quorum_status(out), out


def nodes_table(status: ClusterStatus) -> "pd.DataFrame":
    """One row per Kafka process: role, pid, liveness, listeners (advertised ``host:port``;
    FAULT also with the port the broker binds), and whether it leads the metadata quorum."""
    import pandas as pd

    rows = []
    for node_status in [*status.controllers.values(), *status.brokers.values()]:
        node = config.Node(node_status.node_id, node_status.role)
        ls = node_status.listeners
        rows.append({
            "node_id": node_status.node_id,
            "role": node_status.role,
            "pid": node_status.pid,
            "alive": node_status.alive,
            "CLIENT": ls.get("CLIENT", ""),
            "INTERNAL": ls.get("INTERNAL", ""),
            "FAULT advertised": ls.get("FAULT", ""),
            "FAULT bound": f"127.0.0.1:{node.ports['FAULT']}" if "FAULT" in node.ports else "",
            "CONTROLLER": ls.get("CONTROLLER", ""),
            "quorum leader": node_status.node_id == status.quorum_leader,
        })
    return pd.DataFrame(rows).set_index("node_id")


def advertised_brokers(bootstrap: str, timeout_s: float = 5.0) -> dict[int, str]:
    """Broker id -> ``host:port`` as the metadata answer lists them to a client that
    bootstrapped at ``bootstrap`` (one ``host:port``): the listener it connected through
    decides the ports. The Metadata request goes to that listener alone
    (``admin.broker_metadata``): a librdkafka client may send it to a broker it has just
    learned, and the FAULT listener advertises the fault proxy's ports, where nothing listens
    while the proxy is off (librdkafka then timed out in 2 of 5 tries here).

    Raises:
        KafkalabError: no metadata within ``timeout_s``.
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        return dict(sorted(admin.broker_metadata(host, int(port), [], timeout_s=timeout_s).brokers.items()))
    except OSError as e:
        raise KafkalabError(f"no metadata from {bootstrap}: {e}") from None


# ----------------------------------------------------------------------------- topic and configs


@dataclass
class PartitionState:
    """One partition in the metadata: leader and replica ids, in-sync replicas."""

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


def partition_states(topic: str, timeout_s: float = 5.0) -> list[PartitionState]:
    """The metadata's view of ``topic``'s partitions, sorted by partition.

    Raises:
        KafkalabError: the topic is not in the metadata.
    """
    md = workloads.admin().list_topics(topic, timeout=timeout_s)
    tm = md.topics.get(topic)
    if tm is None or tm.error is not None:
        raise KafkalabError(f"topic {topic!r} is not in the metadata: {tm.error if tm else 'missing'}")
    return [PartitionState(p.id, p.leader, list(p.replicas), list(p.isrs))
            for p in sorted(tm.partitions.values(), key=lambda p: p.id)]


# ----------------------------------------------------------------------------- produce and consume


def aircraft_flights(flights: list[Flight], n: int) -> list[Flight]:
    """All flights of the first aircraft (in file order) that fly at least twice in ``flights``,
    taking whole aircraft until there are at least ``n`` flights; returned in file order.

    Every key in the result has two or more records, so "one key, one partition, in order" is
    something the cluster can get wrong (in the file's first 200 flights no aircraft repeats).

    Raises:
        KafkalabError: ``flights`` has fewer than ``n`` flights of repeating aircraft.
    """
    by_key: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(flights):
        by_key[f.key].append(i)
    chosen: list[int] = []
    for idx in by_key.values():  # dicts keep first-appearance order
        if len(chosen) >= n:
            break
        if len(idx) >= 2:
            chosen.extend(idx)
    if len(chosen) < n:
        raise KafkalabError(f"only {len(chosen)} flights of aircraft that fly twice or more, {n} asked")
    return [flights[i] for i in sorted(chosen)]



@dataclass(frozen=True)
class Delivery:
    """One record with its place in the log: acked to a producer or returned to a consumer."""

    record_id: str
    key: str | None
    partition: int
    offset: int


#: The notebook whose ``%%program`` cells this family runs (``programs.from_notebook``).
NOTEBOOK = "00_cluster_tour"
#: ``client.id`` of the flight producer and of the reader (the harness adds them, ``lab.conf``).
PRODUCER_CLIENT_ID = "flight-producer"
READER_CLIENT_ID = "flight-reader"


def _record_id(value: str | None) -> str:
    """The ``record_id`` of a flight's JSON value (``Flight.to_json``)."""
    if value is None:
        raise KafkalabError("a record without a value: not a flight")
    return json.loads(value)["record_id"]


def produce_flights(program: Program, topic: str, flights: list[Flight], timeout_s: float = 60.0,
                    client_id: str = PRODUCER_CLIENT_ID) -> list[Delivery]:
    """Run the producer ``program`` (a ``%%program`` cell of notebook 00, role ``producer``) in a
    worker process on the CLIENT listeners (``worker.lab_conf``): ``lab.records()`` gives it the
    flights as ``(key, value, -1)`` (key: the aircraft's tail number, value: ``flight.to_json()``,
    -1: no partition chosen, the partitioner decides). Waits for it to end; returns its delivery
    reports (``lab.delivered``) in the order of ``flights``.

    Raises:
        KafkalabError: the program failed, or a flight has no delivery report or a failed one.
        WaitTimeout: it ran longer than ``timeout_s``.
    """
    run = runscope.run_id()
    ledger = workloads.run_dir(run) / f"{client_id}.jsonl"
    child = workloads.spawn(ProgramSpec(client_id, run, str(ledger), "producer", program.name, program.source,
                                        conf=lab_conf(client_id), topics=[topic],
                                        options={"records": [[f.key, f.to_json().decode(), -1] for f in flights]}))
    if child.wait(timeout_s) != 0:
        raise KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")
    reports = {}
    for e in read_events(ledger):
        if e.kind != "acked":
            continue
        if e.error is not None:
            raise KafkalabError(f"program {program.name}: a delivery report failed: {e.error}")
        reports[_record_id(e.value)] = Delivery(_record_id(e.value), e.key, e.partition, e.offset)
    missing = [f.record_id for f in flights if f.record_id not in reports]
    if missing:
        raise KafkalabError(f"program {program.name}: no delivery report for {len(missing)} flights, e.g. {missing[:3]}")
    return [reports[f.record_id] for f in flights]


def consume_all(program: Program, topic: str, group_id: str, expected: int, timeout_s: float = 60.0,
                client_id: str = READER_CLIENT_ID) -> list[Delivery]:
    """Run the consumer ``program`` (a ``%%program`` cell of notebook 00, role ``consumer``) in a
    worker process, in group ``group_id`` (``worker.lab_conf``), until its ledger holds ``expected``
    records (``lab.consumed``); then ask it to stop (SIGTERM: it closes its consumer, which
    leaves the group). Returns the records in the order ``consume`` handed them over.

    Raises:
        WaitTimeout: fewer than ``expected`` records within ``timeout_s`` (says how many came).
        KafkalabError: the program died, or ``consume`` returned an error.
    """
    run = runscope.run_id()
    ledger = workloads.run_dir(run) / f"{client_id}.jsonl"
    child = workloads.spawn(ProgramSpec(client_id, run, str(ledger), "consumer", program.name, program.source,
                                        conf=lab_conf(client_id, group_id), topics=[topic]))
    got: list[Delivery] = []

    def all_read() -> bool:
        events = read_events(ledger, growing=True, kinds="consumed", missing_ok=True)
        errors = [e.error for e in events if e.error is not None]
        if errors:
            raise KafkalabError(f"program {program.name}: consume returned an error on {topic}: {errors[0]}")
        if not child.alive:
            raise KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")
        got[:] = [Delivery(_record_id(e.value), e.key, e.partition, e.offset) for e in events]
        return len(got) >= expected

    try:
        wait_until(all_read, timeout_s=timeout_s, interval_s=0.05, what=f"{expected} records of {topic} consumed",
                   on_timeout=lambda: f"{len(got)} consumed")
    finally:
        rc = child.terminate(30)
    if rc != 0:
        raise KafkalabError(f"program {program.name} exited {rc} on SIGTERM:\n{child.log_tail()}")
    return got


def key_partitions(deliveries: Iterable[Delivery]) -> dict[str, set[int]]:
    """Key -> the set of partitions its records are in (one partition per key is the rule)."""
    out: dict[str, set[int]] = defaultdict(set)
    for d in deliveries:
        out[d.key].add(d.partition)
    return dict(out)


def order_by_key(deliveries: Iterable[Delivery]) -> dict[str, list[str]]:
    """Key -> its record ids in (partition, offset) order: the order a consumer of the
    partition sees them."""
    out: dict[str, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        out[d.key].append(d)
    return {k: [d.record_id for d in sorted(v, key=lambda d: (d.partition, d.offset))] for k, v in out.items()}


def per_partition(deliveries: Iterable[Delivery]) -> dict[int, int]:
    """Partition -> number of records."""
    return dict(sorted(Counter(d.partition for d in deliveries).items()))


# ----------------------------------------------------------------------------- Spark (the Java client)


def partitioner_table(keys: Iterable[str], partitions: int, librdkafka_seen: dict[str, set[int]],
                      java_seen: dict[str, set[int]] | None = None) -> "pd.DataFrame":
    """Per key: the partition each client's default partitioner predicts (CRC32 for
    librdkafka, murmur2 for Java) and the partitions where each client's records were seen."""
    import pandas as pd

    rows = []
    for k in sorted(set(keys)):
        b = k.encode()
        row = {"key": k,
               "crc32 predicts": defaults.librdkafka_partition(b, partitions),
               "murmur2 predicts": defaults.java_partition(b, partitions),
               "librdkafka wrote to": sorted(librdkafka_seen.get(k, ()))}
        if java_seen is not None:
            row["Java wrote to"] = sorted(java_seen.get(k, ()))
        rows.append(row)
    return pd.DataFrame(rows).set_index("key")


# ----------------------------------------------------------------------------- on disk


def replica_dirs(status: ClusterStatus, topic: str) -> dict[int, dict[int, str]]:
    """Broker id -> partition -> folder of its replica of ``topic`` (under ``data_dir``)."""
    return {b: {p: str(d) for p, d in segments.partition_dirs(n.data_dir, topic).items()}
            for b, n in status.brokers.items()}


def replica_files(status: ClusterStatus, topic: str) -> "pd.DataFrame":
    """One row per segment file of every replica of ``topic``: broker, partition, file name,
    size (bytes) and bytes allocated on disk."""
    import pandas as pd

    rows = [{"broker": b, "partition": p, "file": f.path.name, "kind": f.kind, "size": f.size,
             "allocated": f.allocated}
            for b, parts in replica_dirs(status, topic).items()
            for p, d in parts.items()
            for f in segments.segment_files(d)]
    return pd.DataFrame(rows, columns=["broker", "partition", "file", "kind", "size", "allocated"])


def log_sizes(status: ClusterStatus, topic: str) -> dict[int, dict[int, int]]:
    """Partition -> broker -> bytes in that replica's ``.log`` files."""
    out: dict[int, dict[int, int]] = defaultdict(dict)
    for b, parts in replica_dirs(status, topic).items():
        for p, d in parts.items():
            out[p][b] = segments.log_bytes(d)
    return dict(sorted(out.items()))


def wait_replicas_equal(status: ClusterStatus, topic: str, partitions: int, timeout_s: float = 15.0
                        ) -> dict[int, dict[int, int]]:
    """Until every broker holds a replica folder of each of ``partitions`` partitions and, per
    partition, all ``.log`` sizes are equal and non-zero (followers fetched everything).
    Returns ``log_sizes``.

    Raises:
        WaitTimeout: with the last sizes seen.
    """
    brokers = set(status.brokers)
    last: dict = {}

    def equal():
        nonlocal last
        last = log_sizes(status, topic)
        if set(last) != set(range(partitions)):
            return None
        for sizes in last.values():
            if set(sizes) != brokers or len(set(sizes.values())) != 1 or 0 in sizes.values():
                return None
        return last

    return wait_until(equal, timeout_s=timeout_s, interval_s=0.2,
                      what=f"equal .log sizes on brokers {sorted(brokers)} for every partition of {topic}",
                      on_timeout=lambda: f"last sizes (partition -> broker -> bytes): {last}")


def first_log_files(status: ClusterStatus, topic: str, broker: int | None = None) -> list[str]:
    """The first ``.log`` file of each partition replica of ``topic`` on ``broker`` (default:
    the lowest broker id)."""
    b = broker if broker is not None else min(status.brokers)
    out = []
    for p, d in segments.partition_dirs(status.brokers[b].data_dir, topic).items():
        logs = [f for f in segments.segment_files(d) if f.kind == "log"]
        if logs:
            out.append(str(logs[0].path))
    return out


# ----------------------------------------------------------------------------- the CLI's version


@dataclass
class TourResult:
    """What ``run_tour`` saw; every ``*_ok`` field is a claim of notebook 00."""

    topic: str
    quorum_leader: int
    voters: list[int]
    observers: list[int]
    partitions: list[PartitionState]
    produced: int
    consumed: int
    each_record_once: bool
    keys: int
    one_partition_per_key: bool
    crc32_predicts_librdkafka: bool
    keys_where_murmur2_differs: int
    log_sizes: dict[int, dict[int, int]]
    librdkafka_producer_ids: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def run_tour(n_flights: int = 200, timeout_s: float = 60.0, producer: Program | None = None,
             reader: Program | None = None) -> TourResult:
    """The Spark-free part of notebook 00 on a fresh topic, deleted afterwards: about
    ``n_flights`` flights of aircraft that fly more than once (``aircraft_flights``), sent by
    the notebook's ``flight_producer`` program and read by its ``flight_reader`` (or the
    programs given)."""
    from ..data import flights as load_flights

    producer = producer or from_notebook(NOTEBOOK, "flight_producer")
    reader = reader or from_notebook(NOTEBOOK, "flight_reader")

    status = runscope.require_whole_cluster()
    quorum, _ = describe_quorum()
    with runscope.RunScope("tour") as run:
        topic = run.topic("flights")
        admin.create_topics({topic: 3}, replication_factor=-1)
        states = partition_states(topic)
        fl = aircraft_flights(load_flights(), n_flights)
        sent = produce_flights(producer, topic, fl, timeout_s=timeout_s)
        got = consume_all(reader, topic, run.group("reader"), len(fl), timeout_s=timeout_s)
        counts = Counter(d.record_id for d in got)
        seen = key_partitions(got)
        n = len(states)
        sizes = wait_replicas_equal(status, topic, n)
        batches = dumplog.run(first_log_files(status, topic)).batches
        return TourResult(
            topic=topic, quorum_leader=quorum.leader_id, voters=quorum.voters, observers=quorum.observers,
            partitions=states, produced=len(sent), consumed=len(got),
            each_record_once=set(counts) == {f.record_id for f in fl} and set(counts.values()) == {1},
            one_partition_per_key=all(len(ps) == 1 for ps in seen.values()),
            keys=len(seen),
            crc32_predicts_librdkafka=all(ps == {defaults.librdkafka_partition(k.encode(), n)} for k, ps in seen.items()),
            keys_where_murmur2_differs=sum(defaults.java_partition(k.encode(), n) not in ps for k, ps in seen.items()),
            log_sizes=sizes,
            librdkafka_producer_ids=sorted({b.producer_id for b in batches}),
        )


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("tour")
@click.option("--messages", "--flights", "n_flights", type=click.IntRange(1, 2000), default=200, show_default=True,
              help="Flights (records) to produce and read back; --flights is the older name.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cli_command(n_flights: int, as_json: bool) -> None:
    """Notebook 00 without Spark: quorum, a topic, flights in and out (the notebook's
    flight_producer and flight_reader programs), replicas on disk."""
    producer, reader = from_notebook(NOTEBOOK, "flight_producer"), from_notebook(NOTEBOOK, "flight_reader")
    show_programs(producer, reader)
    r = run_tour(n_flights, producer=producer, reader=reader)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"quorum leader {r.quorum_leader}, voters {r.voters}, observers {r.observers}")
    click.echo(f"{r.topic}: produced {r.produced} flights of {r.keys} aircraft, consumed {r.consumed}, "
               f"each once: {r.each_record_once}")
    click.echo(f"one partition per key: {r.one_partition_per_key}; CRC32 predicts librdkafka: "
               f"{r.crc32_predicts_librdkafka}; keys murmur2 would place elsewhere: {r.keys_where_murmur2_differs}")
    click.echo(f".log bytes (partition -> broker -> bytes): {r.log_sizes}")
    click.echo(f"producer ids in librdkafka's batches: {r.librdkafka_producer_ids} (-1: not idempotent)")
