"""Spark analysis of an assignment sweep (``assignment.sweep(..., ledger=PATH)``).

The ledger has one JSON line per (case run, member): ``assignor``, ``consumers``,
``topics``, ``partitions``, ``member``, ``assigned`` (partitions it held once the group was
stable), ``group_id`` (one group per case run) and ``elapsed_ms``. Functions here return
lazy Spark DataFrames; only the small aggregated tables are turned into pandas
(``pivots``, ``by_topic_count``, ``by_assignor``) for plots.

The expectations are the rules of the assignors for members that all subscribe to the same
topics (as in a sweep):

- per-topic assignors (``range``, ``consumer/range``) split each topic on its own, over the
  same member order, so the first ``P % C`` members get one extra partition of *every* topic:
  imbalance ``T`` when ``P % C != 0`` (else 0), and ``max(0, C - P)`` members get nothing,
  however many topics there are. Sources: librdkafka rdkafka_range_assignor.c; Kafka
  RangeAssignor (clients, and group-coordinator for KIP-848).
- the others deal all ``T * P`` partitions as one pool (round-robin) or balance counts
  (cooperative-sticky, KIP-848 uniform): imbalance ``1`` when ``T*P % C != 0`` (else 0) and
  ``max(0, C - T*P)`` idle members. Sources: librdkafka rdkafka_roundrobin_assignor.c and
  rdkafka_sticky_assignor.c; KIP-848 UniformAssignor.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .assignment import LABELS

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

#: Assignors that assign each topic on its own (range-like).
PER_TOPIC = ("range", "consumer/range", "classic/default")


def warm_up(spark: "SparkSession") -> None:
    """Run ``per_case`` on three in-memory rows, the query this notebook runs later: the
    warm-up given to ``kafkalab.spark.session_in_background``."""
    rows = [("range", 3, 1, 2, f"consumer-{i}", n, "warm-up", 0) for i, n in enumerate((1, 1, 0))]
    per_case(spark.createDataFrame(rows, sweep_schema())).collect()


def sweep_schema():
    """The explicit schema of a sweep's lines (no inference: a wrong field fails the read). Not an
    event ledger (``kafkalab.ledger.ledger_schema``): one row per (case run, member)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType([
        StructField("assignor", StringType(), False),
        StructField("consumers", IntegerType(), False),
        StructField("topics", IntegerType(), False),
        StructField("partitions", IntegerType(), False),
        StructField("member", StringType(), False),
        StructField("assigned", IntegerType(), False),
        StructField("group_id", StringType(), False),
        StructField("elapsed_ms", LongType(), True),
    ])


def read_sweep(spark: "SparkSession", path: Path | str) -> "DataFrame":
    """The sweep's lines as a DataFrame with ``sweep_schema()``; malformed lines fail the read
    (``mode=FAILFAST``) instead of turning into nulls."""
    return spark.read.schema(sweep_schema()).option("mode", "FAILFAST").json(str(path))


def per_case(rows: "DataFrame") -> "DataFrame":
    """One row per case run (group): ``members`` (rows seen), ``total`` (partitions held),
    ``most``/``fewest`` held by one member, ``imbalance`` = most - fewest, ``idle`` (members
    with 0), ``elapsed_ms``, and a ``case`` label ``"C3 T2xP4"``."""
    from pyspark.sql import functions as F

    keys = ["group_id", "assignor", "consumers", "topics", "partitions"]
    return (rows.groupBy(*keys)
            .agg(F.count("*").alias("members"),
                 F.sum("assigned").alias("total"),
                 F.max("assigned").alias("most"),
                 F.min("assigned").alias("fewest"),
                 F.sum(F.when(F.col("assigned") == 0, 1).otherwise(0)).alias("idle"),
                 F.max("elapsed_ms").alias("elapsed_ms"))
            .withColumn("imbalance", F.col("most") - F.col("fewest"))
            .withColumn("case", F.format_string("C%d T%dxP%d", "consumers", "topics", "partitions")))


def with_expectations(cases: "DataFrame") -> "DataFrame":
    """Adds ``per_topic`` (bool), ``expected_imbalance`` and ``expected_idle`` from the rules in
    the module docstring (all members subscribed to the same topics)."""
    from pyspark.sql import functions as F

    c, t, p = F.col("consumers"), F.col("topics"), F.col("partitions")
    per_topic = F.col("assignor").isin(*PER_TOPIC)
    uneven_topic = (p % c != 0).cast("int")
    uneven_pool = ((t * p) % c != 0).cast("int")
    return (cases.withColumn("per_topic", per_topic)
            .withColumn("expected_imbalance", F.when(per_topic, t * uneven_topic).otherwise(uneven_pool))
            .withColumn("expected_idle", F.when(per_topic, F.greatest(F.lit(0), c - p))
                        .otherwise(F.greatest(F.lit(0), c - t * p))))


def violations(cases: "DataFrame") -> "DataFrame":
    """Case runs that break a rule: a member row missing (``members != consumers``), a
    partition unassigned or doubled (``total != topics * partitions``), or imbalance / idle
    count other than expected. Empty when the cluster followed every rule."""
    from pyspark.sql import functions as F

    e = with_expectations(cases)
    return e.where((F.col("members") != F.col("consumers"))
                   | (F.col("total") != F.col("topics") * F.col("partitions"))
                   | (F.col("imbalance") != F.col("expected_imbalance"))
                   | (F.col("idle") != F.col("expected_idle")))


def _ordered(labels: Sequence[str], order: Sequence[str]) -> list[str]:
    return [a for a in order if a in labels] + sorted(a for a in labels if a not in order)


def pivots(cases: "DataFrame", values: Sequence[str] = ("imbalance", "idle")) -> dict[str, "pd.DataFrame"]:
    """assignor x case tables, one per column in ``values`` (max over repeated runs), for
    ``assignment_plots.imbalance_heatmap``; all computed by one Spark pivot.

    Only the small pivoted result is converted (``toPandas``). Rows follow
    ``assignment.LABELS``; columns are ordered by consumers, topics, partitions.
    """
    from pyspark.sql import functions as F

    order = [r["case"] for r in cases.select("consumers", "topics", "partitions", "case").distinct()
             .orderBy("consumers", "topics", "partitions").collect()]
    wide = (cases.groupBy("assignor").pivot("case", order).agg(*[F.max(v).alias(v) for v in values])
            .toPandas().set_index("assignor"))
    rows = _ordered(list(wide.index), LABELS)
    out = {}
    for v in values:
        table = wide[order] if len(values) == 1 else wide[[f"{c}_{v}" for c in order]]
        table = table.set_axis(order, axis=1).loc[rows]
        table.columns.name = "case"
        out[v] = table
    return out


def imbalance_pivot(cases: "DataFrame", value: str = "imbalance") -> "pd.DataFrame":
    """assignor x case table of ``value`` (see ``pivots``)."""
    return pivots(cases, (value,))[value]


def by_topic_count(cases: "DataFrame", value: str = "imbalance") -> "pd.DataFrame":
    """(assignor, consumers, partitions) x topics table of ``value``: how a quantity changes as
    topics are added with everything else fixed (max over repeated runs)."""
    from pyspark.sql import functions as F

    topics = sorted(r["topics"] for r in cases.select("topics").distinct().collect())
    table = (cases.groupBy("assignor", "consumers", "partitions").pivot("topics", topics).agg(F.max(value))
             .toPandas())
    table["_o"] = table["assignor"].map({a: i for i, a in enumerate(LABELS)}).fillna(len(LABELS))
    table = table.sort_values(["_o", "consumers", "partitions"]).drop(columns="_o")
    table = table.set_index(["assignor", "consumers", "partitions"])
    table.columns = [int(c) for c in table.columns]
    table.columns.name = "topics"
    return table


def by_assignor(cases: "DataFrame") -> "pd.DataFrame":
    """Per assignor: runs, worst and mean imbalance, idle members in total, and mean time to
    a stable group (ms)."""
    from pyspark.sql import functions as F

    table = (cases.groupBy("assignor")
             .agg(F.count("*").alias("runs"), F.max("imbalance").alias("worst_imbalance"),
                  F.round(F.avg("imbalance"), 2).alias("mean_imbalance"), F.sum("idle").alias("idle_members"),
                  F.round(F.avg("elapsed_ms")).cast("long").alias("mean_ms_to_stable"))
             .toPandas().set_index("assignor"))
    return table.loc[_ordered(list(table.index), LABELS)]
