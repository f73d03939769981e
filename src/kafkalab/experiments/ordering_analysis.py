"""Counting order inversions: adjacent pairs out of producer order, in plain Python and in Spark.

Notebook 07 (``kafkalab.experiments.ordering``) numbers every record it produces with a
sequence number ``seq`` (0, 1, 2, ... in the order the single producer called
``produce``) and records how each was consumed: partition, offset, the consumer, and a
global consumption ``index`` (the order in which records were handed to the application,
over all consumers of the group). An *inversion* is a pair of records adjacent in some
order whose sequence numbers go down. Three orders are counted:

====================  ==========================================================  ===================
count                 the order                                                   Jepsen's term
====================  ==========================================================  ===================
global_inversions     everything consumed, by consumption ``index``               (order across
                                                                                  partitions: none
                                                                                  is promised)
per_key_inversions    each key's records, by consumption ``index`` (null keys     nonmonotonic send
                      are skipped)                                                (by key)
per_partition_        each partition's records, by ``offset`` (the log order)     nonmonotonic send
inversions                                                                        (order inversion)
====================  ==========================================================  ===================

A sequence has no adjacent inversion exactly when it is sorted, so a count of 0 means "this
order is the producer's order" and any positive count means it is not. The count is the
number of places where the order steps back, not the number of misplaced records (one
record retried to the end of a partition of N records gives 1).

``count_inversions`` works on Python lists (the CLI and tests); ``spark_inversions`` does
the same in Spark with ``kafkalab.audit.inversions`` (``lag`` over each key and each
partition), so the notebook measures with Spark and checks the two agree.

Sources: Jepsen's Kafka checker, jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``
(``nonmonotonic-send-cases``, ``poll-skip+nonmonotonic-cases``); Kafka documentation,
Introduction ("Kafka only provides a total order over records within a partition, not
between different partitions in a topic"); Spark SQL window functions (``lag``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

#: The three counts, in report order (also the keys of ``InversionCounts.to_json``).
COUNTS: tuple[str, ...] = ("global_inversions", "per_key_inversions", "per_partition_inversions")


@dataclass(frozen=True)
class Consumed:
    """One record as the application received it.

    Attributes:
        seq: producer order (0 = produced first).
        key: the record key as text, or None.
        partition: partition it was read from.
        offset: its offset in that partition.
        consumer: who received it (``client.id``).
        index: global consumption order over all consumers (0 = received first).
        batch: number of the ``consume()`` call that returned it (global, increasing); records
            of one call got consecutive ``index`` values.
    """

    seq: int
    key: str | None
    partition: int
    offset: int
    consumer: str
    index: int
    batch: int = 0


@dataclass(frozen=True)
class InversionCounts:
    """Adjacent pairs out of producer order, per ``COUNTS`` (see the module docstring)."""

    global_inversions: int
    per_key_inversions: int
    per_partition_inversions: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def adjacent_inversions(seqs: Sequence[int]) -> int:
    """Places where ``seqs`` steps down: ``#{i : seqs[i] < seqs[i-1]}``. 0 iff sorted.

    >>> adjacent_inversions([0, 1, 3, 2, 4, 0])
    2
    """
    return sum(1 for a, b in zip(seqs, seqs[1:]) if b < a)


def count_inversions(records: Iterable[Consumed]) -> InversionCounts:
    """The three counts of the module docstring, in plain Python.

    Global: all records ordered by ``index``. Per key: each non-null key's records ordered
    by ``index``. Per partition: each partition's records ordered by ``offset``.
    """
    recs = list(records)
    by_index = sorted(recs, key=lambda r: r.index)
    by_key: dict[str, list[int]] = defaultdict(list)
    for r in by_index:
        if r.key is not None:
            by_key[r.key].append(r.seq)
    by_partition: dict[int, list[Consumed]] = defaultdict(list)
    for r in recs:
        by_partition[r.partition].append(r)
    return InversionCounts(
        adjacent_inversions([r.seq for r in by_index]),
        sum(adjacent_inversions(s) for s in by_key.values()),
        sum(adjacent_inversions([r.seq for r in sorted(rs, key=lambda r: r.offset)]) for rs in by_partition.values()),
    )


def interleaving_witness(records: Iterable[Consumed]) -> tuple[int, int, int] | None:
    """Proof, from how the records were handed over, that the global order cannot be sorted.

    Returns ``(a, b, c)``: records ``a < b`` (sequence numbers) of one partition that one
    ``consume()`` call returned together (so nothing came between them), and a record ``c``
    of *another* partition with ``a < c < b``. Wherever ``c`` was consumed, before ``a`` or
    after ``b``, the global order steps down somewhere: at least one global inversion.
    None if no batch holds such a pair (then the global order may or may not be sorted).
    """
    recs = list(records)
    seq_partition = {r.seq: r.partition for r in recs}
    ordered = sorted(seq_partition)
    batches: dict[int, list[Consumed]] = defaultdict(list)
    for r in sorted(recs, key=lambda r: r.index):
        batches[r.batch].append(r)
    for rs in batches.values():
        for prev, cur in zip(rs, rs[1:]):
            if prev.partition != cur.partition or cur.seq <= prev.seq + 1:
                continue
            for c in ordered:
                if prev.seq < c < cur.seq and seq_partition[c] != cur.partition:
                    return prev.seq, cur.seq, c
    return None


def records_frame(records: Iterable[Consumed]) -> "pd.DataFrame":
    """The records as a pandas DataFrame (one row each, columns of ``Consumed``), by ``index``."""
    import pandas as pd

    cols = ["seq", "key", "partition", "offset", "consumer", "index", "batch"]
    return pd.DataFrame([asdict(r) for r in records], columns=cols).sort_values("index", kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------- Spark


def spark_frame(spark: "SparkSession", records: Iterable[Consumed], run: str = "") -> "DataFrame":
    """The records as a Spark DataFrame: ``run`` (a label, to count several runs in one
    query), ``seq`` long, ``key`` string (nullable), ``partition`` int, ``offset`` long,
    ``consumer`` string, ``index`` long, ``batch`` long."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    schema = StructType([
        StructField("run", StringType(), False), StructField("seq", LongType(), False),
        StructField("key", StringType(), True), StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False), StructField("consumer", StringType(), False),
        StructField("index", LongType(), False), StructField("batch", LongType(), False),
    ])
    rows = [(run, r.seq, r.key, r.partition, r.offset, r.consumer, r.index, r.batch) for r in records]
    return spark.createDataFrame(rows, schema)


def spark_inversions(df: "DataFrame") -> "DataFrame":
    """One row per inversion found with window functions: ``run``, ``scope`` (``global``,
    ``key`` or ``partition``), ``group`` (the key or partition as text; ``*`` for global),
    ``prev_seq``, ``seq`` (``seq < prev_seq``), ``prev_at``, ``at`` (the index or offset).

    Per scope, ``kafkalab.audit.inversions`` of ``seq`` (``lag`` over a window): global by
    run, ordered by ``index``; key by run and key, ordered by ``index`` (null keys left out);
    partition by run and partition, ordered by ``offset``. Lazy; ``df`` has the columns of
    ``spark_frame``.
    """
    from pyspark.sql import functions as F

    from .. import audit

    def steps(frame: "DataFrame", scope: str, group: "F.Column", by: list[str], order: str) -> "DataFrame":
        return (audit.inversions(frame, ["run", *by], [order], "seq", carry=(order,))
                .select("run", F.lit(scope).alias("scope"), group.alias("group"), "prev_seq", "seq",
                        F.col(f"prev_{order}").alias("prev_at"), F.col(order).alias("at")))

    return (steps(df, "global", F.lit("*"), [], "index")
            .unionByName(steps(df.where(F.col("key").isNotNull()), "key", F.col("key"), ["key"], "index"))
            .unionByName(steps(df, "partition", F.col("partition").cast("string"), ["partition"], "offset")))


def spark_counts(df: "DataFrame", runs: Iterable[str] | None = None) -> dict[str, InversionCounts]:
    """``InversionCounts`` per run, from ``spark_inversions`` counted in Spark: one job that
    brings a few integers back to the driver. ``runs``: the run labels to report (those
    without inversions count 0); default every ``run`` of ``df`` (one more job)."""
    from pyspark.sql import functions as F

    names = list(runs) if runs is not None else [r["run"] for r in df.select("run").distinct().collect()]
    found = spark_inversions(df).groupBy("run", "scope").agg(F.count(F.lit(1)).alias("n")).collect()
    n = {(r["run"], r["scope"]): int(r["n"]) for r in found}
    return {run: InversionCounts(n.get((run, "global"), 0), n.get((run, "key"), 0), n.get((run, "partition"), 0))
            for run in names}


def warm_up(spark: "SparkSession") -> None:
    """``spark_counts`` on a few planted records: Spark's first window query spends seconds
    generating code, and as the warm-up notebook 07 gives
    ``kafkalab.spark.session_in_background`` that overlaps the Kafka experiments."""
    planted = [Consumed(s, "k", 0, o, "c", o) for o, s in enumerate([1, 0, 2])]
    spark_counts(spark_frame(spark, planted, "warm-up"), ["warm-up"])
