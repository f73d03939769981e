"""Notebook 05's measuring side: the exactly-once audit, control markers on disk (the
transaction coordinator's address is ``kafkalab.coordinators``), and the run of Spark as a stage
(``run_streaming_stage``: its Kafka source and sink are the notebook's).

Pure functions (no cluster) are tested on planted data in ``tests/test_transactions_analysis.py``;
``spark_*`` functions take a SparkSession and return small results, computed by Spark. The
plots are in ``transactions_plots``. This module reads ``transactions.EosResult`` objects by
attribute and never imports the run module (the arrow points run -> analysis).

The audit is the one Kafka's own system test runs on a transactional copy job
(``tests/kafkatest/tests/core/transactions_test.py``: "output set equals input set" and "no
duplicates"), in Jepsen's words (jepsen-io/jepsen ``jepsen/tests/kafka.clj``): a *lost write*
is an input record missing from the output, a *duplicate* an input record present more than
once, an *aborted read* a record of an aborted transaction that a read_committed reader saw.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ..errors import KafkalabError

if TYPE_CHECKING:
    from typing import Any, Callable

    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from ..dumplog import DumpedRecord
    from ..ledger import Event

    #: A ``transactions.EosResult``, read by attribute (``mode``, ``input_topic``,
    #: ``output_topic``, ``ledgers``).
    EosResult = Any


# ----------------------------------------------------------------------------- the audit


@dataclass
class Verdict:
    """Output versus input, by record id.

    Attributes:
        input: distinct record ids in the input.
        output: output records (rows, copies counted).
        distinct_output: distinct record ids in the output.
        duplicates: extra copies: output records beyond the first of each id
            (``output - distinct_output``).
        duplicated_ids: ids present more than once (Jepsen: duplicate).
        lost: input ids missing from the output (Jepsen: lost write).
        unexpected: output ids that are not input ids (a transform bug, or another run's data).
        left_read: output records read at positions known to be left uncommitted (records of
            aborted transactions), when the audit was given them (``spark_verdicts``); else 0.
    """

    input: int
    output: int
    distinct_output: int
    duplicates: int
    duplicated_ids: int
    lost: int
    unexpected: int
    left_read: int = 0

    @property
    def exactly_once(self) -> bool:
        """Kafka's system-test verdict: output set equals input set and no duplicates."""
        return self.duplicates == 0 and self.lost == 0 and self.unexpected == 0

    def to_json(self) -> dict:
        """The counts and ``exactly_once`` as a JSON-ready dict."""
        return {**asdict(self), "exactly_once": self.exactly_once}


def audit_ids(input_ids: Iterable[str], output_ids: Iterable[str]) -> Verdict:
    """Compare output record ids (one per output record, repeats kept) with the input ids.

    Args:
        input_ids: record ids of the input (repeats are ignored: the input is a set).
        output_ids: record ids of every output record read.

    Returns:
        A ``Verdict``.
    """
    inputs = set(input_ids)
    counts = Counter(output_ids)
    out = set(counts)
    return Verdict(
        input=len(inputs),
        output=sum(counts.values()),
        distinct_output=len(out),
        duplicates=sum(n - 1 for n in counts.values()),
        duplicated_ids=sum(1 for n in counts.values() if n > 1),
        lost=len(inputs - out),
        unexpected=len(out - inputs),
    )


def spark_ids(df: "DataFrame") -> "DataFrame":
    """A Kafka-source DataFrame (``kafkalab.spark.read_topic``) -> columns ``record_id``
    (from the JSON value's ``$.record_id``), ``partition``, ``offset``."""
    from pyspark.sql import functions as F

    return df.select(F.get_json_object(F.col("value").cast("string"), "$.record_id").alias("record_id"),
                     "partition", "offset")


def spark_ids_with_topic(df: "DataFrame") -> "DataFrame":
    """``spark_ids`` plus the ``topic`` column (for a read of several topics at once)."""
    from pyspark.sql import functions as F

    return df.select("topic", F.get_json_object(F.col("value").cast("string"), "$.record_id").alias("record_id"),
                     "partition", "offset")


def spark_verdicts_of(inputs: "DataFrame", outputs: "DataFrame") -> dict[str, Verdict]:
    """The core of ``spark_verdicts``: ``inputs`` has columns ``view``, ``record_id``;
    ``outputs`` has ``view``, ``record_id`` and ``is_left`` (1 for a record read at a position
    left uncommitted, else 0 or null). The counts are ``kafkalab.audit.input_against_output``
    (one Spark job with two aggregations and no join).

    Returns:
        View name -> ``Verdict`` for every view that has input or output rows.
    """
    from .. import audit

    result = audit.input_against_output(inputs, outputs, "view", "record_id").collect()
    return {r["view"]: Verdict(**{k: int(r[k] or 0) for k in r.asDict() if k != "view"}) for r in result}


def spark_verdicts(inputs: "Mapping[str, DataFrame]", outputs: "Mapping[str, DataFrame]",
                   left: "Mapping[str, DataFrame] | None" = None) -> dict[str, Verdict]:
    """``audit_ids`` for several views at once, computed by Spark in one job
    (``spark_verdicts_of``).

    Args:
        inputs: view name -> DataFrame with a ``record_id`` column (the input of that view).
        outputs: view name -> DataFrame with ``record_id`` (one row per output record) and, when
            ``left`` names the view, ``partition`` and ``offset``.
        left: view name -> DataFrame of ``partition``, ``offset``: output positions that were
            never committed (records of aborted transactions). The verdict's ``left_read``
            counts the view's records at those positions (Jepsen G1a, aborted read, when the
            view claims read_committed).

    Returns:
        View name -> ``Verdict``, for every view in ``outputs``.

    Raises:
        KeyError: a view of ``outputs`` has no input.

    Source: Kafka ``tests/kafkatest/tests/core/transactions_test.py`` (output set equals input
    set, no duplicates); jepsen-io/jepsen ``kafka.clj`` (aborted read).
    """
    from functools import reduce

    from pyspark.sql import functions as F

    left = left or {}
    ins = reduce(lambda a, b: a.unionByName(b),
                 [inputs[v].select(F.lit(v).alias("view"), "record_id") for v in outputs])
    outs = []
    for v, df in outputs.items():
        if v in left:
            marks = F.broadcast(left[v].select("partition", "offset").distinct().withColumn("is_left", F.lit(1)))
            o = df.join(marks, ["partition", "offset"], "left").select(F.lit(v).alias("view"), "record_id", "is_left")
        else:
            o = df.select(F.lit(v).alias("view"), "record_id", F.lit(0).alias("is_left"))
        outs.append(o)
    found = spark_verdicts_of(ins, reduce(lambda a, b: a.unionByName(b), outs))
    return {v: found.get(v, Verdict(0, 0, 0, 0, 0, 0, 0)) for v in outputs}


# ----------------------------------------------------------------------------- what the ledger says


@dataclass
class Incarnation:
    """One processor process, from its ledger.

    ``produced``: output records it produced (and flushed); ``uncommitted``: those produced
    after its last commit, so never covered by a commit of its own (the records a crash leaves
    in an aborted transaction, or, at-least-once, the records a restart produces again);
    ``uncommitted_offsets``: their ``(partition, offset)`` in the output topic;
    ``sink_writes``: sink rows it wrote (``processed``); ``uncommitted_sink_writes``: those
    written after its last commit (rows a replay writes again); ``transactions``: commits it
    completed.
    """

    name: str
    consumed: int = 0
    produced: int = 0
    uncommitted: int = 0
    transactions: int = 0
    sink_writes: int = 0
    uncommitted_sink_writes: int = 0
    uncommitted_offsets: list[tuple[int, int]] = field(default_factory=list)


def incarnations(events: Sequence["Event"]) -> list[Incarnation]:
    """Per processor incarnation (``client_id``), in order of first appearance: what it
    consumed, produced, committed, and what it left uncommitted when it stopped.

    ``events`` are ledger events of one run (``kafkalab.ledger.read_events`` of each file), each
    file in its own order. A commit is one or more ``committed`` events in a row (one per
    partition); what was produced or acked after the last of them is uncommitted.
    """
    out: dict[str, Incarnation] = {}
    since_commit: dict[str, list] = {}
    last_kind: dict[str, str] = {}
    for e in events:
        name = e.client_id or "?"
        inc = out.setdefault(name, Incarnation(name))
        pending = since_commit.setdefault(name, [])
        if e.kind == "consumed":
            inc.consumed += 1
        elif e.kind == "produced":
            inc.produced += 1
            pending.append(e)
        elif e.kind == "acked" and e.error is None:
            pending.append(e)
        elif e.kind == "processed":
            inc.sink_writes += 1
            pending.append(e)
        elif e.kind == "committed":
            if last_kind.get(name) != "committed":
                inc.transactions += 1
            pending.clear()
        last_kind[name] = e.kind
    for name, inc in out.items():
        pending = since_commit.get(name, [])
        inc.uncommitted = sum(1 for e in pending if e.kind == "produced")
        inc.uncommitted_sink_writes = sum(1 for e in pending if e.kind == "processed")
        inc.uncommitted_offsets = sorted((e.partition, e.offset) for e in pending if e.kind == "acked")
    return list(out.values())


# ----------------------------------------------------------------------------- kafka-dump-log


def records_table(records: Iterable["DumpedRecord"]) -> "pd.DataFrame":
    """Records of ``kafka-dump-log --print-data-log`` (``kafkalab.dumplog``) as a DataFrame,
    one row per record, indexed by (partition, offset): ``kind`` (``"data"``, ``"COMMIT"``,
    ``"ABORT"``), ``payload`` (the value as text; None for a marker), the batch's producer id,
    epoch and transactional flag, and the timestamp (ms since the epoch; for a marker, when the
    coordinator wrote it)."""
    import pandas as pd

    cols = ["partition", "offset", "kind", "payload", "producer_id", "producer_epoch", "transactional", "timestamp"]
    rows = [{"partition": r.partition, "offset": r.offset, "kind": r.kind, "payload": r.value,
             "producer_id": r.producer_id, "producer_epoch": r.producer_epoch, "transactional": r.is_transactional,
             "timestamp": r.timestamp} for r in records]
    return pd.DataFrame(rows, columns=cols).set_index(["partition", "offset"])


# ----------------------------------------------------------------------------- Kafka's other tools


def parse_transactions_describe(text: str) -> dict[str, str]:
    """``kafka-transactions describe --transactional-id X`` (a header row and one value row,
    tab-separated) -> ``{column: value}``, e.g. ``{"CoordinatorId": "1", "TransactionState":
    "Ongoing", ...}``.

    Raises:
        ValueError: fewer than two non-empty lines, or the rows differ in length.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise ValueError(f"kafka-transactions describe printed no table:\n{text}")
    head = [c.strip() for c in lines[0].split("\t")]
    row = [c.strip() for c in lines[1].split("\t")]
    while head and head[-1] == "":
        head.pop()
    row = row[:len(head)] + [""] * (len(head) - len(row))
    return dict(zip(head, row))


def parse_features(text: str) -> dict[str, str]:
    """``kafka-features describe`` -> ``{feature: FinalizedVersionLevel}``, e.g.
    ``{"transaction.version": "2", "metadata.version": "4.3-IV0", ...}``.

    Raises:
        ValueError: no ``Feature:`` line (the output format changed).
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        f = dict(re.findall(r"(\w+):\s+(\S+)", line))
        if "Feature" in f and "FinalizedVersionLevel" in f:
            out[f["Feature"]] = f["FinalizedVersionLevel"]
    if not out:
        raise ValueError(f"kafka-features describe printed no feature:\n{text}")
    return out


# ----------------------------------------------------------------------------- Spark over the topics


def uncommitted_offsets(result: EosResult) -> list[tuple[int, int]]:
    """``(partition, offset)`` of every output record the crashed incarnations of ``result``
    produced after their last commit (from the ledgers): in transactional mode, the records of
    aborted transactions."""
    from ..ledger import read_events

    events = [e for path in result.ledgers for e in read_events(path)]
    return sorted({o for inc in incarnations(events) for o in inc.uncommitted_offsets})


def spark_audit(spark: "SparkSession", *results: EosResult) -> dict[tuple[str, str], Verdict]:
    """The exactly-once audit of each result, computed by Spark in one job: for each result
    its output topic read with ``kafka.isolation.level`` read_committed and, for transactional
    results, read_uncommitted too, each against its input topic. Each verdict's ``left_read``
    counts the records read at the positions the crashed incarnations left uncommitted
    (``uncommitted_offsets``). The topics are read with three Kafka scans in all (inputs,
    read_committed outputs, read_uncommitted outputs; Spark's ``subscribe`` takes a list).

    Returns:
        ``{(mode, isolation level): Verdict}``.
    """
    from pyspark.sql import functions as F

    from .. import spark as kspark

    def read(topics: list[str], iso: str | None = None):
        opts = {"kafka_isolation_level": iso} if iso else {}
        return spark_ids_with_topic(kspark.read_topic(spark, ",".join(topics), **opts))

    views: dict[str, list[str]] = {}  # input topic -> views it is the input of
    outs, left_rows = [], []
    by_iso: dict[str, dict[str, str]] = {"read_committed": {}, "read_uncommitted": {}}  # output topic -> view
    for r in results:
        isos = ("read_committed", "read_uncommitted") if r.mode == "transactional" else ("read_committed",)
        for iso in isos:
            view = f"{r.mode}|{iso}"
            views.setdefault(r.input_topic, []).append(view)
            by_iso[iso][r.output_topic] = view
            left_rows += [(view, p, o) for p, o in uncommitted_offsets(r)]
    inp = read(list(views))
    topic_views = F.create_map(*[x for t, vs in views.items() for x in (F.lit(t), F.array(*map(F.lit, vs)))])
    inputs = inp.select(F.explode(topic_views[F.col("topic")]).alias("view"), "record_id")
    for iso, topic_view in by_iso.items():
        if not topic_view:
            continue
        out = read(list(topic_view), iso)
        view_of = F.create_map(*[x for t, v in topic_view.items() for x in (F.lit(t), F.lit(v))])
        outs.append(out.select(view_of[F.col("topic")].alias("view"), "record_id", "partition", "offset"))
    out_all = outs[0] if len(outs) == 1 else outs[0].unionByName(outs[1])
    left = spark.createDataFrame(left_rows or [("", -1, -1)], "view string, partition int, offset long") \
        .withColumn("is_left", F.lit(1))
    outputs = out_all.join(F.broadcast(left), ["view", "partition", "offset"], "left")
    verdicts = spark_verdicts_of(inputs, outputs)
    return {tuple(v.split("|")): verdicts.get(v, Verdict(0, 0, 0, 0, 0, 0, 0))
            for vs in views.values() for v in vs}


def spark_isolation_counts(spark: "SparkSession", topic: str) -> dict[str, int]:
    """Records Spark's Kafka source reads from ``topic`` with no isolation option (the Java
    consumer's default), with ``kafka.isolation.level=read_committed`` and with
    ``read_uncommitted`` (one Spark job): ``{"default": n, "read_committed": n,
    "read_uncommitted": n}``."""
    from functools import reduce

    from pyspark.sql import functions as F

    from .. import spark as kspark

    reads = {"default": kspark.read_topic(spark, topic)}
    for iso in ("read_committed", "read_uncommitted"):
        reads[iso] = kspark.read_topic(spark, topic, kafka_isolation_level=iso)
    union = reduce(lambda a, b: a.unionByName(b),
                   [df.select(F.lit(name).alias("reader"), "offset") for name, df in reads.items()])
    counts = {r["reader"]: int(r["count"]) for r in union.groupBy("reader").count().collect()}
    return {name: counts.get(name, 0) for name in reads}


# ----------------------------------------------------------------------------- section 8: Spark as a stage


@dataclass
class StreamingRun:
    """One ``run_streaming_stage``: micro-batches the query ran (batch id -> records), whether
    it failed at the planned point, and the checkpoint's committed batch ids afterwards."""

    batches: dict[int, int]
    failed: bool
    committed_batches: list[int]
    elapsed_ms: int


class PlannedFailure(RuntimeError):
    """Raised inside ``foreachBatch`` after the sinks wrote: the planned crash point."""


def run_streaming_stage(stream: "DataFrame", kafka_sink: "Callable[[DataFrame, int], None]", sink_path: str,
                        checkpoint: str, fail_after_sinks: bool = False, timeout_s: float = 60.0) -> StreamingRun:
    """Run notebook 05's streaming stage: ``stream`` (a streaming DataFrame with columns
    ``key``, ``record_id``, ``route``, ``delayed``: Spark's Kafka source and the transform, as
    the notebook builds them) through ``foreachBatch``, with a checkpoint and
    ``Trigger.AvailableNow`` (process what is in the input now, then stop).

    Each micro-batch goes to two sinks: ``kafka_sink(batch, batch_id)`` (the notebook's: Spark's
    Kafka writer, a plain Java producer, not transactional), then a sqlite table upserted by
    ``record_id`` (idempotent). With ``fail_after_sinks`` the batch function raises
    ``PlannedFailure`` after both sinks wrote and before Spark writes the batch to the
    checkpoint's commit log: the state a driver crash at that moment leaves. The next run
    with the same checkpoint replays the batch.

    The batch function keeps its own log in the sink database (table ``batch_calls``: one row
    per call, batch id and records, in the sink's transaction), and ``batches`` is read from
    it: under Spark Connect the function (``kafka_sink`` with it) runs in a Python worker of
    the server, not in this process, so it cannot hand anything back through a variable, and
    ``kafka_sink`` must carry the addresses it needs as values.

    Returns:
        A ``StreamingRun``.

    Raises:
        KafkalabError: the query did not finish within ``timeout_s`` seconds (it is stopped).
        pyspark StreamingQueryException: any failure other than the planned one.

    Source: Spark Structured Streaming Programming Guide ("Fault Tolerance Semantics",
    ``foreachBatch``: "at-least-once write guarantees ... use the batchId to deduplicate");
    Structured Streaming + Kafka Integration Guide ("Writing Data to Kafka": at least once).
    """
    from pyspark.errors import StreamingQueryException

    t0 = time.monotonic()
    db = sqlite3.connect(sink_path)
    db.execute("CREATE TABLE IF NOT EXISTS sink (record_id TEXT PRIMARY KEY, route TEXT, delayed INTEGER, "
                "batch_id INTEGER, writes INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS batch_calls (call INTEGER PRIMARY KEY AUTOINCREMENT, "
               "batch_id INTEGER, records INTEGER)")
    db.commit()
    first_call = db.execute("SELECT COALESCE(MAX(call), 0) + 1 FROM batch_calls").fetchone()[0]
    db.close()

    def write(df, batch_id: int) -> None:
        df.persist()
        try:
            kafka_sink(df, batch_id)
            rows = [(r.record_id, r.route, int(r.delayed), batch_id) for r in
                    df.select("record_id", "route", "delayed").collect()]
        finally:
            df.unpersist()
        con = sqlite3.connect(sink_path)
        with con:
            con.executemany("INSERT INTO sink VALUES (?, ?, ?, ?, 1) ON CONFLICT(record_id) DO UPDATE SET "
                            "route=excluded.route, delayed=excluded.delayed, batch_id=excluded.batch_id, "
                            "writes=writes+1", rows)
            con.execute("INSERT INTO batch_calls (batch_id, records) VALUES (?, ?)", (batch_id, len(rows)))
        con.close()
        if fail_after_sinks:
            raise PlannedFailure(f"planned failure after the sinks wrote batch {batch_id}")

    query = stream.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    failed = False
    try:
        finished = query.awaitTermination(timeout_s)
        if not finished:
            query.stop()
            raise KafkalabError(f"the streaming query did not finish within {timeout_s} s")
    except StreamingQueryException as e:
        if "PlannedFailure" not in str(e) and "planned failure" not in str(e):
            raise
        failed = True
    db = sqlite3.connect(sink_path)
    batches = dict(db.execute("SELECT batch_id, records FROM batch_calls WHERE call >= ? ORDER BY call",
                              (first_call,)).fetchall())
    db.close()
    commits = Path(checkpoint) / "commits"
    committed = sorted(int(f.name) for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else []
    return StreamingRun(batches, failed, committed, int((time.monotonic() - t0) * 1000))


def spark_stage_audit(spark: "SparkSession", input_topic: str, output_topic: str, sink_path: str
                      ) -> dict[str, Verdict]:
    """The streaming stage's two sinks against its input, in one Spark job:
    ``{"Kafka sink": Verdict (output topic, read_committed), "upserting foreachBatch sink":
    Verdict (sqlite rows)}``."""
    from .. import spark as kspark

    inp = spark_ids(kspark.read_topic(spark, input_topic))
    table = spark.createDataFrame([(r,) for r, _ in streaming_sink_rows(sink_path)] or [("",)], "record_id string")
    if not streaming_sink_rows(sink_path):
        table = table.where("false")
    kafka = spark_ids(kspark.read_topic(spark, output_topic, kafka_isolation_level="read_committed"))
    return spark_verdicts({"Kafka sink": inp, "upserting foreachBatch sink": inp},
                             {"Kafka sink": kafka, "upserting foreachBatch sink": table})


def streaming_sink_rows(sink_path: str) -> list[tuple[str, int]]:
    """``(record_id, writes)`` of the streaming stage's sqlite table."""
    db = sqlite3.connect(sink_path)
    try:
        return [(r, int(w)) for r, w in db.execute("SELECT record_id, writes FROM sink")]
    finally:
        db.close()


def warm_up(spark: "SparkSession", topic: str) -> None:
    """Write 10 small JSON records to ``topic`` (an existing, empty topic) and run one audit
    job over it with Spark's Kafka source (``spark_verdicts``), so the first real audit does
    not pay for class loading and code generation. Notebook 05 gives it to
    ``kafkalab.spark.session_in_background``: ``lambda spark: warm_up(spark, topic)``."""
    import json

    from .. import spark as kspark
    from .. import workloads

    workloads.produce(topic, [(None, json.dumps({"record_id": f"w-{i}"}).encode()) for i in range(10)])
    ids = spark_ids(kspark.read_topic(spark, topic))
    spark_verdicts({"a": ids, "b": ids}, {"a": ids, "b": spark_ids(kspark.read_topic(
        spark, topic, kafka_isolation_level="read_committed"))},
        {"a": spark.createDataFrame([(0, 0)], "partition int, offset long")})
