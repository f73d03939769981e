"""The late transaction request's audit (notebook 11): one row per record a run's program meant
to write, and the anomalies counted over them in Spark, in Jepsen's words
(``jepsen/src/jepsen/tests/kafka.clj``; Jepsen, "Bufstream 0.1.0", 2024):

=====================  ======================================================================
anomaly                a row (or a transaction) of a run where ...
=====================  ======================================================================
aborted read           a record of a transaction the program did not see committed (it
                       aborted it, or its commit failed) is visible to the read_committed reader
lost write             a record the broker acknowledged, of a transaction the program saw
                       committed, is not visible to the reader
torn transaction       some of a transaction's records are visible and others are not
=====================  ======================================================================

``write_rows`` builds the rows from a ``late_txn.LateTxnRun`` (plain Python), ``spark_frame``
makes them a DataFrame, ``spark_counts`` counts per run; ``python_counts`` counts the same in
plain Python, so a notebook can show that Spark agrees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class WriteRow:
    """One record the program meant to write.

    Attributes:
        run: the run's label.
        value: the record's value (``N-0``, ``N+1-before-2``...).
        txn: ``"N"`` or ``"N+1"``.
        acked: the broker acknowledged it (a delivery report without error).
        committed: the program saw its transaction committed (``commit_transaction`` returned).
        seen: the read_committed reader read it.
    """

    run: str
    value: str
    txn: str
    acked: bool
    committed: bool
    seen: bool


def write_rows(label: str, run: Any) -> list[WriteRow]:
    """The rows of one ``late_txn.LateTxnRun``: every value with a delivery report in the
    program's steps (acknowledged or refused), its transaction, whether the program saw that
    transaction committed (N: the ``committed`` step; N+1: never, the program aborts it), and
    whether the reader saw it."""
    steps = run.program
    committed = {"N": any(s.get("step") == "committed" and s.get("txn") == "N" for s in steps),
                 "N+1": any(s.get("step") == "committed" and s.get("txn") == "N+1" for s in steps)}
    seen = set(run.seen)
    out = []
    for s in steps:
        if s.get("step") != "delivery":
            continue
        txn = "N+1" if s["value"].startswith("N+1") else "N"
        out.append(WriteRow(label, s["value"], txn, s.get("error") is None, committed[txn], s["value"] in seen))
    return out


def python_counts(rows: list[WriteRow]) -> dict[str, dict[str, int]]:
    """Per run: ``aborted_reads``, ``lost_writes``, ``torn_transactions`` (plain Python)."""
    out: dict[str, dict[str, int]] = {}
    for run in dict.fromkeys(r.run for r in rows):
        mine = [r for r in rows if r.run == run]
        torn = 0
        for txn in dict.fromkeys(r.txn for r in mine):
            vis = [r.seen for r in mine if r.txn == txn]
            torn += int(0 < sum(vis) < len(vis))
        out[run] = {"aborted_reads": sum(r.seen and not r.committed for r in mine),
                    "lost_writes": sum(r.acked and r.committed and not r.seen for r in mine),
                    "torn_transactions": torn}
    return out


def spark_frame(spark: "SparkSession", rows: list[WriteRow]) -> "DataFrame":
    """The rows as a DataFrame: ``run``, ``value``, ``txn`` strings; ``acked``, ``committed``,
    ``seen`` booleans."""
    from pyspark.sql.types import BooleanType, StringType, StructField, StructType

    schema = StructType([StructField(n, StringType(), False) for n in ("run", "value", "txn")]
                        + [StructField(n, BooleanType(), False) for n in ("acked", "committed", "seen")])
    return spark.createDataFrame([(r.run, r.value, r.txn, r.acked, r.committed, r.seen) for r in rows], schema)


def spark_counts(df: "DataFrame") -> dict[str, dict[str, int]]:
    """Per run, counted by Spark: ``aborted_reads`` (seen, of a transaction the program did not
    see committed), ``lost_writes`` (acknowledged and committed, not seen) and
    ``torn_transactions`` (transactions with some rows seen and some not). Collects one row per
    run."""
    from pyspark.sql import functions as F

    per_txn = (df.groupBy("run", "txn")
               .agg(F.sum(F.col("seen").cast("int")).alias("seen"), F.count("*").alias("rows"))
               .groupBy("run")
               .agg(F.sum(((F.col("seen") > 0) & (F.col("seen") < F.col("rows"))).cast("int")).alias("torn_transactions")))
    per_row = df.groupBy("run").agg(
        F.sum((F.col("seen") & ~F.col("committed")).cast("int")).alias("aborted_reads"),
        F.sum((F.col("acked") & F.col("committed") & ~F.col("seen")).cast("int")).alias("lost_writes"))
    rows = per_row.join(per_txn, "run").collect()
    return {r["run"]: {"aborted_reads": int(r["aborted_reads"]), "lost_writes": int(r["lost_writes"]),
                       "torn_transactions": int(r["torn_transactions"])} for r in rows}


def warm_up(spark: "SparkSession") -> None:
    """``spark_counts`` on two planted rows: the first aggregation of a new JVM is slow, and as
    the warm-up notebook 11 gives ``kafkalab.spark.session_in_background`` it overlaps the
    Kafka runs."""
    spark_counts(spark_frame(spark, [WriteRow("warm-up", "N-0", "N", True, True, True),
                                     WriteRow("warm-up", "N+1-before-0", "N+1", True, False, True)]))
