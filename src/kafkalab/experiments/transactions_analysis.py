"""Notebook 05's measuring side: the exactly-once audit, control markers on disk (as a table;
the coordinator's address is ``kafkalab.coordinators``), and the throughput plot.

Pure functions (no cluster) are tested on planted data in ``tests/test_transactions_analysis.py``;
``spark_*`` functions take a SparkSession and return small results, computed by Spark.

The audit is the one Kafka's own system test runs on a transactional copy job
(``tests/kafkatest/tests/core/transactions_test.py``: "output set equals input set" and "no
duplicates"), in Jepsen's words (jepsen-io/jepsen ``jepsen/tests/kafka.clj``): a *lost write*
is an input record missing from the output, a *duplicate* an input record present more than
once, an *aborted read* a record of an aborted transaction that a read_committed reader saw.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from pyspark.sql import DataFrame

    from ..dumplog import DumpedRecord
    from ..ledger import Event


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
    left uncommitted, else 0 or null). One Spark job with two aggregations and no join: input
    and output rows are unioned and counted per (view, record_id), then per view.

    Returns:
        View name -> ``Verdict`` for every view that has input or output rows.
    """
    from pyspark.sql import functions as F

    rows = (inputs.select("view", "record_id", F.lit(1).alias("is_input"), F.lit(0).alias("n"),
                          F.lit(0).alias("is_left"))
            .unionByName(outputs.select("view", "record_id", F.lit(0).alias("is_input"), F.lit(1).alias("n"),
                                        F.coalesce(F.col("is_left").cast("int"), F.lit(0)).alias("is_left"))))
    per_id = rows.groupBy("view", "record_id").agg(F.max("is_input").alias("in_input"), F.sum("n").alias("n"),
                                                   F.sum("is_left").alias("left_n"))
    result = per_id.groupBy("view").agg(
        F.sum("in_input").alias("input"),
        F.sum("n").alias("output"),
        F.count(F.when(F.col("n") > 0, 1)).alias("distinct_output"),
        F.coalesce(F.sum(F.when(F.col("n") > 1, F.col("n") - 1)), F.lit(0)).alias("duplicates"),
        F.count(F.when(F.col("n") > 1, 1)).alias("duplicated_ids"),
        F.count(F.when((F.col("in_input") == 1) & (F.col("n") == 0), 1)).alias("lost"),
        F.count(F.when((F.col("in_input") == 0) & (F.col("n") > 0), 1)).alias("unexpected"),
        F.sum("left_n").alias("left_read"),
    ).collect()
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


def spark_verdict(input_ids: "DataFrame", output_ids: "DataFrame") -> Verdict:
    """``spark_verdicts`` for one view: both frames have a ``record_id`` column."""
    return spark_verdicts({"view": input_ids}, {"view": output_ids})["view"]


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


# ----------------------------------------------------------------------------- plotting


def plot_throughput(table: "pd.DataFrame", ax: "Axes | None" = None) -> "Axes":
    """Records/s against records per transaction (log x axis), with the non-transactional
    baseline as a dashed line.

    Args:
        table: columns ``records_per_txn`` (None or NaN for the baseline row), ``records_per_s``.
        ax: where to draw; a new figure if None.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.2))
    txn = table[table["records_per_txn"].notna()]
    base = table[table["records_per_txn"].isna()]
    ax.plot(txn["records_per_txn"], txn["records_per_s"], marker="o", label="transactional")
    for v in base["records_per_s"]:
        ax.axhline(v, linestyle="--", color="gray", label="idempotent, no transactions")
    ax.set_xscale("log")
    ax.set_xlabel("records per transaction")
    ax.set_ylabel("records/s (measured)")
    ax.set_title("Throughput of one librdkafka producer")
    ax.legend(loc="lower right")
    return ax
