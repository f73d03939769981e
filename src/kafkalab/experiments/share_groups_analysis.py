"""Notebook 09's audit: a share group run's ledgers counted in Spark.

Each record (value) ends in one state, decided from the ledgers alone:

============  =================================================================================
accepted      acknowledged ACCEPT (without a commit error) at least once
rejected      acknowledged REJECT, never accepted (a poison record: KIP-932 never delivers it
              again)
archived      neither, and delivered ``share.delivery.count.limit`` times: after that delivery
              the broker archives it (KIP-932, "delivery count")
lost          none of these: produced, acknowledged by the brokers, and never settled
============  =================================================================================

so ``lost = produced - accepted - rejected - archived``. Processing duplicates and order
inversions come from the shared checks in ``kafkalab.audit`` (``processed_more_than_once``,
``inversions``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import audit, ledger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The states of ``record_states``, in report order.
STATES = ("accepted", "rejected", "archived", "lost")


def record_states(events: DataFrame, limit: int) -> DataFrame:
    """One row per produced record: ``run_id``, ``topic``, ``value``, ``deliveries``,
    ``max_delivery_count`` (0 if never delivered), ``state`` (one of ``STATES``).

    Args:
        events: ledger DataFrame (``kafkalab.ledger.ledger_schema()``): the producer's
            ``acked`` events and the share consumers' ``consumed`` and ``acknowledged`` ones.
        limit: the group's ``share.delivery.count.limit``.
    """
    from pyspark.sql import functions as F

    produced = audit.acks(events, ("run_id", "topic", "value")).select("run_id", "topic", "value")
    consumed = (audit.of_kind(events, "consumed").where(F.col("error").isNull() & F.col("value").isNotNull())
                .groupBy("run_id", "topic", "value")
                .agg(F.count(F.lit(1)).alias("deliveries"), F.max("delivery_count").alias("max_delivery_count")))
    acked = (audit.of_kind(events, "acknowledged").where(F.col("error").isNull())
             .groupBy("run_id", "topic", "value")
             .agg(F.max((F.col("ack") == "ACCEPT").cast("int")).alias("accepted"),
                  F.max((F.col("ack") == "REJECT").cast("int")).alias("rejected")))
    joined = (produced.join(consumed, ["run_id", "topic", "value"], "left")
              .join(acked, ["run_id", "topic", "value"], "left")
              .fillna({"deliveries": 0, "max_delivery_count": 0, "accepted": 0, "rejected": 0}))
    state = (F.when(F.col("accepted") == 1, "accepted").when(F.col("rejected") == 1, "rejected")
             .when(F.col("max_delivery_count") >= limit, "archived").otherwise("lost"))
    return joined.select("run_id", "topic", "value", "deliveries", "max_delivery_count", state.alias("state"))


def returned_after(events: DataFrame, clients: list[str]) -> dict[str, int | None]:
    """For each consumer in ``clients`` (crashed or frozen ones): ms from its ``consumed``
    event of a record it never acknowledged to the next delivery of that record (same
    partition and offset, a higher delivery count) to another consumer; the earliest such
    record. None: it held no such record, or the record never came back.
    """
    from pyspark.sql import functions as F

    consumed = audit.of_kind(events, "consumed").where(F.col("error").isNull() & F.col("offset").isNotNull())
    acked = audit.of_kind(events, "acknowledged").select("client_id", "topic", "partition", "offset", "delivery_count")
    key = ["client_id", "topic", "partition", "offset", "delivery_count"]
    held = (consumed.where(F.col("client_id").isin(clients)).join(acked, key, "left_anti")
            .select("client_id", "topic", "partition", "offset", "delivery_count", F.col("ts_ms").alias("held_ts")))
    later = consumed.select(F.col("client_id").alias("next_client"), "topic", "partition", "offset",
                            F.col("delivery_count").alias("next_count"), F.col("ts_ms").alias("next_ts"))
    gaps = (held.join(later, ["topic", "partition", "offset"])
            .where((F.col("next_count") > F.col("delivery_count")) & (F.col("next_client") != F.col("client_id")))
            .groupBy("client_id", "topic", "partition", "offset", "held_ts").agg(F.min("next_ts").alias("next_ts"))
            .groupBy("client_id").agg(F.min(F.col("next_ts") - F.col("held_ts")).alias("ms")))
    found = {r["client_id"]: int(r["ms"]) for r in gaps.collect()}
    return {c: found.get(c) for c in clients}


def account_events(events: DataFrame, limit: int, watched: list[str] | None = None) -> dict:
    """Every count of ``share_groups.ShareGroupResult`` from one run's ledger DataFrame.

    Args:
        events: ledger DataFrame of one run.
        limit: the group's ``share.delivery.count.limit``.
        watched: consumers whose held records' return time to measure (``returned_after``).

    Returns:
        ``{"produced", "consumers_with_records", "accepted_unique", "rejected", "archived",
        "lost", "deliveries", "redelivered", "max_delivery_count", "deliveries_past_limit",
        "duplicates_processed", "per_partition_inversions"}`` (ints), ``"records_per_consumer"``
        (client id -> deliveries), ``"returned_after_ms"`` (``returned_after``),
        ``"held_processed"`` (``held_processed``).
    """
    from pyspark.sql import functions as F

    states = {r["state"]: int(r["n"]) for r in
              record_states(events, limit).groupBy("state").agg(F.count(F.lit(1)).alias("n")).collect()}
    consumed = audit.of_kind(events, "consumed").where(F.col("error").isNull() & F.col("value").isNotNull())
    row = consumed.agg(
        F.count(F.lit(1)).alias("deliveries"),
        F.sum((F.col("delivery_count") > 1).cast("int")).alias("redelivered"),
        F.max("delivery_count").alias("max_delivery_count"),
        F.sum((F.col("delivery_count") > limit).cast("int")).alias("past_limit"),
        F.countDistinct("client_id").alias("consumers"),
    ).collect()[0]
    per_consumer = {r["client_id"]: int(r["n"]) for r in
                    consumed.groupBy("client_id").agg(F.count(F.lit(1)).alias("n")).orderBy("client_id").collect()}
    processed = audit.of_kind(events, "processed")
    inversions = audit.inversions(processed, ["run_id", "topic", "partition"], ["ts_ms", "client_id", "seq"], "offset")
    produced = sum(states.values())
    accepted, rejected, archived = (states.get(s, 0) for s in ("accepted", "rejected", "archived"))
    return {
        "produced": produced,
        "consumers_with_records": int(row["consumers"] or 0),
        "accepted_unique": accepted,
        "rejected": rejected,
        "archived": archived,
        "lost": produced - accepted - rejected - archived,
        "deliveries": int(row["deliveries"] or 0),
        "redelivered": int(row["redelivered"] or 0),
        "max_delivery_count": int(row["max_delivery_count"] or 0),
        "deliveries_past_limit": int(row["past_limit"] or 0),
        "duplicates_processed": audit.processed_more_than_once(events).count(),
        "per_partition_inversions": inversions.count(),
        "records_per_consumer": per_consumer,
        "returned_after_ms": returned_after(events, sorted(watched or [])) if watched else {},
        "held_processed": held_processed(events, watched or []),
    }


def held_processed(events: DataFrame, clients: list[str]) -> int:
    """Records that a consumer in ``clients`` processed and never acknowledged (it crashed or
    froze first), counted once each: at-least-once processes each of them again, so in a run
    without other failures ``processed_more_than_once`` equals this number."""
    from pyspark.sql import functions as F

    if not clients:
        return 0
    key = ["client_id", "topic", "partition", "offset", "delivery_count"]
    acked = audit.of_kind(events, "acknowledged").select(*key)
    return (audit.of_kind(events, "processed").where(F.col("client_id").isin(clients))
            .join(acked, key, "left_anti").select("topic", "value").distinct().count())


def account(folder: str | Path, limit: int, roles: dict[str, str], spark: SparkSession | None = None) -> dict:
    """``account_events`` over the ledgers in ``folder`` (``*.jsonl``), watching the
    consumers whose role (``share_groups.ShareRun.role``) is ``crash`` or ``freeze``. A torn
    last line of a killed writer cannot occur (workers write through and flush before a
    crash) and fails the read."""
    events = load_run(folder, spark)
    return account_events(events, limit, [c for c, r in roles.items() if r != "run"])


def deliveries(events: DataFrame) -> DataFrame:
    """One row per delivery, in time order: ``ms`` (since the run's first delivery),
    ``client_id``, ``partition``, ``offset``, ``value``, ``delivery_count``, ``ack`` (how that
    consumer acknowledged that delivery: ACCEPT, RELEASE, REJECT; None: never, its holder
    crashed or froze)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    consumed = (audit.of_kind(events, "consumed").where(F.col("error").isNull() & F.col("offset").isNotNull())
                .drop("ack"))
    acked = (audit.of_kind(events, "acknowledged").where(F.col("error").isNull())
             .select("client_id", "topic", "partition", "offset", "delivery_count", "ack"))
    first = F.min("ts_ms").over(Window.partitionBy())
    return (consumed.join(acked, ["client_id", "topic", "partition", "offset", "delivery_count"], "left")
            .select((F.col("ts_ms") - first).alias("ms"), "client_id", "partition", "offset", "value",
                    "delivery_count", "ack")
            .orderBy("ms", "client_id"))


def load_run(folder: str | Path, spark: SparkSession | None = None) -> DataFrame:
    """A run's ledgers (``ShareGroupResult.ledger_dir``) as a ledger DataFrame."""
    from .. import spark as spark_mod

    return ledger.load(spark or spark_mod.session(), str(Path(folder) / "*.jsonl"))


def dlq_audit(events: DataFrame, limit: int, dlq_records: list[dict]):
    """The DLQ topic's records (``ShareGroupResult.dlq_records``) beside what the ledgers say of
    the records they name (KIP-1191, Kafka 4.4.0): a pandas DataFrame, one row per DLQ record,
    by DLQ offset, with ``dlq_offset``; the ``__dlq.errors.*`` headers as ``group``, ``topic``,
    ``partition``, ``offset`` (int), ``delivery_count`` (int), ``message``; the DLQ record's
    ``key`` and ``value`` (None unless ``errors.deadletterqueue.copy.record.enable``); and,
    matched on (topic, partition, offset) with the producer's ledger: ``produced_key``,
    ``produced_value``, ``state`` (``record_states``), ``deliveries`` and
    ``max_delivery_count`` (NaN where no produced record matches)."""
    import pandas as pd
    from pyspark.sql import functions as F

    rows = [{"dlq_offset": r["offset"], **{h.removeprefix("__dlq.errors.").replace(".", "_"): r["headers"].get(h)
                                          for h in ("__dlq.errors.group", "__dlq.errors.topic",
                                                    "__dlq.errors.partition", "__dlq.errors.offset",
                                                    "__dlq.errors.delivery.count", "__dlq.errors.message")},
             "key": r["key"], "value": r["value"]} for r in dlq_records]
    dlq = pd.DataFrame(rows, columns=["dlq_offset", "group", "topic", "partition", "offset", "delivery_count",
                                      "message", "key", "value"])
    for col in ("partition", "offset", "delivery_count"):
        dlq[col] = dlq[col].astype(int)
    produced = (audit.of_kind(events, "acked").select("topic", "partition", "offset", F.col("key").alias("produced_key"),
                                                       F.col("value").alias("produced_value")))
    states = record_states(events, limit).select(F.col("topic"), F.col("value").alias("produced_value"), "state",
                                                 "deliveries", "max_delivery_count")
    known = produced.join(states, ["topic", "produced_value"], "left").toPandas()
    return dlq.merge(known, on=["topic", "partition", "offset"], how="left").sort_values("dlq_offset").reset_index(drop=True)
