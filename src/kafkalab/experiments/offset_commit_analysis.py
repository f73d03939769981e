"""Counts for notebook 03: one run in Python (``summarize``, ``verdicts``), and produced against
processed, per run, in PySpark.

``summarize`` counts one crash-and-restart run from its ledger events and its sqlite sink into
an ``OffsetCommitResult``, and ``verdicts`` checks the notebook's claims on it. It reads the
run's ``offset_commit.RunConfig`` by attribute and never imports the run module (the arrow
points run -> analysis).

The ledger (``kafkalab.ledger``) of an offset-commit run holds the producer's ``acked``
events and the consumers' ``consumed`` and ``processed`` events. Joined on the record id
(``value``) within ``(run_id, topic)``:

- a **lost write** (Jepsen's term) is an acknowledged record with no ``processed`` event:
  a left anti join of acked against processed;
- a **duplicate** is one extra processing of a record: group the ``processed`` events by
  record and count; ``duplicates = processed - processed_unique``.

``outcomes`` counts both per run from one group-by per record (two shuffles: cheap on a
2-core laptop); ``lost_records`` lists the lost ones with the anti join, and the notebook
checks that the two agree.

Every PySpark function returns a lazy DataFrame; nothing is collected there. ``kafkalab.audit``
holds the general checks (``lost_writes`` needs a consumer to have read past the record,
which a record skipped by a commit may never see; here the question is narrower: was the
side effect ever applied?).

Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj`` (lost write, duplicate);
Kafka ``tests/kafkatest/tests/core/transactions_test.py`` (output set equals input set,
no duplicates).
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..audit import of_kind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    #: An ``offset_commit.RunConfig``, read by attribute.
    RunConfig = Any


# ----------------------------------------------------------------------------- one run, counted in Python


@dataclass
class OffsetCommitResult:
    """What one run did. Counts are records; ``records_per_s`` is measured, not promised.

    Attributes:
        label, mode, client: the run (``RunConfig.name``, commit mode, consumer client).
        run_id, topic, group_id: names used on the cluster (unique per run).
        config: the ``RunConfig`` as a dict.
        produced: records acknowledged by the brokers.
        processed: processings, repeats included (``processed`` ledger events).
        processed_unique: distinct records processed.
        lost: produced records never processed, after the restart drained the topic.
        duplicates: ``processed - processed_unique``.
        in_hand_at_crash: records the crashed consumer had been handed (by ``consume``/``poll``)
            but had not processed.
        in_hand_below_resume: those of them below where the restart resumed: they are never
            read again.
        processed_at_or_after_resume: records the crashed consumer processed at offsets at or
            above where the restart resumed: they are processed again.
        last_batch: records the crashed consumer's last ``consume``/``poll`` returned.
        processed_from_last_batch: how many of them it processed before the crash.
        lost_ids, duplicate_ids: the record ids (sorted).
        committed_at_crash: partition -> committed offset read right after the crash.
        resumed_from: partition -> first offset the restarted consumer read (the end of the
            partition when nothing was left), i.e. the committed offset it started from.
        sink_rows, sink_unique: rows in sqlite and distinct record ids among them (None for
            the Java consumer, which writes no sink).
        records_per_s: records processed per second by the restarted consumer while
            draining (``drain_process_ms`` of work per record); None if it processed < 2.
        crash_exit: exit code of the crashed process (-9: SIGKILL; 137: Java ``Runtime.halt``).
        ledgers: the run's ledger files.
        edited: the run ran a program other than its mode's (an edited copy): ``verdicts``
            makes only the accounting claim.
    """

    label: str
    mode: str
    client: str
    run_id: str
    topic: str
    group_id: str
    config: dict
    produced: int
    processed: int
    processed_unique: int
    lost: int
    duplicates: int
    in_hand_at_crash: int
    in_hand_below_resume: int
    processed_at_or_after_resume: int
    last_batch: int
    processed_from_last_batch: int
    lost_ids: list[str]
    duplicate_ids: list[str]
    committed_at_crash: dict[int, int]
    resumed_from: dict[int, int]
    sink_rows: int | None
    sink_unique: int | None
    records_per_s: float | None
    crash_exit: int
    ledgers: list[str]
    edited: bool = False

    def to_json(self) -> dict:
        """The result as JSON-ready dict (partition keys as strings), with ``verdicts``."""
        d = asdict(self)
        d["committed_at_crash"] = {str(k): v for k, v in self.committed_at_crash.items()}
        d["resumed_from"] = {str(k): v for k, v in self.resumed_from.items()}
        d["verdicts"] = verdicts(self)
        return d

    def row(self) -> dict[str, Any]:
        """One table row: mode (label), produced, processed, processed_unique, lost, duplicates,
        records_per_s (rounded)."""
        return {"mode": self.label, "produced": self.produced, "processed": self.processed,
                "processed_unique": self.processed_unique, "lost": self.lost, "duplicates": self.duplicates,
                "records_per_s": None if self.records_per_s is None else round(self.records_per_s)}


def verdicts(r: OffsetCommitResult) -> dict[str, bool]:
    """The claims of notebook 03, checked on one result (``True`` = holds).

    - ``explained_by_committed_offset`` (always): the lost records are the ones in hand
      below the offset the restart resumed from, the duplicates the ones processed at or
      above it.
    - librdkafka ``auto``, when the crash came after the timer's commit (``after-commit``):
      every record in hand at the crash is lost, none duplicated. (At ``after-process`` it
      depends on where the timer's ticks fell: no claim.)
    - ``store-after-process`` and ``async``: nothing lost; with the crash before the store or
      commit (``after-process``), at least one duplicate.
    - ``sync-per-message`` (both clients): nothing lost; exactly one duplicate
      (``after-process``) or none (``after-commit``).
    - Java ``auto``: nothing lost; the duplicates are exactly the records processed since the
      last ``poll()`` (classic protocol). With ``group.protocol=consumer`` (KIP-848): nothing
      lost (how much it repeats depends on when its background commit last landed).
    - Java ``commit-sync-no-args`` / ``commit-async-no-args``, once the commit ran in the last
      batch: every record in hand at the crash is lost (an async commit sent at least one
      record's processing time before the crash).
    - ``dedupe``: one sqlite row per produced record, nothing lost.

    A run of a program other than its mode's (an edited one) gets only the first verdict.
    """
    out = {"explained_by_committed_offset": r.lost == r.in_hand_below_resume
           and r.duplicates == r.processed_at_or_after_resume}
    if r.edited:
        return out  # an edited program: only the accounting is a claim
    before_commit = r.config["crash_point"] == "after-process"
    if r.client == "librdkafka" and r.mode == "auto":
        if not before_commit:
            out["auto_commit_loses_what_was_in_hand"] = r.lost == r.in_hand_at_crash and r.duplicates == 0
    elif r.client == "librdkafka" and r.mode in ("store-after-process", "async"):
        out["at_least_once"] = r.lost == 0 and (r.duplicates >= 1 or not before_commit)
    elif r.mode == "sync-per-message":
        out["at_most_one_duplicate"] = r.lost == 0 and r.duplicates == (1 if before_commit else 0)
    elif r.client == "java" and r.mode == "auto" and r.config["group_protocol"] == "consumer":
        pass  # measured: nothing lost in some runs, records lost in another (clean-clone run 9): no verdict
    elif r.client == "java" and r.mode == "auto":
        out["java_auto_commit_duplicates_since_last_poll"] = (r.lost == 0
                                                              and r.duplicates == r.processed_from_last_batch)
    elif r.client == "java" and r.mode == "commit-sync-no-args":
        if r.processed_from_last_batch > 1 or not before_commit:
            out["commit_sync_no_args_loses_what_was_in_hand"] = r.lost == r.in_hand_at_crash
    elif r.client == "java" and r.mode == "commit-async-no-args":
        if r.processed_from_last_batch > 2:  # an async commit had a record's processing time to land
            out["commit_async_no_args_loses_what_was_in_hand"] = r.lost == r.in_hand_at_crash
    if r.config["dedupe"]:
        out["dedupe_side_effect_exactly_once"] = r.lost == 0 and r.sink_rows == r.sink_unique == r.produced
    return out


def last_batch(events: list) -> tuple[list, list]:
    """``(consumed, processed)`` events of the last batch in a consumer's ledger (file order):
    the last run of consecutive ``consumed`` events (what one ``consume``/``poll`` returned)
    and the ``processed`` events after it."""
    idx = [i for i, e in enumerate(events) if e.kind == "consumed" and e.offset is not None]
    if not idx:
        return [], []
    end = start = idx[-1]
    while start > 0 and events[start - 1].kind == "consumed" and events[start - 1].offset is not None:
        start -= 1
    return events[start:end + 1], [e for e in events[end + 1:] if e.kind == "processed"]


def summarize(cfg: "RunConfig", run_id: str, topic: str, group_id: str, acked: list, crashed: list, drained: list,
              committed_at_crash: dict[int, int], sink: Path | None, crash_exit: int,
              ledgers: list[str]) -> OffsetCommitResult:
    """Count one run from its ledger events (lists of ``kafkalab.ledger.Event`` in file
    order: the producer's, the crashed consumer's, the restarted one's) and its sqlite sink.

    ``cfg`` is an ``offset_commit.RunConfig``, read by attribute (``name``, ``program``,
    ``default_program``). Pure Python on small lists; the notebook checks the same counts with
    PySpark (below).
    """
    produced = {e.value: (e.partition, e.offset) for e in acked if e.kind == "acked" and e.error is None}
    ends = end_offsets(acked)
    processed = [e.value for e in crashed + drained if e.kind == "processed"]
    unique = set(processed)
    lost_ids = sorted(set(produced) - unique)
    counts: dict[str, int] = {}
    for v in processed:
        counts[v] = counts.get(v, 0) + 1
    dup_ids = sorted(v for v, n in counts.items() if n > 1)

    resumed: dict[int, int] = {}
    for e in drained:
        if e.kind == "consumed" and e.offset is not None:
            resumed[e.partition] = min(resumed.get(e.partition, e.offset), e.offset)
    for p, end in ends.items():
        resumed.setdefault(p, end)
    done = {(e.partition, e.offset) for e in crashed if e.kind == "processed"}
    in_hand = {(e.partition, e.offset) for e in crashed if e.kind == "consumed" and e.offset is not None} - done
    batch, batch_done = last_batch(crashed)

    rows = read_sink(sink)
    return OffsetCommitResult(
        label=cfg.name, mode=cfg.mode, client=cfg.client, run_id=run_id, topic=topic, group_id=group_id,
        config=asdict(cfg), produced=len(produced), processed=len(processed), processed_unique=len(unique),
        lost=len(lost_ids), duplicates=len(processed) - len(unique), in_hand_at_crash=len(in_hand),
        in_hand_below_resume=sum(1 for p, o in in_hand if o < resumed.get(p, 0)),
        processed_at_or_after_resume=sum(1 for p, o in done if o >= resumed.get(p, 0)),
        last_batch=len(batch), processed_from_last_batch=len(batch_done),
        lost_ids=lost_ids, duplicate_ids=dup_ids,
        committed_at_crash=dict(sorted(committed_at_crash.items())), resumed_from=dict(sorted(resumed.items())),
        sink_rows=None if rows is None else len(rows), sink_unique=None if rows is None else len({r[0] for r in rows}),
        records_per_s=_records_per_s(drained),
        crash_exit=crash_exit, ledgers=ledgers,
        edited=cfg.program is not None and cfg.program.name != cfg.default_program)


def _records_per_s(events: list) -> float | None:
    """Processed records per second, from the first record handed over to the last processed."""
    first = [e.ts_ms for e in events if e.kind == "consumed" and e.offset is not None]
    done = [e.ts_ms for e in events if e.kind == "processed"]
    if len(done) < 2 or not first:
        return None
    span_ms = max(done) - min(first)
    return len(done) / (span_ms / 1000) if span_ms > 0 else None




def end_offsets(acked: list) -> dict[int, int]:
    """partition -> its end offset (last acknowledged offset + 1), from the producer's ``acked``
    events (``kafkalab.ledger.Event``; failed sends left out)."""
    ends: dict[int, int] = {}
    for e in acked:
        if e.error is None and e.offset is not None:
            ends[e.partition] = max(ends.get(e.partition, 0), e.offset + 1)
    return ends




def read_sink(sink: Path | None) -> list[tuple[str, int, int]] | None:
    """The rows of a consumer program's sqlite table ``processed``: ``(record_id, partition,
    offset)``, one per applied side effect; None without a sink file (the Java consumer writes
    none)."""
    if sink is None or not sink.exists():
        return None
    db = sqlite3.connect(sink)
    try:
        return db.execute('SELECT record_id, partition, "offset" FROM processed').fetchall()
    finally:
        db.close()


# ----------------------------------------------------------------------------- PySpark

_RECORD = ("run_id", "topic", "value")


def acknowledged(events: DataFrame) -> DataFrame:
    """Distinct acknowledged records: ``run_id``, ``topic``, ``value``, ``partition``,
    ``offset`` (``acked`` events without ``error``)."""
    from pyspark.sql import functions as F

    return (
        of_kind(events, "acked")
        .where(F.col("error").isNull())
        .groupBy(*_RECORD)
        .agg(F.min("partition").alias("partition"), F.min("offset").alias("offset"))
    )


def processings(events: DataFrame) -> DataFrame:
    """How many times each record's side effect ran: ``run_id``, ``topic``, ``value``,
    ``times`` (>= 1), ``consumers`` (sorted distinct ``client_id``: which incarnation)."""
    from pyspark.sql import functions as F

    return (
        of_kind(events, "processed")
        .groupBy(*_RECORD)
        .agg(F.count(F.lit(1)).alias("times"), F.array_sort(F.collect_set("client_id")).alias("consumers"))
    )


def lost_records(events: DataFrame) -> DataFrame:
    """Acknowledged records never processed (left anti join on ``run_id, topic, value``).

    Returns:
        Lazy DataFrame: ``run_id``, ``topic``, ``value``, ``partition``, ``offset``.
    """
    processed = of_kind(events, "processed").select(*_RECORD).distinct()
    return acknowledged(events).join(processed, list(_RECORD), "left_anti")


def duplicate_records(events: DataFrame) -> DataFrame:
    """Records processed more than once (group by record, ``times > 1``).

    Returns:
        Lazy DataFrame: the columns of ``processings``.
    """
    from pyspark.sql import functions as F

    return processings(events).where(F.col("times") > 1)


def record_outcomes(events: DataFrame) -> DataFrame:
    """One row per record seen in the ledger (one group-by, one shuffle): ``run_id``,
    ``topic``, ``value``, ``produced`` (1 if acknowledged, else 0), ``times`` (how many
    times it was processed, 0 if never)."""
    from pyspark.sql import functions as F

    acked = (F.col("kind") == "acked") & F.col("error").isNull()
    return (
        events.where(F.col("kind").isin("acked", "processed"))
        .groupBy(*_RECORD)
        .agg(F.max(F.when(acked, 1).otherwise(0)).alias("produced"),
             F.sum(F.when(F.col("kind") == "processed", 1).otherwise(0)).alias("times"))
    )


def outcomes(events: DataFrame) -> DataFrame:
    """One row per run: ``run_id``, ``produced``, ``processed`` (repeats included),
    ``processed_unique``, ``lost`` (acknowledged, processed 0 times: the rows
    ``lost_records`` finds with its anti join), ``duplicates`` (``processed -
    processed_unique``). Two shuffles: the group-by per record, then per run. Runs with no
    acknowledged record are left out."""
    from pyspark.sql import functions as F

    r = record_outcomes(events)
    count_if = lambda cond: F.sum(F.when(cond, 1).otherwise(0)).cast("long")  # noqa: E731
    return (
        r.groupBy("run_id")
        .agg(F.sum("produced").cast("long").alias("produced"), F.sum("times").cast("long").alias("processed"),
             count_if(F.col("times") > 0).alias("processed_unique"),
             count_if((F.col("produced") == 1) & (F.col("times") == 0)).alias("lost"))
        .where(F.col("produced") > 0)
        .withColumn("duplicates", F.col("processed") - F.col("processed_unique"))
        .select("run_id", "produced", "processed", "processed_unique", "lost", "duplicates")
    )


def drain_rates(events: DataFrame, client_id: str = "consumer-1") -> DataFrame:
    """Records per second of the consumer ``client_id`` (the restarted one): its processed
    records divided by the time from the first record it was handed to its last processed
    one. ``run_id``, ``records``, ``span_ms``, ``records_per_s`` (null when ``span_ms`` is 0)."""
    from pyspark.sql import functions as F

    handed = (F.col("kind") == "consumed") & F.col("offset").isNotNull()
    done = F.col("kind") == "processed"
    span = F.col("last_ms") - F.col("first_ms")
    return (
        events.where(F.col("client_id") == client_id)
        .groupBy("run_id")
        .agg(F.sum(F.when(done, 1).otherwise(0)).cast("long").alias("records"),
             F.min(F.when(handed, F.col("ts_ms"))).alias("first_ms"),
             F.max(F.when(done, F.col("ts_ms"))).alias("last_ms"))
        .where(F.col("records") > 0)
        .select("run_id", "records", span.alias("span_ms"),
                F.when(span > 0, F.col("records") * 1000.0 / span).alias("records_per_s"))
    )


def side_effects(events: DataFrame, sink: DataFrame) -> DataFrame:
    """The side effect itself against what was produced: one row per run with a sink.

    Acknowledged records (from ``events``) are outer-joined with the sink's rows counted per
    record id: a record with no row is *missing* (never applied), a record with ``n`` rows
    was applied ``n - 1`` times too often.

    Args:
        events: ledger DataFrame (for the acknowledged records).
        sink: the sqlite rows, columns ``run_id`` and ``record_id`` (one row per applied
            side effect).

    Returns:
        Lazy DataFrame: ``run_id``, ``produced``, ``rows`` (side effects applied),
        ``missing`` (acknowledged records without a row), ``repeated`` (``rows`` minus
        distinct record ids: extra applications). Runs without sink rows are left out.
    """
    from pyspark.sql import functions as F

    acked = acknowledged(events).select("run_id", F.col("value").alias("record_id"), F.lit(1).alias("acked"))
    rows = sink.groupBy("run_id", "record_id").agg(F.count(F.lit(1)).alias("n"))
    count_if = lambda cond: F.sum(F.when(cond, 1).otherwise(0)).cast("long")  # noqa: E731
    return (
        acked.join(rows, ["run_id", "record_id"], "full_outer")
        .groupBy("run_id")
        .agg(count_if(F.col("acked") == 1).alias("produced"),
             F.coalesce(F.sum("n"), F.lit(0)).cast("long").alias("rows"),
             count_if((F.col("acked") == 1) & F.col("n").isNull()).alias("missing"),
             F.coalesce(F.sum(F.when(F.col("n") > 1, F.col("n") - 1)), F.lit(0)).cast("long").alias("repeated"))
        .where(F.col("rows") > 0)
    )


def warm_up(spark) -> dict[str, int]:
    """Run this module's queries once on a three-line ledger written to a temporary folder,
    so that the JVM has loaded, compiled and code-generated them before the real ledgers
    arrive (on 2 cores the first Spark query costs seconds; the later ones a fraction). The
    warm-up notebook 03 gives ``kafkalab.spark.session_in_background``.

    Returns:
        What the queries found on that ledger (one record, acked and processed once):
        ``produced``, ``processed``, ``lost``, ``duplicates`` from ``outcomes``, and the rows
        of ``lost_records``, ``duplicate_records`` and ``side_effects``.
    """
    import tempfile
    from pathlib import Path

    from ..ledger import Ledger, load

    with tempfile.TemporaryDirectory(prefix="kafkalab-warmup-") as tmp:
        path = Path(tmp) / "warmup.jsonl"
        with Ledger(path, "warmup") as book:
            book.record("acked", topic="t", partition=0, offset=0, value="a", client_id="producer-0")
            book.record("consumed", topic="t", partition=0, offset=0, value="a", client_id="consumer-1")
            book.record("processed", topic="t", partition=0, offset=0, value="a", client_id="consumer-1")
        events = load(spark, str(path)).cache()
        sink = spark.createDataFrame([("warmup", "a")], "run_id string, record_id string")
        (row,) = outcomes(events).join(drain_rates(events), "run_id", "left").collect()
        found = {k: int(row[k]) for k in ("produced", "processed", "lost", "duplicates")}
        found["lost_records"] = len(lost_records(events).collect())
        found["duplicate_records"] = len(duplicate_records(events).collect())
        found["side_effects"] = len(side_effects(events, sink).collect())
        events.unpersist()
    return found
