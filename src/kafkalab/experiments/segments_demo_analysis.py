"""PySpark analysis of notebook 06 (``kafkalab.experiments.segments_demo``): what a compacted
topic holds per key, against its uncompacted control topic.

``spark_key_table`` is the one Spark job (it is also the notebook's warm-up, on the control
topic, given to ``kafkalab.spark.session_in_background``); ``key_stats`` and
``latest_values`` read its small per-key result in pandas.

Sources: Kafka documentation, Design > Log Compaction; Spark "Structured Streaming + Kafka
Integration Guide" (batch queries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession


def spark_key_table(spark: "SparkSession", topics: Sequence[str]) -> "pd.DataFrame":
    """One row per (topic, key) of ``topics``, computed by Spark in one job over all records:
    ``records`` (how many records the key has), ``tombstones`` (of them with a null value),
    ``latest`` (the value of the key's record with the highest offset, None for a tombstone).
    Only these per-key rows reach the driver."""
    from pyspark.sql import functions as F

    from .. import spark as kspark

    df = kspark.read_topic(spark, ",".join(topics))
    return (df.groupBy("topic", F.col("key").cast("string").alias("key"))
            .agg(F.count("*").alias("records"),
                 F.sum(F.col("value").isNull().cast("int")).alias("tombstones"),
                 F.max_by(F.col("value").cast("string"), "offset").alias("latest"))
            .toPandas())


def key_stats(table: "pd.DataFrame") -> "pd.DataFrame":
    """Per topic (columns) from ``spark_key_table``: ``records``, ``keys``, ``tombstones`` and
    ``live keys`` (keys whose latest record has a value)."""
    import pandas as pd

    g = table.groupby("topic")
    return pd.DataFrame({
        "records": g["records"].sum(),
        "keys": g["key"].count(),
        "tombstones": g["tombstones"].sum(),
        "live keys": g["latest"].count(),
    }).T.astype(int)


def latest_values(table: "pd.DataFrame", topic: str) -> dict[str, str]:
    """Key -> latest value of ``topic``'s live keys, from ``spark_key_table``."""
    t = table[(table["topic"] == topic) & table["latest"].notna()]
    return dict(zip(t["key"], t["latest"]))
