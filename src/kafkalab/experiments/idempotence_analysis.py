"""PySpark analysis of notebook 04 (``kafkalab.experiments.idempotence``): the values of the
lost-ack runs as the log holds them, against what each producer was told.

Source: Spark "Structured Streaming + Kafka Integration Guide" (batch queries); the ledger
format of ``kafkalab.ledger``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def spark_copies(spark: "SparkSession", topics: Iterable[str], ledger_globs: Iterable[str]) -> "DataFrame":
    """Per topic and value (the topics read by Spark's Kafka connector): ``copies`` in the log
    and their ``offsets``, joined with the producers' ledgers: ``acks`` (successful delivery
    reports) and ``acked_offsets`` (what the producer was told). A value acked once but held
    twice is the duplicate of a lost ack; a value with copies 0 and acks >= 1 would be a lost
    write. Lazy DataFrame, one row per (topic, value).

    Source: Spark "Structured Streaming + Kafka Integration Guide" (batch query, ``subscribe``
    with a comma-separated list); the ledger format of ``kafkalab.ledger``.
    """
    from pyspark.sql import functions as F

    from .. import ledger as kledger
    from .. import spark as kspark

    topics = list(topics)
    log = (kspark.read_topic(spark, ",".join(topics))
           .select("topic", F.col("value").cast("string").alias("value"), "partition", "offset")
           .groupBy("topic", "value")
           .agg(F.count(F.lit(1)).alias("copies"),
                F.array_sort(F.collect_list(F.struct("partition", "offset"))).alias("offsets")))
    acks = (kledger.load(spark, list(ledger_globs))
            .where((F.col("kind") == "acked") & F.col("error").isNull() & F.col("topic").isin(topics))
            .groupBy("topic", "value")
            .agg(F.count(F.lit(1)).alias("acks"), F.array_sort(F.collect_list("offset")).alias("acked_offsets")))
    return log.join(acks, ["topic", "value"], "full_outer").fillna({"copies": 0, "acks": 0})


def warm_up(spark: "SparkSession") -> None:
    """One small aggregation and full outer join on generated rows (the shapes of
    ``spark_copies``), so the first real query is warm: the warm-up notebook 04 gives
    ``kafkalab.spark.session_in_background``."""
    from pyspark.sql import functions as F

    rows = spark.range(100).select((F.col("id") % 7).alias("k"), F.col("id").cast("string").alias("v"))
    per_k = rows.groupBy("k").agg(F.array_sort(F.collect_list(F.struct("k", "v"))).alias("l"))
    rows.groupBy("k").agg(F.count("v").alias("n")).join(per_k, "k", "full_outer").fillna({"n": 0}).collect()
