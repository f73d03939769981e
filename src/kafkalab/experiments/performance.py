"""Notebook 10: how fast, and what each guarantee costs, measured on the cluster.

Each function runs one comparison on fresh topics, in one run, so the numbers it returns can be
compared with each other (never with a figure from another machine or another minute). The
measurements themselves live in the shared layer (``kafkalab.perf``); this family picks the
settings, the topics and the data, and returns tables. Every Python client whose outcome the
notebook checks is one of the notebook's own programs (``%%program`` cells), run as shown or with
a line changed (``Program.replace``), in a worker process: the measuring producers
(``producers.send_with``: ``burst_producer``, ``paced_producer``, ``transactional_producer``;
role ``measuring``, ``kafkalab.instruments.measuring``) and the measuring consumer (``read_with``,
``ReaderRun``: ``measuring_consumer``, role ``timed_reader``). The producer held at the fault gate
while a follower is frozen is ``experiments.follower_wait``.
The CLI runs the same programs (``programs.from_notebook``). The Java sides are Kafka's own tools
(``kafka-producer-perf-test``, ``kafka-e2e-latency``, ``kafka-consumer-perf-test``).

Sources: Kafka documentation 4.3, "Design: Efficiency" (batching, compression, the page cache,
``sendfile``) and Producer/Consumer Configs; librdkafka CONFIGURATION.md; KIP-74 (a fetch returns at
least one batch); KIP-98 (idempotence, transactions); KIP-1030 (Java ``linger.ms`` 5 since 4.0).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

import click

from .. import admin, cluster, config, coordinators, perf, producers, runscope, segments, workloads
from ..errors import KafkalabError
from ..instruments.measuring import MeasureOptions, read_times, ready_path
from ..producers import send_with
from ..programs import Program, program_settings
from ..worker import ProgramSpec, lab_conf
from ..perf import Burst, ConsumeBurst, Latency, ProducerSettings
from ..runscope import RunScope
from ..waiting import wait_until

if TYPE_CHECKING:
    import pandas as pd


# ----------------------------------------------------------------------------- the two clients


@dataclass
class ThroughputResult:
    """One setting, both clients, one run.

    Attributes:
        python, java: the bursts (``java`` None with transactions: the Java tool commits by time).
        python_records_per_s, java_records_per_s, ratio: records/s and python / java.
        bytes_on_disk_per_record: the Python topic's segment bytes on its leaders / records.
        records_per_batch, java_records_per_batch: mean records per batch in each client's
            topic's segments (the clients' ``batch.size`` defaults differ: librdkafka 1000000
            bytes, Java 16384).
        settings: what ``kafka-producer-perf-test`` ran with (a ``ProducerSettings``'s fields).
        program: the producer program the Python side ran.
        python_settings: the settings that program writes, read from its text
            (``programs.program_settings``).
    """

    settings: dict
    messages: int
    record_size: int
    partitions: int
    python: Burst
    java: Burst | None
    python_records_per_s: float
    java_records_per_s: float | None
    ratio: float | None
    bytes_on_disk_per_record: float
    records_per_batch: float
    java_records_per_batch: float | None = None
    program: str | None = None
    python_settings: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        d = asdict(self)
        d["python"], d["java"] = self.python.to_json(), self.java.to_json() if self.java else None
        return d


def run_throughput(messages: int, record_size: int, settings: ProducerSettings, program: Program,
                   java: bool = True) -> ThroughputResult:
    """``messages`` values of ``record_size`` bytes sent by the measuring producer ``program`` (a
    notebook's ``%%program`` cell, run as it is by ``send_with``, to partition 0 of a fresh
    one-partition topic; a transactional one commits as it writes, and its commits are timed),
    then by ``kafka-producer-perf-test`` with ``settings`` (``settings_of(program)``: the same as
    the program's; its own fresh topic), as fast as each goes; the Python topic's bytes on disk and
    records per batch are read from its segments. The row's Python settings are what the program
    writes (``programs.program_settings``), so an edit of the program shows in the result.

    Raises:
        KafkalabError: a burst failed, or a bad setting.
    """
    with RunScope("perf") as run:
        t_py, t_java = run.topic("python"), run.topic("java")
        admin.create_topics({t_py: 1, t_java: 1})
        written = program_settings(program.source)
        sent = send_with(program, t_py, messages, record_size, rate=None, timeout_s=300)
        py = Burst("confluent-kafka", written, messages, record_size, sent.seconds, commit_ms=sent.commit_ms)
        jv = perf.java_burst(t_java, messages, record_size, settings) if java and not settings.transactional_batch else None
        batches = perf.records_per_batch(t_py, 1)
        java_batches = perf.records_per_batch(t_java, 1) if jv else []
        return ThroughputResult(
            asdict(settings), messages, record_size, 1, py, jv, round(py.records_per_s, 1),
            round(jv.records_per_s, 1) if jv else None, round(py.records_per_s / jv.records_per_s, 2) if jv else None,
            round(perf.log_bytes(t_py, 1) / messages, 1), round(statistics.mean(batches), 1) if batches else 0.0,
            round(statistics.mean(java_batches), 1) if java_batches else None, program.name, written)


def _settings_text(settings: Mapping) -> str:
    """``key=value, ...`` of the settings a program writes, the lab's callbacks left out."""
    return ", ".join(f"{k}={v}" for k, v in settings.items() if not str(v).startswith("lab."))


def throughput_table(results: Iterable[ThroughputResult]) -> "pd.DataFrame":
    """One row per run: the program that ran and the settings it writes,
    what the Java tool ran with, records/s and MB/s of each client, their ratio, bytes on disk
    per record, records per batch."""
    import pandas as pd

    return pd.DataFrame([{"python": f"{r.program}: {_settings_text(r.python_settings)}",
                          "java --producer-props": " ".join(ProducerSettings(**r.settings).java_props()),
                          "python records/s": round(r.python_records_per_s),
                          "java records/s": round(r.java_records_per_s) if r.java_records_per_s else None,
                          "python / java": r.ratio, "python MB/s": round(r.python.mb_per_s, 1),
                          "bytes on disk / record": r.bytes_on_disk_per_record,
                          "python records / batch": r.records_per_batch,
                          "java records / batch": r.java_records_per_batch} for r in results]).set_index("python")


# ----------------------------------------------------------------------------- batching


@dataclass
class BatchingRow:
    """One paced run: ``linger_ms`` or ``batch_size`` set, ``rate`` records/s, what the
    segments hold afterwards (the warm-up record's batch left out).

    Attributes:
        span_ms: from the first batch's first timestamp to the last batch's (CreateTime, ms).
        min_gap_ms: the least time between two consecutive batches' first timestamps, ms
            (None with one batch). librdkafka closes a batch no earlier than ``linger.ms`` after
            its first record was produced (unless ``batch.size`` or ``batch.num.messages`` fill
            it first), and a record produced after that opens the next batch, so with batches
            that are not full the gap is at least ``linger.ms`` (minus 1 ms: timestamps are
            whole ms) and ``batches <= span_ms / (linger.ms - 1) + 1``.
    """

    label: str
    linger_ms: int | None
    batch_size: int | None
    rate: float
    records: int
    batches: int
    mean_records_per_batch: float
    max_records_per_batch: int
    ack_p50_ms: float
    span_ms: int = 0
    min_gap_ms: int | None = None

    def most_batches_for_linger(self) -> float:
        """The most batches the linger allows in ``span_ms``: ``span_ms / (linger.ms - 1) + 1``
        (linger.ms > 1), as ``min_gap_ms`` explains."""
        if not self.linger_ms or self.linger_ms <= 1:
            raise KafkalabError(f"{self.label}: no lower bound on the gap between batches without a linger > 1 ms")
        return self.span_ms / (self.linger_ms - 1) + 1


@dataclass
class ReaderTimes:
    """One run of a measuring consumer program (``read_with``): what the harness added
    (``lab_conf``); per record in arrival order its end-to-end latency (arrival minus CreateTime,
    ms); value bytes received; ``seconds`` from ``lab.start()`` to the last record; the Fetch
    requests librdkafka's statistics counted (None if no report saw every record)."""

    program: str
    lab_conf: dict
    latencies_ms: list[float]
    value_bytes: int
    seconds: float
    fetch_requests: int | None


class ReaderRun:
    """A measuring consumer program (role ``timed_reader``) started in a worker process, reading
    partition 0 of ``topic`` from offset 0 until ``count`` records arrived. The harness adds only
    ``bootstrap.servers``, ``client.id`` and ``group.id`` (``addresses``: other listeners' ports
    and the lab's CA file instead, e.g. the TLS listeners'; the program writes its
    ``security.protocol``). ``ready`` waits until it is connected
    (``lab.start()``); ``result`` until it ends."""

    def __init__(self, program: Program, topic: str, count: int, addresses: dict[str, str] | None = None):
        run_id = runscope.run_id()
        self.program = program
        client_id = f"{run_id}-{program.name}"
        self.conf = lab_conf(client_id, client_id) | (addresses or {})
        self.ledger = workloads.run_dir(run_id) / f"{client_id}.jsonl"
        self.child = workloads.spawn(ProgramSpec(client_id, run_id, str(self.ledger), "timed_reader", program.name,
                                                 program.source, conf=self.conf, topics=[topic],
                                                 options=asdict(MeasureOptions(count, 1))))

    def ready(self, timeout_s: float = 60.0) -> None:
        """Until the program called ``lab.start()`` (connected to the leader).

        Raises:
            KafkalabError: it exited first. WaitTimeout: not within ``timeout_s``.
        """
        def started() -> bool:
            if not self.child.alive:
                raise KafkalabError(f"program {self.program.name} exited {self.child.returncode}:\n{self.child.log_tail()}")
            return Path(ready_path(str(self.ledger))).exists()

        wait_until(started, timeout_s=timeout_s, interval_s=0.02, what=f"program {self.program.name} at lab.start()")

    def result(self, timeout_s: float = 120.0) -> ReaderTimes:
        """Wait for the program to end and read its times.

        Raises:
            KafkalabError: it failed. WaitTimeout: still running after ``timeout_s`` (it is killed).
        """
        try:
            rc = self.child.wait(timeout_s)
        except KafkalabError:
            self.child.kill()
            raise
        if rc != 0:
            raise KafkalabError(f"program {self.program.name} exited {rc}:\n{self.child.log_tail()}")
        t = read_times(self.ledger)
        return ReaderTimes(self.program.name, self.conf, t["latencies_ms"], t["value_bytes"], t["seconds"],
                           t["fetch_requests"])


def read_with(program: Program, topic: str, count: int, timeout_s: float = 120.0,
              addresses: dict[str, str] | None = None) -> ReaderTimes:
    """Run the measuring consumer ``program`` (role ``timed_reader``) as it is until ``count``
    records of ``topic`` arrived (``ReaderRun``; ``addresses`` as there).

    Raises:
        KafkalabError: it failed or stopped short. WaitTimeout: it ran longer than ``timeout_s``.
    """
    r = ReaderRun(program, topic, count, addresses).result(timeout_s)
    if len(r.latencies_ms) < count:
        raise KafkalabError(f"program {program.name}: {len(r.latencies_ms)} of {count} records of {topic}")
    return r


def program_setting(program: Program, name: str) -> int | None:
    """The integer a program writes for setting ``name`` (``"linger.ms": 200`` -> 200), or None
    if it does not write one as an integer literal (``programs.program_settings``): how a row
    names the linger the program ran with."""
    value = program_settings(program.source).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _literal(value: str | int | bool) -> str:
    """``value`` as a program writes it in its settings dict (``"all"``, ``1000``, ``True``)."""
    return repr(value) if isinstance(value, bool) else json.dumps(value)


def with_setting(program: Program, key: str, value: str | int | bool, name: str) -> Program:
    """``program`` with the value it writes for setting ``key`` edited to ``value``
    (``Program.replace`` of its ``"key": current`` text), named ``name``; the program itself if it
    already writes ``value``.

    Raises:
        KafkalabError: the program writes no literal for ``key``.
        ProgramError: its ``"key": current`` text does not occur exactly once.
    """
    written = program_settings(program.source)
    if key not in written or not isinstance(written[key], (str, int, bool)):
        raise KafkalabError(f"program {program.name} does not write {key}")
    if written[key] == value and type(written[key]) is type(value):
        return program
    return program.replace(f'"{key}": {_literal(written[key])}', f'"{key}": {_literal(value)}', name=name)


def settings_of(program: Program, transactional_batch: int = 0) -> ProducerSettings:
    """The ``ProducerSettings`` a producer program writes (``programs.program_settings``): its
    ``acks``, ``linger.ms``, ``batch.size``, ``compression.type`` and ``enable.idempotence``
    (None where it writes none: the client's default), for Kafka's tool to run with the same.
    ``transactional_batch``: records per transaction of a transactional program.

    Raises:
        KafkalabError: a value ``ProducerSettings`` refuses (e.g. transactions without acks=all).
    """
    w = program_settings(program.source)
    return ProducerSettings(str(w.get("acks", "all")), w.get("linger.ms"), w.get("batch.size"),
                            str(w.get("compression.type", w.get("compression.codec", "none"))),
                            w.get("enable.idempotence"), transactional_batch)


def run_batching_programs(programs: Mapping[str, Program], rate: float = 2000, seconds: float = 1.0,
                          record_size: int = 100) -> list[BatchingRow]:
    """Batching with the producers on screen: for each ``label -> program`` (a measuring
    producer program, run as it is), send ``rate * seconds`` records at ``rate`` records/s to a
    fresh one-partition topic and read the batches back from the leader's segment. The row's
    ``linger_ms`` and ``batch_size`` are what the program writes (``program_setting``)."""
    rows: list[BatchingRow] = []
    with RunScope("batching") as run:
        for label, program in programs.items():
            topic = run.topic(f"b{len(rows)}")
            admin.create_topics({topic: 1})
            times = send_with(program, topic, int(rate * seconds), record_size, rate)
            batches = perf.data_batches(topic, 1)[1:]  # the warm-up record's own batch left out
            counts = [b.records_count for b in batches]
            starts = [b.base_timestamp for b in batches]
            gaps = [b - a for a, b in zip(starts, starts[1:])]
            rows.append(BatchingRow(label, program_setting(program, "linger.ms"), program_setting(program, "batch.size"),
                                    rate, sum(counts), len(counts), round(statistics.mean(counts), 1), max(counts),
                                    round(statistics.median(a for _, a in times.acks), 1), starts[-1] - starts[0],
                                    min(gaps) if gaps else None))
        return rows


# ----------------------------------------------------------------------------- compression


@dataclass
class CompressionRow:
    codec: str
    records: int
    bytes_on_disk_per_record: float
    ratio_to_none: float
    records_per_s: float


def run_compression(programs: Mapping[str, Program], records: int = 10_000) -> list[CompressionRow]:
    """The same ``records`` flight records (JSON, ``kafkalab.data.record_json``, about 240 bytes
    each) sent by each ``codec label -> program`` (a measuring producer program whose only
    difference is its ``compression.type``, run as it is by ``send_with``, a burst), each to a
    fresh one-partition topic; bytes on disk per record from the leader's segment (the
    program's untimed warm-up record included, 1 byte), records/s of the burst.

    Raises:
        KafkalabError: a program failed.
    """
    from ..data import flights, record_json

    fl = flights()
    values = [record_json(fl[i % len(fl)], f"r{i}").decode() for i in range(records)]
    rows: list[CompressionRow] = []
    with RunScope("codec") as run:
        path = workloads.run_dir(runscope.run_id()) / f"codec-values-{time.time_ns()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
        for codec, program in programs.items():
            topic = run.topic(codec)
            admin.create_topics({topic: 1})
            sent = send_with(program, topic, records, 1, rate=None, timeout_s=300, values_path=str(path))
            per = perf.log_bytes(topic, 1) / records
            rows.append(CompressionRow(codec, records, round(per, 1), 0.0, round(records / sent.seconds)))
        none = next((r.bytes_on_disk_per_record for r in rows if r.codec == "none"), None)
        for r in rows:
            r.ratio_to_none = round(none / r.bytes_on_disk_per_record, 2) if none else 0.0
        return rows


# ----------------------------------------------------------------------------- acks, idempotence, transactions


@dataclass
class AcksRow:
    acks: str
    records: int
    offsets_known: int
    ack_p50_ms: float
    ack_p99_ms: float


def run_acks_programs(cases: Mapping[str, tuple[Program, int]], rate: float = 200, seconds: float = 1.5,
                      rounds: int = 2) -> list[AcksRow]:
    """Acknowledgement cost with the producers on screen: ``label -> (measuring producer program, the
    topic's min.insync.replicas)``, each program run as it is (``send_with``), paced at ``rate``
    records/s for ``seconds``, the cases alternating ``rounds`` times, one topic per
    ``min.insync.replicas``: how many records each producer learned an offset for, and the
    send-to-ack time."""
    got: dict[str, list[tuple[int, float]]] = {label: [] for label in cases}
    with RunScope("acks") as run:
        topics = {m: run.topic(f"minisr{m}") for m in sorted({m for _, m in cases.values()})}
        for m, t in topics.items():
            admin.create_topics({t: 1}, topic_config={"min.insync.replicas": str(m)})
        for _ in range(rounds):
            for label, (program, m) in cases.items():
                got[label] += send_with(program, topics[m], int(rate * seconds), 100, rate).acks
        rows = []
        for label, acks in got.items():
            p50, p99, _ = perf.percentiles([ms for _, ms in acks])
            rows.append(AcksRow(label, len(acks), sum(1 for off, _ in acks if off >= 0), round(p50, 2), round(p99, 2)))
        return rows


@dataclass
class IdempotenceRow:
    """One burst with ``enable.idempotence`` on or off (acks=all, the Python client), and what
    its batches on the leader's disk carry.

    Attributes:
        records: records in the topic's batches (the burst and its untimed warm-up record).
        records_per_s: the burst's records/s (shown, not compared across machines).
        batches, records_per_batch: data batches in the segment and their mean size.
        producer_ids: the distinct producer ids in the batch headers (-1: none).
        sequences_consecutive: each batch's base sequence is the previous batch's base sequence
            plus its record count (and the first one 0): the broker's duplicate check.
    """

    idempotence: bool
    records: int
    records_per_s: float
    batches: int
    records_per_batch: float
    producer_ids: list[int]
    sequences_consecutive: bool


def program_flag(program: Program, name: str) -> bool | None:
    """The boolean a program writes for setting ``name`` (``"enable.idempotence": True`` ->
    True), or None if it does not write one (``programs.program_settings``)."""
    value = program_settings(program.source).get(name)
    return value if isinstance(value, bool) else None


def run_idempotence_cost(programs: Iterable[Program], messages: int = 10_000,
                         record_size: int = 100) -> list[IdempotenceRow]:
    """Each measuring producer program (the same burst, ``acks=all``, ``enable.idempotence``
    written ``False`` in one and ``True`` in the other; run as it is by ``send_with``) sends
    ``messages`` values to a fresh one-partition topic; each topic's batch headers are read from
    the leader's segment. The idempotent producer stamps every batch with its producer id and the
    sequence number of its first record (KIP-98), fields every v2 batch header has anyway (-1
    without).

    Raises:
        KafkalabError: a program failed, or does not write ``enable.idempotence``.
    """
    rows: list[IdempotenceRow] = []
    with RunScope("idemcost") as run:
        for program in programs:
            on = program_flag(program, "enable.idempotence")
            if on is None:
                raise KafkalabError(f"program {program.name} does not write enable.idempotence")
            topic = run.topic("on" if on else "off")
            admin.create_topics({topic: 1})
            sent = send_with(program, topic, messages, record_size, rate=None, timeout_s=300)
            batches = perf.data_batches(topic, 1)
            expected, consecutive = 0, True
            for x in batches:
                consecutive &= x.base_sequence == expected
                expected = x.base_sequence + x.records_count
            stored = sum(x.records_count for x in batches)  # the burst and its warm-up record
            rows.append(IdempotenceRow(on, stored, round(messages / sent.seconds), len(batches),
                                       round(stored / len(batches), 1), sorted({x.producer_id for x in batches}),
                                       consecutive))
        return rows


@dataclass
class TransactionRow:
    records_per_transaction: int
    records: int
    records_per_s: float
    commits: int
    commit_p50_ms: float
    commit_max_ms: float


def run_transactions(programs: Mapping[int, Program], commits: int = 10) -> list[TransactionRow]:
    """For each ``records per transaction -> program`` (a transactional measuring producer
    program that commits every that many records, run as it is by ``send_with``, a burst),
    ``commits`` transactions' worth of 100-byte records (``k * commits``) to a fresh
    one-partition topic: throughput, and each ``commit_transaction()`` call timed by the program
    (``lab.committed``: it flushes the transaction's records, then the coordinator writes markers
    to each partition).

    Raises:
        KafkalabError: a program failed, or did not commit ``commits`` times.
    """
    rows: list[TransactionRow] = []
    with RunScope("txcost") as run:
        for k, program in programs.items():
            topic = run.topic(f"k{k}")
            admin.create_topics({topic: 1})
            sent = send_with(program, topic, k * commits, 100, rate=None, timeout_s=300)
            if not sent.commit_ms:
                raise KafkalabError(f"program {program.name} timed no commit (lab.committed)")
            rows.append(TransactionRow(k, k * commits, round(k * commits / sent.seconds), len(sent.commit_ms),
                                       round(statistics.median(sent.commit_ms), 2), round(max(sent.commit_ms), 2)))
        return rows


# ----------------------------------------------------------------------------- consumer side


@dataclass
class LatencyResult:
    """End-to-end latency with each consumer setting, and Kafka's own tool beside them."""

    runs: list[Latency]
    java: dict | None

    def to_json(self) -> dict:
        return {"runs": [r.to_json() for r in self.runs], "java": self.java}


def run_latency(producer: Program, consumers: Mapping[str, Program], rate: float = 100, seconds: float = 2.0,
                record_size: int = 100, java_records: int = 200) -> LatencyResult:
    """Every ``label -> consumer program`` (a measuring consumer program, role ``timed_reader``,
    run as it is) reads the same fresh one-partition topic at the same time: the consumers are
    started and connected (``lab.start()``), then the measuring producer program ``producer``
    (run as it is by ``send_with``) sends ``rate * seconds`` records at ``rate`` records/s; each
    latency is a consumer's arrival time minus the record's CreateTime (the producer's clock, the
    same machine), the producer's warm-up record left out. The consumers read the same records
    side by side, so a broker still warming up (a cluster just started) or a busy minute slows
    them alike. Then ``kafka-e2e-latency`` with ``java_records`` records (0: skip).

    Raises:
        KafkalabError: a program failed or records were missing.
    """
    count = max(1, round(rate * seconds))
    run = RunScope("latency")
    readers: dict[str, ReaderRun] = {}
    try:
        topic = run.topic("l")
        admin.create_topics({topic: 1})
        readers = {label: ReaderRun(consumer, topic, count + 1) for label, consumer in consumers.items()}  # + warm-up
        for reader in readers.values():
            reader.ready()
        send_with(producer, topic, count, record_size, rate, timeout_s=seconds + 120)
        out = []
        for label, reader in readers.items():
            lat = reader.result(timeout_s=120).latencies_ms[1:]  # the warm-up record arrives first (one partition)
            if len(lat) < count:
                raise KafkalabError(f"{label}: received {len(lat)} of {count} records")
            out.append(Latency.of(label, lat, rate, {k: v for k in FETCH_KNOBS
                                                     if (v := program_setting(reader.program, k)) is not None}))
        java = None
        if java_records:
            topic = run.topic("java")
            admin.create_topics({topic: 1})
            java = perf.java_e2e_latency(topic, java_records, record_size)
        return LatencyResult(out, java)
    finally:
        for reader in readers.values():
            if reader.child.alive:
                reader.child.kill()
        run.cleanup()


#: The consumer knobs a measuring consumer program writes, shown with each row.
FETCH_KNOBS = ("fetch.min.bytes", "fetch.wait.max.ms", "max.partition.fetch.bytes")


@dataclass
class ConsumerRow:
    """Both clients reading the same topic with one ``max.partition.fetch.bytes`` (bytes)."""

    max_partition_fetch_bytes: int
    python: ConsumeBurst
    java: ConsumeBurst | None

    def to_json(self) -> dict:
        return {"max_partition_fetch_bytes": self.max_partition_fetch_bytes, "python": self.python.to_json(),
                "java": self.java.to_json() if self.java else None}


@dataclass
class ConsumerThroughputResult:
    """Consumers reading the same already-written records with several ``max.partition.fetch.bytes``.

    Attributes:
        messages, record_size: records read (the producer's warm-up record included) and bytes
            per value.
        producer_batch_size: the ``batch.size`` the records were written with, bytes.
        batches, records_per_batch, max_batch_bytes: the topic's data batches on the leader's
            disk (how many; mean records; the largest in bytes, header included). A limit below
            every batch's size makes each Fetch request carry exactly one batch, so such a
            consumer's ``fetch_requests`` is ``batches`` plus the few empty long-poll fetches
            sent after the last record.
        rows: one per ``max.partition.fetch.bytes``, in the order asked.
    """

    messages: int
    record_size: int
    producer_batch_size: int
    batches: int
    records_per_batch: float
    max_batch_bytes: int
    rows: list[ConsumerRow]

    def row(self, max_partition_fetch_bytes: int) -> ConsumerRow:
        return next(r for r in self.rows if r.max_partition_fetch_bytes == max_partition_fetch_bytes)

    def to_json(self) -> dict:
        d = asdict(self)
        d["rows"] = [r.to_json() for r in self.rows]
        return d


#: librdkafka's and Java's ``max.partition.fetch.bytes`` default (CONFIGURATION.md; Consumer Configs).
DEFAULT_PARTITION_FETCH_BYTES = 1_048_576


#: ``fetch.wait.max.ms`` the notebook's throughput readers write (librdkafka's default is 500):
#: how long the broker parks a Fetch that finds no new record. The reads run at the same speed,
#: but after the last record librdkafka sends one parked Fetch every 10 s instead of one every
#: 500 ms, so the statistics report that counts the requests (at most seconds late on a loaded
#: machine) holds one or two empty Fetches, not more.
PARKED_FETCH_MS = 10_000


def run_consumer_throughput(readers: Iterable[Program], messages: int = 2000, record_size: int = 1000,
                            producer_batch_size: int | None = None, java: bool = True) -> ConsumerThroughputResult:
    """Write ``messages`` values of ``record_size`` bytes to a fresh one-partition topic in small
    batches (``producer_batch_size`` bytes, default 4 × ``record_size``: about 3 records a batch),
    then read them all from offset 0 with each measuring consumer program of ``readers`` (role
    ``timed_reader``, run as it is; its row is the ``max.partition.fetch.bytes`` it writes), and
    with ``kafka-consumer-perf-test`` (``perf.java_consume``, ``--fetch-size`` the same bytes)
    when ``java``.

    A fetch returns, per partition, up to ``max.partition.fetch.bytes`` of whole batches, but at
    least the first batch even when it is larger (KIP-74; Kafka Consumer Configs
    ``max.partition.fetch.bytes``), so a limit of one record's size makes each Fetch request
    carry one batch, and the consumer pays a round trip per batch.

    Raises:
        KafkalabError: a burst or a read failed, or a program writes no ``max.partition.fetch.bytes``.
    """
    batch = producer_batch_size or 4 * record_size
    with RunScope("consume") as run:
        topic = run.topic("c")
        admin.create_topics({topic: 1})
        producers.timed_burst({"bootstrap.servers": config.bootstrap_servers(), "log_level": 3, "acks": "1",
                               "batch.size": batch}, topic, messages - 1, b"x" * record_size, poll_every=1000)
        batches = perf.data_batches(topic, 1)
        rows = []
        for program in readers:
            size = program_setting(program, "max.partition.fetch.bytes")
            if size is None:
                raise KafkalabError(f"program {program.name} does not write max.partition.fetch.bytes")
            got = read_with(program, topic, messages)
            conf = {k: v for k in FETCH_KNOBS if (v := program_setting(program, k)) is not None}
            py = ConsumeBurst("confluent-kafka", conf, len(got.latencies_ms), got.value_bytes, max(got.seconds, 1e-3),
                              got.fetch_requests)
            jv = perf.java_consume(topic, messages, size) if java else None
            rows.append(ConsumerRow(size, py, jv))
        return ConsumerThroughputResult(messages, record_size, batch, len(batches),
                                        round(statistics.mean(b.records_count for b in batches), 2),
                                        max(b.size for b in batches), rows)


def consumer_table(result: ConsumerThroughputResult) -> "pd.DataFrame":
    """One row per client and ``max.partition.fetch.bytes``: records/s, MB/s, Fetch requests,
    records per Fetch request."""
    import pandas as pd

    rows = []
    for r in result.rows:
        for b in (r.python, r.java):
            if b is not None:
                rows.append({"max.partition.fetch.bytes": r.max_partition_fetch_bytes, "client": b.client,
                             "records": b.records, "records/s": round(b.records_per_s), "MB/s": round(b.mb_per_s, 2),
                             "fetch requests": b.fetch_requests,
                             "records / fetch": round(b.records_per_fetch, 1) if b.records_per_fetch else None})
    return pd.DataFrame(rows).set_index(["max.partition.fetch.bytes", "client"])


# ----------------------------------------------------------------------------- why it is fast


@dataclass
class ServingResult:
    """A consumer reading back what was just written, and what the leader did meanwhile.

    Attributes:
        bytes_written: the topic's segment bytes on the leader.
        bytes_consumed: bytes of values the consumer received.
        leader: the leader's broker id.
        read_bytes: the leader JVM's ``/proc/<pid>/io`` ``read_bytes`` growth while it served
            (bytes fetched from the disk itself, page cache hits excluded).
        syscalls: system calls the leader made while it served (``strace -c``), e.g.
            ``{"sendfile": n, "read": n}``; empty when not traced.
        segment_is_batches_end_to_end: the leader's ``.log`` file is exactly its batches,
            one after the other (the segment reader found no gap and no trailing bytes).
        tls_bytes_consumed, tls_syscalls: the same read again through the TLS listeners, by
            the ``tls_reader`` program (0 and empty without one).
        resident_before_read: bytes of the leader's segment files in the page cache just
            before the read (``perf.resident_bytes``, mincore): at most ``bytes_written``; what
            is not resident is what the leader may have to read from the disk.
    """

    records: int
    record_size: int
    bytes_written: int
    bytes_consumed: int
    leader: int
    read_bytes: int
    syscalls: dict[str, int] = field(default_factory=dict)
    segment_is_batches_end_to_end: bool = False
    tls_bytes_consumed: int = 0
    tls_syscalls: dict[str, int] = field(default_factory=dict)
    resident_before_read: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def run_serving(writer: Program, reader: Program, tls_reader: Program | None = None, records: int = 100_000,
                record_size: int = 200, trace: bool = True) -> ServingResult:
    """The measuring producer ``writer`` (role ``measuring``, run as it is by ``send_with``) writes
    ``records`` values of ``record_size`` bytes to a fresh one-partition topic; then the measuring
    consumer ``reader`` (role ``timed_reader``, ``read_with``) reads every record back from offset
    0 while the leader's ``/proc/<pid>/io`` is sampled and (``trace``) its
    ``sendfile``/``read``/``write`` calls are counted with strace. With ``tls_reader`` (a copy of
    the reader that writes ``"security.protocol": "SSL"``), the records are read a second time,
    from the same leader, through its TLS listener (the harness gives that program the TLS ports
    and the lab's CA file, ``config.tls_client_conf``).

    Raises:
        KafkalabError: strace missing or not allowed (with ``trace``), a program failed, or
            records missing.
    """
    with RunScope("serving") as run:
        topic = run.topic("s")
        admin.create_topics({topic: 1})
        send_with(writer, topic, records, record_size, rate=None, timeout_s=300)
        leader = coordinators.partition_leaders(topic)[0]
        files = coordinators.leader_log_files(topic, 1)
        written = sum(os.path.getsize(f) for f in files)
        logs = [segments.read_log(f, records=False, check_crc=False) for f in files]
        end_to_end = all(lf.trailing_bytes == 0 and sum(b.batch_length + 12 for b in lf.batches) ==
                         os.path.getsize(lf.path) for lf in logs)
        stored = sum(b.records_count for lf in logs for b in lf.batches)  # the writer's records (and its warm-up one)
        resident = sum(perf.resident_bytes(f) for f in files)
        pid = broker_pid(leader) if trace else None
        before = perf.broker_io(leader)
        got, syscalls = _read_all(reader, topic, stored, pid)
        after = perf.broker_io(leader)
        tls = {k: v for k, v in config.tls_client_conf().items() if k != "security.protocol"}  # addresses only
        tls_got, tls_syscalls = _read_all(tls_reader, topic, stored, pid, tls) if tls_reader else (0, {})
        return ServingResult(records, record_size, written, got, leader, after["read_bytes"] - before["read_bytes"],
                             syscalls, end_to_end, tls_got, tls_syscalls, resident)


def _read_all(program: Program, topic: str, count: int, pid: int | None, addresses: dict[str, str] | None = None,
              timeout_s: float = 120.0) -> tuple[int, dict[str, int]]:
    """Run the measuring consumer ``program`` until ``count`` records of partition 0 of ``topic``
    arrived (``read_with``), counting the system calls of ``pid`` meanwhile (the counter is
    attached before the program starts). Returns (value bytes received, syscall counts)."""
    counter = perf.SyscallCounter(pid, ("sendfile", "read", "write", "pread64")) if pid else None
    with counter if counter is not None else contextlib.nullcontext():
        got = read_with(program, topic, count, timeout_s, addresses)
    return got.value_bytes, counter.counts if counter else {}


def broker_pid(node_id: int) -> int:
    """The JVM pid of broker ``node_id`` (``kafkalab status``)."""
    node = cluster.status().brokers[node_id]
    if not node.pid:
        raise KafkalabError(f"broker {node_id} has no pid on this machine")
    return node.pid


# ----------------------------------------------------------------------------- CLI


def throughput_program(acks: str | None = None, linger_ms: int | None = None, batch_size: int | None = None,
                       compression: str | None = None, idempotence: str | None = None,
                       transactional_batch: int = 0) -> tuple[Program, ProducerSettings]:
    """The program ``kafkalab run throughput`` runs, and the settings Kafka's tool gets: notebook
    10's ``burst_producer`` as saved (``transactional_producer`` with ``RECORDS_PER_TRANSACTION``
    set to ``transactional_batch`` when > 0), each setting given (None: as the program writes it)
    edited into its line (``with_setting``); the Java side gets what the edited program writes
    (``settings_of``).

    Raises:
        KafkalabError: a setting the program does not write, or settings ``ProducerSettings``
            refuses (transactions without acks=all).
    """
    if transactional_batch:
        program = notebook_program("transactional_producer")
        program = program.replace("RECORDS_PER_TRANSACTION = 10", f"RECORDS_PER_TRANSACTION = {transactional_batch}",
                                  name=f"transactional_{transactional_batch}")
    else:
        program = notebook_program("burst_producer")
    edits = {"acks": acks, "linger.ms": linger_ms, "batch.size": batch_size, "compression.type": compression,
             "enable.idempotence": None if idempotence is None else idempotence == "on"}
    for key, value in edits.items():
        if value is not None:
            program = with_setting(program, key, value, name=f"{program.name.removesuffix('_edited')}_edited")
    return program, settings_of(program, transactional_batch)


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("throughput")
@click.option("--messages", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True)
@click.option("--record-size", type=click.IntRange(1, 1_000_000), default=100, show_default=True, help="Bytes per value.")
@click.option("--acks", type=click.Choice(perf.ACKS), default=None, help="Default: as the program writes it.")
@click.option("--linger-ms", type=click.IntRange(0), default=None, help="Default: as the program writes it.")
@click.option("--batch-size", type=click.IntRange(1), default=None, help="Bytes. Default: as the program writes it.")
@click.option("--compression", type=click.Choice(perf.CODECS), default=None, help="Default: as the program writes it.")
@click.option("--idempotence", type=click.Choice(["on", "off"]), default=None, help="Default: as the program writes it.")
@click.option("--transactional-batch", type=click.IntRange(0), default=0, show_default=True,
              help="K > 0: notebook 10's transactional_producer, transactions of K records (Python client only; "
                   "--messages a multiple of K).")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def cli_command(messages: int, record_size: int, acks: str | None, linger_ms: int | None, batch_size: int | None,
                compression: str | None, idempotence: str | None, transactional_batch: int, as_json: bool) -> None:
    """Producer throughput: notebook 10's burst_producer program, as saved on disk (each option given
    edited into its line), beside kafka-producer-perf-test with the settings the program writes.
    The Python row names the settings read from the program that ran."""
    if transactional_batch and messages % transactional_batch:
        raise click.UsageError(f"--messages {messages} is not a multiple of --transactional-batch {transactional_batch}")
    try:
        program, settings = throughput_program(acks, linger_ms, batch_size, compression, idempotence, transactional_batch)
    except KafkalabError as e:
        raise click.UsageError(str(e)) from None
    show_programs(program, also=None if transactional_batch else
                  "and Kafka's kafka-producer-perf-test, with the settings this program writes")
    runscope.require_for_cli()  # after the settings are checked: bad input fails before the cluster is touched
    r = run_throughput(messages, record_size, settings, program=program)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(throughput_table([r]).T.to_string())


#: The notebook that holds the programs the CLI runs (``programs.from_notebook``).
NOTEBOOK = "10_performance"


def notebook_program(name: str) -> Program:
    """Program ``name`` as notebook 10 saves it (its ``%%program`` cell)."""
    from .. import programs

    return programs.from_notebook(NOTEBOOK, name)


def unlingered(paced: Program) -> Program:
    """Notebook 10's ``paced_producer`` with ``linger.ms`` 0 (each record sent at once), as the
    notebook's sections 4 and 5 edit it."""
    return paced.replace('"linger.ms": 200', '"linger.ms": 0', name="unlingered")


def with_fetch(reader: Program, name: str, **knobs: int) -> Program:
    """``reader`` (notebook 10's ``measuring_consumer``) with each knob (``fetch_min_bytes=...``,
    underscores for dots) edited to the value given (``Program.replace`` of its line)."""
    for knob, value in knobs.items():
        reader = with_setting(reader, knob.replace("_", "."), value, name)
    return reader


#: The highest rate, records/s, at which notebook 10's programs measured an end-to-end p50
#: within 5x of ``kafka-e2e-latency``'s in the same run, with no growth over the run, on the
#: 2-core machine the notebook was checked on (``kafkalab run latency --rate R --seconds 5``):
#: below it the latency measured is Kafka's; above it the one Python producer process and the
#: brokers share the cores, requests queue, and the latency grows with the run.
KAFKA_BOUND_RATE = 5000


@click.command("latency")
@click.option("--rate", type=click.FloatRange(1, 100_000), default=100, show_default=True,
              help=f"Records/s. Up to about {KAFKA_BOUND_RATE} the programs measure Kafka's latency here; above, "
                   "their own backlog (compare the two halves' p50).")
@click.option("--seconds", type=click.FloatRange(0.1, 600), default=2.0, show_default=True)
@click.option("--messages", type=click.IntRange(1, 10_000_000), default=None,
              help="Records to send (instead of --seconds: MESSAGES / RATE seconds).")
@click.option("--record-size", type=click.IntRange(1, 1_000_000), default=100, show_default=True)
@click.option("--fetch-min-bytes", type=click.IntRange(1), default=None,
              help="Also measure a consumer with this fetch.min.bytes (and --fetch-wait-max-ms).")
@click.option("--fetch-wait-max-ms", type=click.IntRange(0), default=500, show_default=True)
@click.option("--java-records", type=click.IntRange(0), default=200, show_default=True,
              help="Records for kafka-e2e-latency (0: skip).")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@runscope.checks_cluster_itself
def latency_command(rate: float, seconds: float, messages: int | None, record_size: int, fetch_min_bytes: int | None,
                    fetch_wait_max_ms: int, java_records: int, as_json: bool) -> None:
    """End-to-end latency percentiles (p50, p99, max in ms, and the p50 of each half of the run),
    beside kafka-e2e-latency: notebook 10's measuring_consumer program (as saved, and with the fetch
    knobs edited) reading what its paced_producer (linger.ms 0) sends.

    The programs measure Kafka's latency, not their own, up to about 5000 records/s on the 2-core
    machine notebook 10 was checked on (``KAFKA_BOUND_RATE``: p50 within 5x of kafka-e2e-latency's
    in the same run, the second half no later than the first). Above that, a second half much
    later than the first is the pipeline's own backlog."""
    reader = notebook_program("measuring_consumer")
    consumers = {"defaults (fetch.min.bytes=1)": reader}
    try:
        if fetch_min_bytes:
            consumers[f"fetch.min.bytes={fetch_min_bytes}, fetch.wait.max.ms={fetch_wait_max_ms}"] = with_fetch(
                reader, "held_consumer", fetch_min_bytes=fetch_min_bytes, fetch_wait_max_ms=fetch_wait_max_ms)
        producer = unlingered(notebook_program("paced_producer"))
    except KafkalabError as e:
        raise click.UsageError(str(e)) from None
    show_programs(producer, *consumers.values(),
                  also=f"and Kafka's kafka-e2e-latency ({java_records} records)" if java_records else None)
    runscope.require_for_cli()
    if messages is not None:
        seconds = messages / rate
    r = run_latency(producer, consumers, rate, seconds, record_size, java_records)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    for x in r.runs:
        click.echo(f"{x.label}: p50 {x.p50_ms} ms, p99 {x.p99_ms} ms, max {x.max_ms} ms ({x.records} records at "
                   f"{x.rate:g}/s); p50 of the first half {x.first_half_p50_ms} ms, of the second {x.second_half_p50_ms} ms")
    if r.java:
        click.echo(f"kafka-e2e-latency: p50 {r.java['p50_ms']} ms, p99 {r.java['p99_ms']} ms ({java_records} records, "
                   "one at a time)")


@click.command("consume-throughput")
@click.option("--messages", type=click.IntRange(2, 10_000_000), default=5000, show_default=True,
              help="Records to write and read back.")
@click.option("--record-size", type=click.IntRange(1, 1_000_000), default=1000, show_default=True, help="Bytes per value.")
@click.option("--max-partition-fetch-bytes", "fetch_bytes", type=click.IntRange(1), multiple=True,
              help="Bytes; repeat for more. Default: one record's size, then 1048576 (the default).")
@click.option("--producer-batch-size", type=click.IntRange(1), default=None,
              help="batch.size the records are written with, bytes. Default: 4 x --record-size.")
@click.option("--java/--no-java", default=True, show_default=True, help="Also run kafka-consumer-perf-test.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def consume_command(messages: int, record_size: int, fetch_bytes: tuple[int, ...], producer_batch_size: int | None,
                    java: bool, as_json: bool) -> None:
    """Consumer throughput per max.partition.fetch.bytes: notebook 10's measuring_consumer program
    (fetch.wait.max.ms 10000, max.partition.fetch.bytes edited) beside kafka-consumer-perf-test."""
    reader = with_fetch(notebook_program("measuring_consumer"), "fetching_consumer", fetch_wait_max_ms=PARKED_FETCH_MS)
    readers = [with_fetch(reader, f"fetch_{size}", max_partition_fetch_bytes=size)
               for size in (fetch_bytes or (record_size, DEFAULT_PARTITION_FETCH_BYTES))]
    show_programs(*readers, also="and Kafka's kafka-consumer-perf-test" if java else None)
    r = run_consumer_throughput(readers, messages, record_size, producer_batch_size, java)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"{r.messages} records of {r.record_size} bytes, {r.records_per_batch} records per batch")
    click.echo(consumer_table(r).to_string())


#: ``kafkalab run throughput``, ``kafkalab run latency`` and ``kafkalab run consume-throughput``.
cli_commands = [cli_command, latency_command, consume_command]
