"""Notebook 06, segments, indexes, retention and compaction: the files a broker writes for a
partition, read byte by byte with ``kafkalab.segments``, and the broker changing them.

Each step of the notebook is one function here; ``run_segments_demo`` chains the Spark-free
ones for ``kafkalab run segments_demo --json``. Topics and groups are named per run
(``seg-<run id>-<name>``, ``kafkalab.runscope.RunScope``) and deleted at the end.

Everything happens on topic-level settings, so nothing on the brokers changes: the
teaching cluster only checks retention every 5 s (``log.retention.check.interval.ms``,
``kafka/config/broker.properties``). Record timestamps (CreateTime, set by the producer)
stand in for the passing of time: rolling by ``segment.ms`` and retention by
``retention.ms`` compare record timestamps, not file ages, so "a segment of records from
three hours ago" needs no three-hour wait.

Sources (Kafka 4.3): documentation, Implementation > Log and > Message Format; Design >
Log Compaction; Topic Configs (``segment.bytes``, ``segment.ms``, ``index.interval.bytes``,
``retention.ms``, ``retention.bytes``, ``cleanup.policy``, ``min.cleanable.dirty.ratio``,
``delete.retention.ms``); KIP-1030 (``segment.bytes`` at least 1 MiB in 4.0); KIP-534
(delete horizon); storage ``LogSegment``, ``UnifiedLog``, ``Cleaner``,
``LogCleanerManager``; librdkafka CONFIGURATION.md.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import click
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from .. import admin, config, coordinators, programs, runscope, segments, workloads
from ..errors import KafkalabError
from ..instruments.batches import KeyedRound, RecordRecipe, filler_value
from ..programs import Program
from ..segments import Segment
from ..worker import ProgramSpec, lab_conf
from ..waiting import wait_until
from ..runscope import RunScope

if TYPE_CHECKING:
    import pandas as pd

#: Kafka 4.x minimum of ``segment.bytes`` (KIP-1030; LogConfig ``atLeast(1024 * 1024)``, 4.3.1 and 4.4.0).
MIN_SEGMENT_BYTES = 1024 * 1024
#: Kafka's default ``index.interval.bytes`` (Topic Configs).
INDEX_INTERVAL_BYTES = 4096


# ----------------------------------------------------------------------------- 1. the log directory

#: What each top-level entry of a KRaft broker's log directory is (Kafka 4.3).
DATA_DIR_ENTRIES = {
    "meta.properties": "node.id, cluster.id and directory.id of this log dir (KRaft: version=1; KIP-858)",
    "bootstrap.checkpoint": "initial metadata version, written by kafka-storage format (KIP-778)",
    ".lock": "held by the running broker so no second process opens the dir",
    "cleaner-offset-checkpoint": "per compacted partition: where the cleaner's clean part ends",
    "log-start-offset-checkpoint": "per partition: the log start offset (moved by retention, DeleteRecords)",
    "recovery-point-offset-checkpoint": "per partition: offset up to which data is flushed to disk",
    "replication-offset-checkpoint": "per partition: the high watermark",
}


def classify_entry(name: str, is_dir: bool) -> str:
    """The kind of a top-level entry of a broker's log dir, in words."""
    if name == "__cluster_metadata-0":
        return "KRaft metadata log (the broker replicates it as an observer)"
    if is_dir and name.endswith("-delete"):
        return "deleted partition, renamed until file.delete.delay.ms passes"
    if is_dir and name.endswith("-future"):
        return "replica moving between log dirs"
    if is_dir and name.startswith("__"):
        return "internal topic partition"
    if is_dir:
        return "topic partition"
    return DATA_DIR_ENTRIES.get(name, "other file")


def data_dir_table(data_dir: str | Path) -> "pd.DataFrame":
    """One row per kind of top-level entry in ``data_dir``: how many, examples, what it is."""
    import pandas as pd

    rows = []
    for p in sorted(Path(data_dir).iterdir()):
        rows.append({"kind": classify_entry(p.name, p.is_dir()), "name": p.name})
    df = pd.DataFrame(rows, columns=["kind", "name"])
    return (df.groupby("kind")["name"]
            .agg(count="count", examples=lambda s: ", ".join(sorted(s)[:3]) + (" ..." if len(s) > 3 else ""))
            .sort_values("count", ascending=False))


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java ``.properties`` file as a dict (``meta.properties``)."""
    return config.parse_properties(Path(path).read_text())


def offset_commit_records(partition_dir: str | Path, group_id: str, topic: str) -> list[segments.Record]:
    """Records of a ``__consumer_offsets`` partition folder whose key names ``group_id`` and
    ``topic``: the offset commits (key: version int16, group, topic, partition, decoded by
    ``coordinators.decode_offset_commit_key``; value: the offset and metadata). Read with
    ``kafkalab.segments`` from the files."""
    out = []
    for s in segments.read_partition(partition_dir):
        for r in s.records:
            k = coordinators.decode_offset_commit_key(r.key)
            if k is not None and (k.group_id, k.topic) == (group_id, topic):
                out.append(r)
    return out


# ----------------------------------------------------------------------------- producing


def produce_records(topic: str, records: Iterable[tuple[bytes | None, bytes | None, int | None]],
                    partition: int = 0, conf: dict | None = None, timeout_s: float = 60.0) -> None:
    """Produce ``(key, value, timestamp_ms or None)`` records to one partition with
    confluent-kafka (librdkafka), ``conf`` on top of ``acks=all``, and wait for every delivery:
    the lab writing records a solution or a test reads (the notebook's own writes are its
    programs, ``write_with``). A timestamp given is the record's CreateTime; None lets the
    producer use now.

    Raises:
        KafkalabError: a record was not delivered within ``timeout_s``.
    """
    p = Producer({"bootstrap.servers": config.bootstrap_servers(), "acks": "all", "log_level": 3, **(conf or {})})
    errors: list = []
    for key, value, ts in records:
        while True:
            try:  # timestamp 0: the producer stamps the record
                p.produce(topic, value=value, key=key, partition=partition, timestamp=ts or 0,
                          on_delivery=lambda err, _: errors.append(err) if err is not None else None)
                break
            except BufferError:  # local queue full: let deliveries drain
                p.poll(0.05)
        p.poll(0)
    remaining = p.flush(timeout_s)
    if remaining or errors:
        raise KafkalabError(f"{remaining} records undelivered to {topic}; first error: {errors[:1]}")


def filler(n: int, value_bytes: int, key_prefix: str = "k", timestamp_ms: int | None = None
           ) -> Iterable[tuple[bytes, bytes, int | None]]:
    """``n`` records ``(b"<prefix><i>", value_bytes of filler, timestamp_ms)``. The value is
    varied per record so compression (if any) cannot fold the records into nothing
    (``instruments.batches.filler_value``, the values a ``batches`` program writes)."""
    for i in range(n):
        key = f"{key_prefix}{i}".encode()
        yield key + b":", filler_value(key, value_bytes), timestamp_ms


@dataclass
class ProgramRun:
    """One run of a producer program (``write_with``): the program's name, what the harness
    added to its settings (``lab_conf``), the records it was given (``records``, ``payload_bytes``)
    and the wall time (s) from spawning it to its end."""

    program: str
    lab_conf: dict
    records: int
    payload_bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        """Payload MB (10^6 bytes) per second of the whole run, the process's start included."""
        return self.payload_bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")

    def to_json(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3), "mb_per_s": round(self.mb_per_s, 1)}


#: Notebook 06, home of the producer program the CLI twin runs (``programs.from_notebook``).
NOTEBOOK = "06_segments_retention"


#: The records a ``batches`` program writes: ``Records(count, value_bytes, partition=...,
#: first_timestamp_ms=..., timestamp_step_ms=...)`` (``instruments.batches.RecordRecipe``).
Records = RecordRecipe


def write_with(program: Program, topic: str, *recipes: RecordRecipe, timeout_s: float = 120.0) -> ProgramRun:
    """Run the producer ``program`` (a notebook's ``%%program`` cell, role ``batches``) as it is,
    in one worker process, to write the ``recipes``' records to ``topic``, one recipe after the
    other (``Records(count, value_bytes, ...)``: keys ``k0``..., values of ``value_bytes``,
    timestamps ``first_timestamp_ms + i * timestamp_step_ms`` or now, one partition each), and
    wait for it to end. The harness adds only ``bootstrap.servers`` and ``client.id``; every
    setting that shapes the batches is in the program.

    Raises:
        KafkalabError: no recipe, or the program failed (e.g. a record not delivered), with its
            log's tail.
        WaitTimeout: it ran longer than ``timeout_s``.
    """
    if not recipes:
        raise KafkalabError("write_with needs at least one Records(count, value_bytes) recipe")
    run_id = runscope.run_id()
    client_id = f"{run_id}-{program.name}"
    conf = lab_conf(client_id)
    t0 = time.perf_counter()
    child = workloads.spawn(ProgramSpec(client_id, run_id, str(workloads.run_dir(run_id) / f"{client_id}.jsonl"),
                                        "batches", program.name, program.source, conf=conf, topics=[topic],
                                        options={"recipes": [asdict(r) for r in recipes]}))
    if child.wait(timeout_s) != 0:
        raise KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")
    return ProgramRun(program.name, conf, sum(r.count for r in recipes), sum(r.payload_bytes for r in recipes),
                      time.perf_counter() - t0)


# ----------------------------------------------------------------------------- reading a replica


def replica_segments(topic: str, partition: int = 0, broker: int | None = None, records: bool = True
                     ) -> tuple[int, list[Segment]]:
    """``(broker id, segments)`` of a replica read from disk (default: the leader's), CRC-checked.

    Raises:
        KafkalabError: no replica folder; CorruptBatchError: a CRC mismatch.
    """
    if broker is None:
        broker = coordinators.partition_leader(topic, partition)
    b, folder = segments.replica_dir(topic, partition, broker)
    return b, segments.read_partition(folder, records=records, verify=True)


def segment_table(segs: Sequence[Segment]) -> "pd.DataFrame":
    """One row per segment: file name, base and last offset, batches, records, bytes of
    batches, index and time-index entries, and the largest record timestamp (ms)."""
    import pandas as pd

    rows = [{
        "file": s.log.name,
        "base_offset": s.base_offset,
        "last_offset": s.next_offset - 1,
        "batches": len(s.batches),
        "records": sum(b.records_count for b in s.batches),
        "bytes": s.size,
        "index entries": len(s.index),
        "timeindex entries": len(s.timeindex),
        "largest timestamp": s.largest_timestamp,
    } for s in segs]
    return pd.DataFrame(rows).set_index("file")


def batches_table(segs: Sequence[Segment]) -> "pd.DataFrame":
    """Every batch of ``segs`` with the JSON fields of ``kafkalab segments`` plus its segment."""
    import pandas as pd

    return pd.DataFrame([{"segment": s.base_offset, **b.to_json()} for s in segs for b in s.batches])


def segment_paths(seg: Segment) -> list[Path]:
    """The segment's ``.log``, ``.index`` and ``.timeindex`` files that exist (for
    ``dumplog.run``: ``kafka-dump-log`` on all three)."""
    return [seg.log.with_suffix(s) for s in segments.SEGMENT_SUFFIXES if seg.log.with_suffix(s).exists()]


# ----------------------------------------------------------------------------- configs and offsets


def alter_topic_config(topic: str, timeout_s: float = 15.0, **settings: str | int) -> None:
    """Set topic configs (IncrementalAlterConfigs). Keyword names use ``_`` for ``.``:
    ``alter_topic_config(t, retention_bytes=1048576)`` sets ``retention.bytes``.

    Raises:
        KafkaException: the brokers rejected a value.
    """
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in settings.items()])
    for fut in workloads.admin().incremental_alter_configs([res], request_timeout=timeout_s).values():
        fut.result(timeout=timeout_s + 5)


def wait_log_start(topic: str, partition: int, expected: int, timeout_s: float = 20.0) -> float:
    """Until the partition's log start offset (ListOffsets earliest) is ``expected``; returns
    the seconds waited.

    Raises:
        WaitTimeout: with the last log start offset seen.
    """
    t0 = time.monotonic()
    last: list[int] = []

    def moved() -> bool:
        last[:] = [admin.list_offsets([(topic, partition)], "earliest")[(topic, partition)]]
        return last[0] == expected

    wait_until(moved, timeout_s=timeout_s, interval_s=0.25,
               what=f"log start offset of {topic}-{partition} to reach {expected}",
               on_timeout=lambda: f"last log start offset: {last}")
    return time.monotonic() - t0


def wait_segments(topic: str, partition: int, bases: Sequence[int], broker: int | None = None,
                  timeout_s: float = 20.0) -> list[Segment]:
    """Until the replica's ``.log`` files (default: the leader's) have exactly base offsets
    ``bases``; returns those segments (headers only, CRC-checked).

    Raises:
        WaitTimeout: with the base offsets last seen.
    """
    last: list[int] = []

    if broker is None:
        broker = coordinators.partition_leader(topic, partition)

    def match():
        _, folder = segments.replica_dir(topic, partition, broker)
        last[:] = [f.base_offset for f in segments.segment_files(folder) if f.kind == "log"]
        return last == list(bases)

    wait_until(match, timeout_s=timeout_s, interval_s=0.25,
               what=f"segments {list(bases)} in the replica of {topic}-{partition}",
               on_timeout=lambda: f"last seen: {last}")
    return replica_segments(topic, partition, broker, records=False)[1]


# ----------------------------------------------------------------------------- consumers


def _consumer(conf: dict | None = None) -> Consumer:
    return Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": f"kafkalab-{runscope.run_id()}",
                     "enable.auto.commit": False, "log_level": 3, **(conf or {})})


def first_offset_from(topic: str, partition: int, offset: int, timeout_s: float = 15.0) -> int:
    """Assign one consumer to ``topic``-``partition`` at ``offset`` (a seek) and return the
    offset of the first record it receives.

    Raises:
        WaitTimeout: no record within ``timeout_s``; KafkalabError: a consumer error.
    """
    with _consumer() as c:
        c.assign([TopicPartition(topic, partition, offset)])
        return _first_offset(c, timeout_s, f"a record of {topic}-{partition} from offset {offset}")


def _first_offset(c: Consumer, timeout_s: float, what: str) -> int:
    def poll():
        msg = c.poll(0.2)
        if msg is None:
            return None
        if msg.error() is not None:
            raise KafkalabError(f"consumer error: {msg.error()}")
        return msg.offset() + 1  # +1: offset 0 is falsy

    return wait_until(poll, timeout_s=timeout_s, interval_s=0.0, what=what) - 1


class FetchPositions:
    """A consumer's ``stats_cb``: from librdkafka's statistics (``statistics.interval.ms``; the
    ``topics.<topic>.partitions.<p>`` fields ``fetch_state`` and ``next_offset``, librdkafka
    STATISTICS.md), where the consumer fetches each partition from. It tells where a consumer
    resumed when no record comes to say so (``auto.offset.reset=latest`` at the end of a
    partition): ``Consumer.position`` only moves when a record is delivered."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], dict] = {}

    def __call__(self, stats_json: str) -> None:
        for topic, t in json.loads(stats_json).get("topics", {}).items():
            for p, part in t.get("partitions", {}).items():
                if int(p) >= 0:  # -1: librdkafka's internal UA partition
                    self.partitions[(topic, int(p))] = part

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The offset the consumer fetches next, once it fetches (``fetch_state`` ``active``);
        None before."""
        part = self.partitions.get((topic, partition), {})
        offset = part.get("next_offset", -1)
        return offset if part.get("fetch_state") == "active" and offset >= 0 else None

    def at_end(self, topic: str, partition: int) -> int | None:
        """The fetch position if the consumer fetches at the end of the partition with nothing
        fetched and not yet delivered (``next_offset == hi_offset``, the high watermark it last
        heard of, and ``fetchq_cnt`` 0); None otherwise."""
        offset = self.next_offset(topic, partition)
        part = self.partitions.get((topic, partition), {})
        at_end = offset is not None and offset == part.get("hi_offset") and part.get("fetchq_cnt", 1) == 0
        return offset if at_end else None


def wait_resumed(consumer: Consumer, positions: FetchPositions, topic: str, partition: int, committed: int,
                 timeout_s: float = 15.0) -> int:
    """Poll ``consumer`` (assigned ``topic``-``partition``, made with ``stats_cb=positions``)
    until it shows where it resumed: the offset of its first record, or, with no record to
    receive, its fetch position once it fetches at the end of the partition (``at_end``) from
    another offset than ``committed`` (it reset to the end). Returns it.

    Raises:
        KafkalabError: the consumer got an error (``auto.offset.reset=error``: ``_AUTO_OFFSET_RESET``).
        WaitTimeout: neither within ``timeout_s``.
    """
    def resumed():
        msg = consumer.poll(0.1)
        if msg is not None:
            if msg.error() is not None:
                raise KafkalabError(f"consumer on {topic}-{partition}: {msg.error()}")
            return msg.offset() + 1  # +1: offset 0 is falsy
        fetching = positions.at_end(topic, partition)
        if fetching is not None and fetching != committed:
            return fetching + 1
        return None

    return wait_until(resumed, timeout_s=timeout_s, interval_s=0.0,
                      what=f"a consumer to resume on {topic}-{partition}",
                      on_timeout=lambda: f"last statistics: {positions.partitions.get((topic, partition), {}).get('fetch_state')} "
                                         f"next_offset={positions.next_offset(topic, partition)}") - 1


def resume_group(group_id: str, topic: str, partition: int, reset: str, timeout_s: float = 15.0) -> int:
    """A consumer of ``group_id`` resumes ``topic``-``partition`` from its committed offset with
    ``auto.offset.reset=reset``; returns where it resumes (``wait_resumed``).

    If the committed offset still exists, that is where it resumes. If retention deleted it,
    the first fetch fails with OFFSET_OUT_OF_RANGE and the consumer resets: ``earliest`` to
    the log start offset (returned: the offset of the first record it receives), ``latest``
    to the high watermark (returned: the fetch position librdkafka reports in its statistics,
    ``next_offset``, once it differs from the committed offset: there is nothing to receive
    there). With ``error`` (Java: ``none``) the consumer gets an error instead.

    Raises:
        KafkalabError: the consumer got an error (``reset="error"``: ``_AUTO_OFFSET_RESET``).
        WaitTimeout: no position within ``timeout_s``.
    """
    committed = coordinators.committed_offsets(group_id, topic).get(partition, -1001)
    positions = FetchPositions()
    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": group_id,
                  "auto.offset.reset": reset, "enable.auto.commit": False, "log_level": 3,
                  "statistics.interval.ms": 100, "stats_cb": positions})
    try:
        c.assign([TopicPartition(topic, partition)])  # no offset given: start from the committed one
        return wait_resumed(c, positions, topic, partition, committed, timeout_s)
    finally:
        c.close()


def offsets_for_times(topic: str, partition: int, timestamp_ms: int, timeout_s: float = 10.0) -> int:
    """``Consumer.offsets_for_times``: the earliest offset whose timestamp is >= ``timestamp_ms``
    (ms since the epoch; ListOffsets with a timestamp), or -1 if no record is that recent.

    Raises:
        KafkalabError: the broker answered with an error for the partition.
    """
    with _consumer() as c:
        (tp,) = c.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)], timeout=timeout_s)
        if tp.error is not None:
            raise KafkalabError(f"offsets_for_times({topic}-{partition}, {timestamp_ms}): {tp.error}")
        return tp.offset


# ----------------------------------------------------------------------------- compaction

#: Topic settings of the compaction demo: teaching values, Kafka's defaults in the comments.
COMPACTION_CONFIG = {
    "cleanup.policy": "compact",          # default delete
    "segment.ms": "60000",                # default 7 days: roll once a record is 60 s newer than the segment's first
    "min.cleanable.dirty.ratio": "0.01",  # default 0.5: clean once 1 % of the log is dirty
    "delete.retention.ms": "10000",       # default 1 day: a tombstone stays readable 10 s after its first cleaning
}
#: Seconds between rounds of the scenario, in record time: more than ``segment.ms``, so
#: each round starts a new segment.
ROUND_GAP_MS = 61_000


@dataclass
class CompactionScenario:
    """Two single-partition topics written the same records by one producer ``program`` (a
    notebook's ``%%program`` cell, role ``batches``: ``lab.rounds()``): ``compacted``
    (``COMPACTION_CONFIG``) and ``control`` (same settings but ``cleanup.policy=delete``, keeps
    everything).

    ``written``: ``(offset, key, value)`` of every record, in offset order (the same offsets in
    both topics); ``round_starts``: first offset of each round; each round has record
    timestamps ``ROUND_GAP_MS`` after the previous one, so each starts a new segment and the
    round before it becomes cleanable.
    """

    compacted: str
    control: str
    t0_ms: int
    keys: list[str]
    program: Program | None = None
    written: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    round_starts: list[int] = field(default_factory=list)
    runs: list[ProgramRun] = field(default_factory=list)

    def next_round(self, updates: Sequence[str] = (), label: str = "", deletes: Sequence[str] = (),
                   repeat: int = 1, after: int = 0) -> KeyedRound:
        """The round that follows the ones written and ``after`` more not yet written: stamped
        ``ROUND_GAP_MS`` after the previous one; ``repeat`` times a value ``"<label><n>:<key>"``
        for each key of ``updates``, then a tombstone for each key of ``deletes``."""
        ts = self.t0_ms + (len(self.round_starts) + after) * ROUND_GAP_MS
        return KeyedRound(ts, list(updates), label, repeat, list(deletes))

    def write_round(self, updates: Sequence[str] = (), label: str = "", deletes: Sequence[str] = (),
                    repeat: int = 1) -> ProgramRun:
        """Write one round (``next_round``) with the scenario's program.

        Raises:
            KafkalabError: the program failed, or the two topics did not get the same offsets.
        """
        return self.write_rounds([self.next_round(updates, label, deletes, repeat)])

    def write_rounds(self, rounds: Sequence[KeyedRound], timeout_s: float = 120.0) -> ProgramRun:
        """Run the scenario's ``program`` as it is, in one worker process, to write ``rounds`` to
        both topics (``lab.topics``: compacted, control), and wait for it to end. The offsets
        each record got follow from the end offsets before and after (ListOffsets): one
        partition per topic, written by this program alone, with ``enable.idempotence=true`` in
        the program (no duplicate on a retry).

        Raises:
            KafkalabError: no program, the program failed (its log's tail), or a topic did not
                grow by exactly the records written (a duplicate or a loss).
        """
        if self.program is None:
            raise KafkalabError("a CompactionScenario writes with a program: pass program=... (the notebook's cell)")
        topics = [self.compacted, self.control]
        before = {t: o for (t, _), o in admin.list_offsets([(t, 0) for t in topics]).items()}
        recs = [rec for r in rounds for rec in r.records()]
        run_id = runscope.run_id()
        client_id = f"{run_id}-{self.program.name}"
        conf = lab_conf(client_id)
        t0 = time.perf_counter()
        child = workloads.spawn(ProgramSpec(client_id, run_id, str(workloads.run_dir(run_id) / f"{client_id}.jsonl"),
                                            "batches", self.program.name, self.program.source, conf=conf, topics=topics,
                                            options={"rounds": [asdict(r) for r in rounds]}))
        if child.wait(timeout_s) != 0:
            raise KafkalabError(f"program {self.program.name} exited {child.returncode}:\n{child.log_tail()}")
        after = {t: o for (t, _), o in admin.list_offsets([(t, 0) for t in topics]).items()}
        if len(set(before.values())) != 1 or any(after[t] - before[t] != len(recs) for t in topics):
            raise KafkalabError(f"{len(recs)} records written; end offsets before {before}, after {after}: "
                                f"the two topics should grow by exactly that many, from the same offset")
        start = before[self.compacted]
        for r in rounds:
            self.round_starts.append(start)
            n = len(r.records())
            self.written += [(start + i, k, v) for i, (k, v) in enumerate(r.records())]
            start += n
        run = ProgramRun(self.program.name, conf, 2 * len(recs), 2 * sum(len(k) + len(v or b"") for k, v in recs),
                         time.perf_counter() - t0)
        self.runs.append(run)
        return run

    @property
    def active_base(self) -> int:
        """Base offset of the active segment (the last round's first offset): the cleaner
        cleans only below it."""
        return self.round_starts[-1]

    def expected(self, drop_tombstones: bool) -> list[tuple[int, bytes, bytes | None]]:
        """What the compacted topic holds once everything below ``active_base`` is cleaned
        (``segments.compacted_view``)."""
        return segments.compacted_view(self.written, self.active_base, drop_tombstones)

    def latest_values(self) -> dict[str, str]:
        """Key -> latest value of every key whose latest record is not a tombstone."""
        latest: dict[bytes, bytes | None] = {}
        for _, k, v in self.written:
            latest[k] = v
        return {k.decode(): v.decode() for k, v in latest.items() if v is not None}


def start_compaction(run: RunScope, program: Program, keys: int = 100, updates: int = 10, deletes: int = 20
                     ) -> CompactionScenario:
    """Create the two topics and write three rounds with ``program`` (a ``%%program`` cell of
    role ``batches`` that writes ``lab.rounds()`` to ``lab.topics``, e.g. notebook 06's
    ``compaction_producer``), record times ``t0``, ``t0+61 s``, ``t0+122 s``, with ``t0`` ten
    minutes ago:

    1. ``updates`` values for each of ``keys`` keys (``k000``...);
    2. tombstones for the first ``deletes`` keys and a new value for the next ``deletes``;
    3. a new value for the next ``deletes`` keys: it rolls round 2's segment, so rounds 1-2
       become cleanable and the log cleaner starts on its own schedule
       (``log.cleaner.backoff.ms`` between idle checks, 15 s by default).

    Raises:
        KafkalabError: the program failed or the topics' offsets disagree (``write_rounds``).
    """
    names = [f"k{i:03d}" for i in range(keys)]
    scn = CompactionScenario(run.topic("compacted"), run.topic("control"), int(time.time() * 1000) - 600_000, names,
                             program)
    admin.create_topics({scn.compacted: 1}, topic_config=COMPACTION_CONFIG)
    admin.create_topics({scn.control: 1}, topic_config={**COMPACTION_CONFIG, "cleanup.policy": "delete"})
    scn.write_rounds([scn.next_round(names, "r", repeat=updates),
                      scn.next_round(names[deletes:2 * deletes], "u", deletes=names[:deletes], after=1),
                      scn.next_round(names[2 * deletes:3 * deletes], "v", after=2)])
    return scn


def closed_records(segs: Sequence[Segment]) -> list[segments.Record]:
    """Records of every segment but the last (the active one, which the cleaner never touches)."""
    return [r for s in segs[:-1] for r in s.records]


def wait_cleaned(topic: str, partition: int, expected_records: int, timeout_s: float = 45.0,
                 broker: int | None = None) -> tuple[list[Segment], float]:
    """Until the replica's closed segments (default: the leader's) hold exactly
    ``expected_records`` records, i.e. the cleaner has rewritten them; returns the segments
    (with records) and the seconds waited.

    Raises:
        WaitTimeout: with the count last seen.
    """
    t0 = time.monotonic()
    last: list = []

    def cleaned():
        try:
            _, segs = replica_segments(topic, partition, broker)
        except FileNotFoundError:  # the cleaner swapped files while we read
            return None
        last[:] = [len(closed_records(segs))]
        return segs if last[0] == expected_records else None

    segs = wait_until(cleaned, timeout_s=timeout_s, interval_s=0.25,
                      what=f"{expected_records} records in the closed segments of {topic}-{partition}",
                      on_timeout=lambda: f"records last seen there: {last}")
    return segs, time.monotonic() - t0


# ----------------------------------------------------------------------------- why it is fast


@dataclass
class WriteRate:
    """A sequential write of ``total_bytes`` in ``block_bytes`` blocks to a new file:
    ``seconds`` until ``write`` returned for every block (page cache), and with ``fsync`` the
    time until the data was on the device."""

    total_bytes: int
    block_bytes: int
    fsync: bool
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.total_bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")

    def to_json(self) -> dict:
        return {**asdict(self), "mb_per_s": round(self.mb_per_s, 1)}


def raw_write_rate(folder: str | Path, total_bytes: int = 128 * 1024 * 1024, block_bytes: int = 1024 * 1024,
                   fsync: bool = False) -> WriteRate:
    """Write ``total_bytes`` of random bytes sequentially to a temporary file in ``folder``
    (the same file system as the brokers' data) and time it; the file is deleted afterwards.
    With ``fsync`` the time includes ``os.fsync``: the device's sustained rate; without, the
    rate of copying into the page cache, which is what a broker's append costs (Kafka does not
    fsync per write: ``flush.messages``/``flush.ms`` default to Long.MAX_VALUE)."""
    block = os.urandom(block_bytes)
    path = Path(folder) / f".kafkalab-write-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as fh:
            written = 0
            while written < total_bytes:
                written += fh.write(block)
            if fsync:
                os.fsync(fh.fileno())
        return WriteRate(written, block_bytes, fsync, time.perf_counter() - t0)
    finally:
        path.unlink(missing_ok=True)


def appended_back_to_back(segs: Sequence[Segment]) -> bool:
    """True if in every segment each batch starts where the previous one ended, the first at
    position 0, and nothing but whole batches is in the file: the log is only ever appended to."""
    for s in segs:
        pos = 0
        for b in s.batches:
            if b.position != pos:
                return False
            pos = b.next_position
        if pos != s.log.stat().st_size - s.trailing_bytes:
            return False
    return True


# ----------------------------------------------------------------------------- the CLI's version


@dataclass
class SegmentsDemoResult:
    """What ``run_segments_demo`` saw; each field is a claim of notebook 06."""

    run_id: str
    segment_bytes_below_minimum_rejected: bool
    rolled_segments: list[int]
    roll_rule_holds: bool
    index_entries: int
    batches: int
    index_matches_rule: bool
    lookup_target: int
    lookup_batch: list[int]
    headers_scanned: int
    consumer_first_offset: int
    offsets_for_times_agrees: bool
    size_retention_deleted: list[int]
    log_start_offset: int
    other_partition_log_start: int
    lagging_group_resumed_at: int
    records_never_seen: int
    produce: dict = field(default_factory=dict)
    raw_write: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def run_segments_demo(timeout_s: float = 30.0, program: Program | None = None) -> SegmentsDemoResult:
    """The Spark-free part of notebook 06 on fresh topics, deleted afterwards: roll by size,
    the sparse index and a lookup by hand, offsets for times, retention by size with a lagging
    consumer, and produce throughput beside the raw sequential write rate. ``program``: the
    producer that writes the records (default: the notebook's ``batch_producer`` cell, as saved)."""
    if program is None:
        program = programs.from_notebook(NOTEBOOK, "batch_producer")
    with RunScope("seg") as run:
        rejected = False
        try:
            admin.create_topics({run.topic("too-small"): 1}, topic_config={"segment.bytes": str(MIN_SEGMENT_BYTES // 2)})
        except KafkalabError:
            rejected = True
        roll = run.topic("roll")
        admin.create_topics({roll: 1}, topic_config={"segment.bytes": str(MIN_SEGMENT_BYTES)})
        write_with(program, roll, Records(3300, 1000))
        _, segs = replica_segments(roll)
        rule = all(s.size <= MIN_SEGMENT_BYTES < s.size + n.batches[0].size for s, n in zip(segs, segs[1:]))

        idx = run.topic("index")
        admin.create_topics({idx: 1})
        t0 = int(time.time() * 1000) - 3_600_000
        write_with(program, idx, Records(2000, 200, first_timestamp_ms=t0, timestamp_step_ms=1000))
        _, isegs = replica_segments(idx)
        seg = isegs[0]
        target = 1234
        hit = segments.lookup_offset(seg.index, target)
        scan = segments.scan_for_offset(seg.log, target, hit.position)
        ts = t0 + 1234 * 1000 + 500
        by_hand = segments.offset_for_timestamp(isegs, ts).offset

        sized = run.topic("sized")
        admin.create_topics({sized: 2}, topic_config={"segment.bytes": str(MIN_SEGMENT_BYTES)})
        stats = write_with(program, sized, Records(4600, 1000, partition=0), Records(300, 1000, partition=1))
        group = run.group("lagging")
        coordinators.commit_offset(group, sized, 0, 100)
        _, before = replica_segments(sized, 0, records=False)
        retention = MIN_SEGMENT_BYTES * 3 // 2
        deleted = segments.size_retention_deletes([(s.base_offset, s.size) for s in before], retention)
        survivors = [s.base_offset for s in before if s.base_offset not in deleted]
        alter_topic_config(sized, retention_bytes=retention)
        wait_log_start(sized, 0, survivors[0], timeout_s=timeout_s)
        resumed = resume_group(group, sized, 0, "earliest")
        raw = raw_write_rate(config.cluster_dir(), 64 * 1024 * 1024)
        return SegmentsDemoResult(
            run_id=run.run_id,
            segment_bytes_below_minimum_rejected=rejected,
            rolled_segments=[s.base_offset for s in segs],
            roll_rule_holds=rule,
            index_entries=len(seg.index), batches=len(seg.batches),
            index_matches_rule=seg.index == segments.expected_offset_index(seg.batches),
            lookup_target=target,
            lookup_batch=[scan.batch.base_offset, scan.batch.last_offset] if scan.batch else [],
            headers_scanned=scan.headers_read,
            consumer_first_offset=first_offset_from(idx, 0, target),
            offsets_for_times_agrees=offsets_for_times(idx, 0, ts) == by_hand,
            size_retention_deleted=deleted,
            log_start_offset=admin.list_offsets([(sized, 0)], "earliest")[(sized, 0)],
            other_partition_log_start=admin.list_offsets([(sized, 1)], "earliest")[(sized, 1)],
            lagging_group_resumed_at=resumed,
            records_never_seen=resumed - 100,
            produce=stats.to_json(),
            raw_write=raw.to_json(),
        )


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("segments_demo")
@click.option("--timeout", "timeout_s", type=float, default=30.0, show_default=True,
              help="Seconds to wait for retention to delete segments.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cli_command(timeout_s: float, as_json: bool) -> None:
    """Notebook 06 without Spark: rolling, the sparse index, retention, write rates. The
    records are written by the notebook's batch_producer program."""
    program = programs.from_notebook(NOTEBOOK, "batch_producer")
    show_programs(program)
    r = run_segments_demo(timeout_s, program=program)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"segment.bytes below 1 MiB rejected (KIP-1030): {r.segment_bytes_below_minimum_rejected}")
    click.echo(f"3.3 MB in 1 MiB segments: base offsets {r.rolled_segments}; roll rule holds: {r.roll_rule_holds}")
    click.echo(f"index: {r.index_entries} entries for {r.batches} batches, as the rule predicts: {r.index_matches_rule}")
    click.echo(f"offset {r.lookup_target}: batch {r.lookup_batch} after {r.headers_scanned} headers; "
               f"a consumer seeking there first gets {r.consumer_first_offset}")
    click.echo(f"offsets_for_times agrees with the lookup by hand: {r.offsets_for_times_agrees}")
    click.echo(f"retention.bytes deleted segments {r.size_retention_deleted}; log start {r.log_start_offset}, "
               f"other partition {r.other_partition_log_start}")
    click.echo(f"lagging group (committed 100) resumed at {r.lagging_group_resumed_at}: "
               f"{r.records_never_seen} records never seen")
    click.echo(f"produce {r.produce['mb_per_s']} MB/s vs raw sequential write {r.raw_write['mb_per_s']} MB/s")
