"""Notebook 12's counts in Spark: for each run, what one side holds (the orders committed in the
service's database, the events in the topic) against what the other side holds (the events in
the topic, the shipments in the consumer's database), by id.

- a *lost* id: expected, never seen (a **left anti join** of expected against seen);
- an *unexpected* id: seen, never expected (an event for an order that does not exist: the
  anti join the other way);
- a *duplicate*: an id seen more than once (a **group-by** on the id; each extra copy counts).

``outbox.count`` is the same in plain Python; the notebook asserts they agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The columns of ``counts``, in order.
COLUMNS = ("run", "expected", "seen", "lost", "unexpected", "duplicates")


def frames(spark: SparkSession, runs: Mapping[str, tuple[Sequence[str], Sequence[str]]]) -> tuple[DataFrame, DataFrame]:
    """Two DataFrames ``(run, id)`` from ``runs``: run label -> (expected ids, seen ids, one per
    copy): the expected rows and the seen rows."""
    schema = "run string, id string"
    expected = spark.createDataFrame([(r, i) for r, (exp, _) in runs.items() for i in exp], schema)
    seen = spark.createDataFrame([(r, i) for r, (_, got) in runs.items() for i in got], schema)
    return expected, seen


def counts(expected: DataFrame, seen: DataFrame) -> DataFrame:
    """Per run: ``expected`` (distinct ids), ``seen`` (copies), ``lost`` (anti join of expected
    against seen), ``unexpected`` (anti join of seen against expected), ``duplicates`` (extra
    copies, from a group-by on the id). Columns ``COLUMNS``; a run with nothing of a kind has 0."""
    from pyspark.sql import functions as F

    exp = expected.distinct()
    per_id = seen.groupBy("run", "id").agg(F.count("*").alias("copies"))
    parts = [
        exp.groupBy("run").agg(F.count("*").alias("expected")),
        seen.groupBy("run").agg(F.count("*").alias("seen")),
        exp.join(per_id, ["run", "id"], "left_anti").groupBy("run").agg(F.count("*").alias("lost")),
        per_id.join(exp, ["run", "id"], "left_anti").groupBy("run").agg(F.count("*").alias("unexpected")),
        per_id.where("copies > 1").groupBy("run").agg(F.sum(F.col("copies") - 1).alias("duplicates")),
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.join(part, "run", "full_outer")
    return out.fillna(0).select(*[F.col(c).cast("long") if c != "run" else F.col(c) for c in COLUMNS])


def as_dicts(frame: DataFrame) -> dict[str, dict[str, int]]:
    """``counts`` collected: run -> {expected, seen, lost, unexpected, duplicates}."""
    return {r["run"]: {c: int(r[c]) for c in COLUMNS[1:]} for r in frame.collect()}


def warm_up(spark: SparkSession) -> None:
    """``counts`` on two planted runs: loads the classes of the joins and group-bys while the
    programs run (``spark.session_in_background``)."""
    e, s = frames(spark, {"a": (["1", "2"], ["1", "1"]), "b": (["3"], ["4"])})
    counts(e, s).collect()
