"""PySpark checks of a ledger, named with Jepsen's anomaly vocabulary.

Every check takes the ledger DataFrame (``kafkalab.ledger.load``: one row per
``Event``, any number of runs) and returns a lazy DataFrame with one row per anomaly;
``summary`` counts them. Nothing is collected to the driver except ``summary``'s
handful of integers, so the same code audits a ledger of billions of events on a
cluster.

All rules group by ``run_id`` (a run's producers and consumers must share one) and
compare values within one ``topic``; ``value`` is the record's unique id.

Definitions follow Jepsen's Kafka checker, jepsen-io/jepsen
``jepsen/src/jepsen/tests/kafka.clj`` (``lost-write-cases``, ``unseen``,
``duplicate-cases``, ``poll-skip+nonmonotonic-cases``, ``nonmonotonic-send-cases``),
adapted from Jepsen's operation histories to one row per record:

=========================  ==============================================================
check                      a row per ...
=========================  ==============================================================
lost_writes                acked value never consumed, although an equal or later offset
                           of its partition was (Jepsen: lost write)
unseen                     acked value never consumed, and nothing at or after its offset
                           was either (Jepsen: unseen; maybe the consumer stopped early)
duplicates                 value the log holds at more than one offset (Jepsen: duplicate)
redeliveries               log position handed to the application more than once
processed_more_than_once   value whose side effect ran more than once
nonmonotonic_polls         consumed offset not above the same consumer's previous one in
                           the partition (Jepsen: nonmonotonic poll)
order_inversions           value of a key that the log holds before a value the same
                           producer sent earlier (Jepsen: nonmonotonic send, by key)
=========================  ==============================================================

Ordering of events is ``(ts_ms, seq)``: wall clock, then the writer's own counter
(exact within one ``Ledger``; see ``kafkalab.ledger``).

The checks are built on two primitives that also take any record frame (a topic read by
``kafkalab.spark.read_topic``, an experiment's own records), so an experiment counts its
anomalies here and adds only what is specific to it:

=========================  ==============================================================
``positions``              per value: the log positions holding it (``copies`` > 1 is a
                           duplicate); ``log_against_acks`` joins them with the acks (0
                           copies of an acked value is a lost write)
``inversions``             per group, in a given order: the places where a column steps
                           back (Jepsen: nonmonotonic; an order inversion)
``input_against_output``   a copy job's output ids against its input ids: lost, duplicated,
                           unexpected, and read from aborted transactions
=========================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Columns that order events: wall clock (ms), then the per-Ledger sequence number.
ORDER: tuple[str, ...] = ("ts_ms", "seq")


def of_kind(events: DataFrame, kind: str) -> DataFrame:
    """Rows of ``events`` whose ``kind`` is ``kind`` (one of ``kafkalab.ledger.KINDS``).

    Raises:
        ValueError: unknown kind.
    """
    from pyspark.sql import functions as F

    from kafkalab.ledger import check_kind

    return events.where(F.col("kind") == check_kind(kind))


def consumer_col() -> Column:
    """Who consumed: ``member_id``, or ``client_id`` when there is no group membership.

    A member id names one incarnation of a group member: a restarted process (or one
    fenced out and rejoined) gets a new one, so its replay is not compared with what the
    old incarnation read.
    """
    from pyspark.sql import functions as F

    return F.coalesce(F.col("member_id"), F.col("client_id"))


def positions(records: DataFrame, by: tuple[str, ...] = ("topic", "value"), extra: tuple[Column, ...] = ()) -> DataFrame:
    """Per value: the distinct log positions that hold it.

    Args:
        records: a frame with the columns of ``by`` and ``partition``, ``offset`` (consumed
            ledger events, or a topic read with ``kafkalab.spark.read_topic`` and its value
            cast to string). Rows at the same position count once.
        by: the columns naming one value (``("run_id", "topic", "value")`` for a ledger).
        extra: more aggregate columns to compute in the same group-by (kept after ``by``).

    Returns:
        Lazy DataFrame, one row per value: the ``by`` columns, the ``extra`` ones, ``copies`` (distinct
        positions, >= 1), ``offsets`` (sorted array of ``struct<partition, offset>``). A value
        with ``copies > 1`` is a duplicate (Jepsen: "a single value appears at more than one
        offset").
    """
    from pyspark.sql import functions as F

    grouped = records.groupBy(*by).agg(*extra, F.array_sort(F.collect_set(F.struct("partition", "offset"))).alias("offsets"))
    return grouped.select(*grouped.columns[:-1], F.size("offsets").alias("copies"), "offsets")


def acks(events: DataFrame, by: tuple[str, ...] = ("topic", "value")) -> DataFrame:
    """Per value: the successful delivery reports of the ledger (``acked`` events without
    ``error``): the ``by`` columns, ``acks`` (how many), ``acked_offsets`` (sorted offsets the
    producer was told)."""
    from pyspark.sql import functions as F

    return (
        of_kind(events, "acked")
        .where(F.col("error").isNull())
        .groupBy(*by)
        .agg(F.count(F.lit(1)).alias("acks"), F.array_sort(F.collect_list("offset")).alias("acked_offsets"))
    )


def log_against_acks(records: DataFrame, events: DataFrame, by: tuple[str, ...] = ("topic", "value")) -> DataFrame:
    """What the log holds against what the producers were told, per value.

    Args:
        records: the log, read in full (a topic read with ``kafkalab.spark.read_topic``, the
            value cast to string): columns of ``by``, ``partition``, ``offset``.
        events: the producers' ledger (``kafkalab.ledger.load``), restricted by the caller to
            the values of ``records``' topics.
        by: the columns naming one value.

    Returns:
        Lazy DataFrame, one row per value in either (full outer join): the ``by`` columns,
        ``copies``, ``offsets`` (``positions``), ``acks``, ``acked_offsets`` (``acks``);
        ``copies`` and ``acks`` are 0 where a side has none. ``copies > 1``: a duplicate;
        ``copies == 0`` and ``acks >= 1``: a lost write (the log was read to its end).
    """
    return positions(records, by).join(acks(events, by), list(by), "full_outer").fillna({"copies": 0, "acks": 0})


def inversions(frame: DataFrame, by: list[str], order: list[str], column: str, strict: bool = True,
               carry: tuple[str, ...] = ()) -> DataFrame:
    """Places where ``column`` steps back in the ``order`` of each ``by`` group (Jepsen:
    nonmonotonic): every row whose ``column`` is below the previous row's (``strict``), or
    at or below it (not ``strict``: a repeat counts too).

    A sequence has no such step exactly when it is sorted (strictly, if not ``strict``), so
    the count is 0 iff the order agrees with ``column``; it counts places, not misplaced rows.

    Args:
        frame: any DataFrame with the columns used.
        by: the columns of one group (empty: the whole frame is one group).
        order: the columns that order a group.
        column: the column that must not step back.
        strict: compare with ``<`` (True) or ``<=`` (False).
        carry: more columns whose previous-row value to add.

    Returns:
        Lazy DataFrame: the rows of ``frame`` that step back, with ``prev_<column>`` and
        ``prev_<c>`` for each ``c`` of ``carry`` (the previous row's values) added.

    Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``
    (``nonmonotonic-send-cases``, ``poll-skip+nonmonotonic-cases``); Spark SQL ``lag``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*by).orderBy(*order)
    prev = F.col(f"prev_{column}")
    stepped = (F.col(column) < prev) if strict else (F.col(column) <= prev)
    out = frame.withColumn(f"prev_{column}", F.lag(column).over(window))
    for c in carry:
        out = out.withColumn(f"prev_{c}", F.lag(c).over(window))
    return out.where(stepped)


def input_against_output(inputs: DataFrame, outputs: DataFrame, by: str = "view", id_col: str = "record_id") -> DataFrame:
    """A copy job's output against its input, per ``by`` group (one "view" of a pipeline):
    Kafka's exactly-once check "output set equals input set, no duplicates", in Jepsen's terms.

    One job with two aggregations and no join: input and output rows are unioned and counted
    per (``by``, ``id_col``), then per ``by``.

    Args:
        inputs: columns ``by``, ``id_col`` (one row per input record).
        outputs: columns ``by``, ``id_col`` (one row per output record, repeats kept) and
            ``is_left`` (1 for a record read at a position left uncommitted, i.e. a record of
            an aborted transaction; 0 or null otherwise).
        by: the grouping column.
        id_col: the record id column.

    Returns:
        Lazy DataFrame, one row per group with input or output rows: ``by``, ``input``
        (distinct input ids), ``output`` (output rows), ``distinct_output``, ``duplicates``
        (output rows beyond the first of each id), ``duplicated_ids`` (ids output more than
        once: Jepsen duplicate), ``lost`` (input ids never output: Jepsen lost write),
        ``unexpected`` (output ids not in the input), ``left_read`` (output rows at left
        positions: Jepsen G1a, aborted read).

    Source: Kafka ``tests/kafkatest/tests/core/transactions_test.py`` (output set equals input
    set, no duplicates); jepsen-io/jepsen ``kafka.clj`` (lost write, duplicate, aborted read).
    """
    from pyspark.sql import functions as F

    rows = (inputs.select(by, id_col, F.lit(1).alias("is_input"), F.lit(0).alias("n"), F.lit(0).alias("is_left"))
            .unionByName(outputs.select(by, id_col, F.lit(0).alias("is_input"), F.lit(1).alias("n"),
                                        F.coalesce(F.col("is_left").cast("int"), F.lit(0)).alias("is_left"))))
    per_id = rows.groupBy(by, id_col).agg(F.max("is_input").alias("in_input"), F.sum("n").alias("n"),
                                          F.sum("is_left").alias("left_n"))
    return per_id.groupBy(by).agg(
        F.sum("in_input").alias("input"),
        F.sum("n").alias("output"),
        F.count(F.when(F.col("n") > 0, 1)).alias("distinct_output"),
        F.coalesce(F.sum(F.when(F.col("n") > 1, F.col("n") - 1)), F.lit(0)).alias("duplicates"),
        F.count(F.when(F.col("n") > 1, 1)).alias("duplicated_ids"),
        F.count(F.when((F.col("in_input") == 1) & (F.col("n") == 0), 1)).alias("lost"),
        F.count(F.when((F.col("in_input") == 0) & (F.col("n") > 0), 1)).alias("unexpected"),
        F.sum("left_n").alias("left_read"),
    )


def _acked_not_consumed(events: DataFrame) -> DataFrame:
    """Acknowledged values with no consumed event in their topic, beside the highest
    offset consumed in their partition (``max_read_offset``, null if none)."""
    from pyspark.sql import functions as F

    acked = (
        of_kind(events, "acked")
        .where(F.col("error").isNull())
        .groupBy("run_id", "topic", "value")
        .agg(
            F.min("partition").alias("partition"),
            F.min("offset").alias("offset"),
            F.min("key").alias("key"),
            F.min("ts_ms").alias("acked_ts_ms"),
        )
    )
    consumed = of_kind(events, "consumed")
    seen = consumed.select("run_id", "topic", "value").distinct()
    max_read = consumed.groupBy("run_id", "topic", "partition").agg(
        F.max("offset").alias("max_read_offset")
    )
    return acked.join(seen, ["run_id", "topic", "value"], "left_anti").join(
        max_read, ["run_id", "topic", "partition"], "left"
    )


def _read_past() -> Column:
    """The acked offset is known and at or below the highest offset consumed in its partition."""
    from pyspark.sql import functions as F

    return (
        F.col("offset").isNotNull()
        & F.col("max_read_offset").isNotNull()
        & (F.col("offset") <= F.col("max_read_offset"))
    )


_LOST_COLUMNS = ("run_id", "topic", "partition", "offset", "key", "value", "max_read_offset", "acked_ts_ms")


def lost_writes(events: DataFrame) -> DataFrame:
    """Lost writes: acknowledged values never consumed although an equal or later offset
    of the same partition was consumed.

    An ``acked`` event without ``error`` says the broker acknowledged the value at
    ``(partition, offset)``. If some consumer read that partition up to an offset
    ``>= offset`` and no consumer ever read the value (in that topic), the value was
    skipped or is gone from the log: the write was lost. Equal counts because a different
    value read at the acked offset means the log no longer holds this one.

    Args:
        events: ledger DataFrame (``ledger_schema()``).

    Returns:
        Lazy DataFrame, one row per lost value: ``run_id``, ``topic``, ``partition``,
        ``offset`` (acked), ``key``, ``value``, ``max_read_offset`` (highest offset
        consumed in that partition), ``acked_ts_ms``.

    Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``, ``lost-write-cases``
    ("every :ok :send operation with an equal or lower offset [than the highest observed]
    was *also* read by at least one consumer"); Kafka's own
    ``tests/kafkatest/tests/core/replication_test.py`` ("every acked message was consumed").
    """
    rows = _acked_not_consumed(events)
    return rows.where(_read_past()).select(*_LOST_COLUMNS)


def unseen(events: DataFrame) -> DataFrame:
    """Unseen: acknowledged values never consumed, with nothing at or after their offset
    consumed either (or the acked offset unknown).

    Not proof of loss: the consumers may have stopped before reaching them. A value is
    either a lost write or unseen, never both. A run whose final read reaches the end of
    every partition has no unseen values unless writes were lost at the tail.

    Args:
        events: ledger DataFrame (``ledger_schema()``).

    Returns:
        Lazy DataFrame with the columns of ``lost_writes`` (``max_read_offset`` null
        when nothing in the partition was consumed).

    Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``, ``unseen``
    ("messages ... successfully acknowledged, but not polled by any client").
    """
    rows = _acked_not_consumed(events)
    return rows.where(~_read_past()).select(*_LOST_COLUMNS)


def duplicates(events: DataFrame) -> DataFrame:
    """Duplicates: values the log holds at more than one offset (seen by consumers).

    A Kafka-level duplicate, such as a producer retry without idempotence writing the
    same record twice. Reading one offset twice is not a duplicate (see
    ``redeliveries``).

    Args:
        events: ledger DataFrame (``ledger_schema()``).

    Returns:
        Lazy DataFrame, one row per duplicated value: ``run_id``, ``topic``, ``key``,
        ``value``, ``count`` (distinct offsets, >= 2), ``offsets`` (sorted array of
        ``struct<partition int, offset long>``).

    Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``, ``duplicate-cases``
    ("a single value appears at more than one offset in a key").
    """
    from pyspark.sql import functions as F

    consumed = of_kind(events, "consumed").where(F.col("offset").isNotNull())
    return (
        positions(consumed, ("run_id", "topic", "value"), (F.min("key").alias("key"),))
        .where(F.col("copies") > 1)
        .select("run_id", "topic", "key", "value", F.col("copies").alias("count"), "offsets")
    )


def redeliveries(events: DataFrame) -> DataFrame:
    """Redeliveries: log positions ``(topic, partition, offset)`` consumed more than once.

    The cost of at-least-once: after a rebalance, a crash or a restart from an older
    committed offset, a consumer reads again what was already read. The log holds the
    record once (that would be ``duplicates``).

    Args:
        events: ledger DataFrame (``ledger_schema()``).

    Returns:
        Lazy DataFrame, one row per position: ``run_id``, ``topic``, ``partition``,
        ``offset``, ``value``, ``deliveries`` (>= 2), ``consumers`` (sorted distinct
        ``member_id``/``client_id``).
    """
    from pyspark.sql import functions as F

    return (
        of_kind(events, "consumed")
        .where(F.col("offset").isNotNull())
        .groupBy("run_id", "topic", "partition", "offset")
        .agg(
            F.min("value").alias("value"),
            F.count(F.lit(1)).alias("deliveries"),
            F.array_sort(F.collect_set(consumer_col())).alias("consumers"),
        )
        .where(F.col("deliveries") > 1)
    )


def processed_more_than_once(events: DataFrame) -> DataFrame:
    """Values whose processing (the application's side effect) ran more than once.

    A processing-level duplicate: a consumer processed a record, crashed before its
    offset was committed, and the replay processed it again. Exactly-once processing
    means this is empty.

    Args:
        events: ledger DataFrame (``ledger_schema()``).

    Returns:
        Lazy DataFrame, one row per value: ``run_id``, ``topic``, ``value``, ``times``
        (>= 2), ``consumers`` (sorted distinct ``member_id``/``client_id``),
        ``first_ts_ms``, ``last_ts_ms``.

    Source: Kafka ``tests/kafkatest/tests/core/transactions_test.py`` (no duplicates,
    output set equals input set).
    """
    from pyspark.sql import functions as F

    return (
        of_kind(events, "processed")
        .groupBy("run_id", "topic", "value")
        .agg(
            F.count(F.lit(1)).alias("times"),
            F.array_sort(F.collect_set(consumer_col())).alias("consumers"),
            F.min("ts_ms").alias("first_ts_ms"),
            F.max("ts_ms").alias("last_ts_ms"),
        )
        .where(F.col("times") > 1)
    )


def nonmonotonic_polls(events: DataFrame, within_generation: bool = False) -> DataFrame:
    """Nonmonotonic polls: a consumer read an offset not above its previous one.

    For each consumer (``member_id``, else ``client_id``) and partition, consumed events
    in ``(ts_ms, seq)`` order must have strictly increasing offsets; a row is reported
    for each event whose offset is ``<=`` the previous one (going back, or reading the
    same offset again).

    Jepsen counts this as an error only for manually assigned partitions: with
    subscribe, a rebalance may hand a consumer a partition it read before, and it
    resumes at the committed offset. ``within_generation=True`` compares only events of
    the same group ``generation``, so such rebalance replays are not reported.

    Args:
        events: ledger DataFrame (``ledger_schema()``).
        within_generation: compare only within one group generation.

    Returns:
        Lazy DataFrame, one row per backward step: ``run_id``, ``consumer``, ``topic``,
        ``partition``, ``prev_offset``, ``offset``, ``value``, ``prev_generation``,
        ``generation``, ``ts_ms``, ``seq``.

    Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``,
    ``poll-skip+nonmonotonic-cases`` and ``nonmonotonic-poll-test`` ("t2 begins with a
    value from k *prior* to t1's final value").
    """
    from pyspark.sql import functions as F

    by = ["run_id", "consumer", "topic", "partition"] + (["generation"] if within_generation else [])
    consumed = of_kind(events, "consumed").where(F.col("offset").isNotNull()).withColumn("consumer", consumer_col())
    return inversions(consumed, by, list(ORDER), "offset", strict=False, carry=("generation",)).select(
        "run_id", "consumer", "topic", "partition", "prev_offset", "offset", "value",
        "prev_generation", "generation", "ts_ms", "seq",
    )


def order_inversions(events: DataFrame, key_col: str = "key") -> DataFrame:
    """Order inversions: for one key and one producer, the log order of values differs
    from the order they were produced in.

    Produced order is the ``(ts_ms, seq)`` order of ``produced`` events per
    ``(run_id, topic, key_col, client_id)``. Log order is the offset at which consumers
    first read each value (every consumer of a partition reads it in this order).
    Consecutive produced values ``a`` then ``b`` in the same partition are an inversion
    when ``a``'s offset is above ``b``'s (e.g. a retried batch overtaking the next one
    with ``max.in.flight > 1`` and no idempotence). Values never consumed are skipped
    (``lost_writes`` / ``unseen`` cover them). A sequence has no inversion exactly when
    it is sorted, so the rule reports none iff the two orders agree.

    Args:
        events: ledger DataFrame (``ledger_schema()``).
        key_col: column holding the ordering key (default ``"key"``).

    Returns:
        Lazy DataFrame, one row per inverted pair: ``run_id``, ``topic``, ``key_col``,
        ``producer`` (client_id), ``partition``, ``prev_value`` (produced first),
        ``prev_offset``, ``value`` (produced next), ``offset`` (< ``prev_offset``).

    Source: jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``,
    ``nonmonotonic-send-cases``; Kafka doc, producer configs ``max.in.flight.requests.per.connection``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first_produce = Window.partitionBy("run_id", "topic", "value").orderBy(*ORDER)
    produced = (
        of_kind(events, "produced")
        .withColumn("n", F.row_number().over(first_produce))
        .where(F.col("n") == 1)
        .select("run_id", "topic", "value", key_col, F.col("client_id").alias("producer"), *ORDER)
    )
    first_read = (
        of_kind(events, "consumed")
        .where(F.col("offset").isNotNull())
        .groupBy("run_id", "topic", "value")
        .agg(F.min(F.struct("partition", "offset")).alias("at"))
        .select("run_id", "topic", "value", "at.partition", "at.offset")
    )
    by = ["run_id", "topic", key_col, "producer", "partition"]
    return inversions(produced.join(first_read, ["run_id", "topic", "value"]), by, list(ORDER), "offset",
                      carry=("value",)).select(
        "run_id", "topic", key_col, "producer", "partition", "prev_value", "prev_offset", "value", "offset")


def summary(events: DataFrame) -> dict[str, int]:
    """Number of rows each check reports, as ``{check name: count}`` in ``CHECKS`` order.

    One Spark job (the counts are unioned), a few integers back to the driver.
    ``nonmonotonic_polls`` is counted with its default (across generations).

    Returns:
        ``{"lost_writes": n, "unseen": n, "duplicates": n, "redeliveries": n,
        "processed_more_than_once": n, "nonmonotonic_polls": n, "order_inversions": n}``.
    """
    from pyspark.sql import functions as F

    counts = [
        check(events).agg(F.count(F.lit(1)).alias("n")).select(F.lit(name).alias("check"), "n")
        for name, check in CHECKS.items()
    ]
    rows = reduce(lambda a, b: a.unionByName(b), counts).collect()
    found = {row["check"]: int(row["n"]) for row in rows}
    return {name: found.get(name, 0) for name in CHECKS}


#: Every check, by name, in report order (``summary`` runs them all).
CHECKS: dict[str, Callable[[DataFrame], DataFrame]] = {
    "lost_writes": lost_writes,
    "unseen": unseen,
    "duplicates": duplicates,
    "redeliveries": redeliveries,
    "processed_more_than_once": processed_more_than_once,
    "nonmonotonic_polls": nonmonotonic_polls,
    "order_inversions": order_inversions,
}
