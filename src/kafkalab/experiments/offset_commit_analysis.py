"""PySpark counts for notebook 03: produced against processed, per run.

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

Every function returns a lazy DataFrame; nothing is collected here. ``kafkalab.audit``
holds the general checks (``lost_writes`` needs a consumer to have read past the record,
which a record skipped by a commit may never see; here the question is narrower: was the
side effect ever applied?).

Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj`` (lost write, duplicate);
Kafka ``tests/kafkatest/tests/core/transactions_test.py`` (output set equals input set,
no duplicates).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..audit import of_kind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
