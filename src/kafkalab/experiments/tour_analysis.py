"""PySpark side of notebook 00 (``kafkalab.experiments.tour``): the flights written by the
Java producer of Spark's Kafka connector, and where each key landed.

Sources: Spark "Structured Streaming + Kafka Integration Guide" (batch queries and writes);
Kafka ``BuiltInPartitioner`` (murmur2 of the key) as the connector's kafka-clients uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import spark as kspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_key_partitions(spark: "SparkSession", topic: str) -> dict[str, set[int]]:
    """Key -> partitions it is in, aggregated by Spark (one row per key reaches the driver)."""
    from pyspark.sql import functions as F

    rows = (kspark.read_topic(spark, topic)
            .groupBy(F.col("key").cast("string").alias("key"))
            .agg(F.collect_set("partition").alias("partitions"))
            .collect())
    return {r["key"]: set(r["partitions"]) for r in rows}
