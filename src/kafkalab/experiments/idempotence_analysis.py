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
    write. Lazy DataFrame, one row per (topic, value): ``kafkalab.audit.log_against_acks`` of
    the topics and the ledgers.

    Source: Spark "Structured Streaming + Kafka Integration Guide" (batch query, ``subscribe``
    with a comma-separated list); the ledger format of ``kafkalab.ledger``.
    """
    from pyspark.sql import functions as F

    from .. import audit
    from .. import ledger as kledger
    from .. import spark as kspark

    topics = list(topics)
    log = (kspark.read_topic(spark, ",".join(topics))
           .select("topic", F.col("value").cast("string").alias("value"), "partition", "offset"))
    events = kledger.load(spark, list(ledger_globs)).where(F.col("topic").isin(topics))
    return audit.log_against_acks(log, events)


def warm_up(spark: "SparkSession") -> list[dict]:
    """``kafkalab.audit.log_against_acks`` (the query of ``spark_copies``) on a planted log
    and ledger, so the first real query is warm: the warm-up notebook 04 gives
    ``kafkalab.spark.session_in_background``.

    Returns:
        Its rows, as dicts: value ``a`` acked once and held twice (a duplicate), ``b`` acked
        once and held once.
    """
    from .. import audit
    from ..ledger import Event, events_frame

    log = spark.createDataFrame([("t", "a", 0, 0), ("t", "a", 0, 1), ("t", "b", 0, 2)],
                                "topic string, value string, partition int, offset long")
    events = events_frame(spark, [Event(run_id="warm-up", kind="acked", ts_ms=0, seq=i, topic="t", partition=0,
                                        offset=o, value=v) for i, (v, o) in enumerate((("a", 0), ("b", 2)))])
    return [r.asDict(recursive=True) for r in audit.log_against_acks(log, events).orderBy("value").collect()]
