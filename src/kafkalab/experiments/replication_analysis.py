"""Notebook 08's analysis: every write of a replication round classified, in Python and in PySpark.

A record (one ``value``) is *acknowledged* when its delivery report carried no error, and
*present* when the read after recovery (offset 0 to the high watermark, every replica back
in the ISR) found it. The four classes:

======================  =====================================================================
``acked_present``       acknowledged and in the log: the promise kept
``acked_lost``          acknowledged and missing: Jepsen's *lost write*
``not_acked_present``   the producer was told it failed (or heard nothing) but it is in the
                        log (a failed delivery report means "not known to be written")
``not_acked_absent``    refused or failed, and not in the log: honest
======================  =====================================================================

``classify_records`` works on ``kafkalab.ledger.Event`` lists (used by the experiment and the
CLI); ``classify_frame`` does the same with Spark on the ledger file joined with the topics
read by the Spark Kafka source (``kafkalab.spark.read_topic``), so the two can be compared.
With acks=0 the delivery report has no offset (librdkafka reports success once the request
is written to the socket), so records are matched by value, never by offset.

Sources: Jepsen, "Kafka" (Call me maybe, 2013) and jepsen-io/jepsen ``tests/kafka.clj``
(lost write); Kafka documentation 4.3, Design > Replication.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from ..ledger import Event

CLASSES = ("acked_present", "acked_lost", "not_acked_present", "not_acked_absent")


@dataclass(frozen=True)
class Classification:
    """Counts for one partition (or any set of records). ``produced``, ``acked`` and the four
    classes count the fault's records (phase ``during``); ``before_*`` the warm-up's."""

    produced: int = 0
    acked: int = 0
    acked_present: int = 0
    acked_lost: int = 0
    not_acked_present: int = 0
    not_acked_absent: int = 0
    before_produced: int = 0
    before_lost: int = 0

    @property
    def not_acked(self) -> int:
        return self.produced - self.acked

    def to_json(self) -> dict:
        return asdict(self)


def record_classes(events: Iterable["Event"]) -> dict[str, tuple[str, str]]:
    """value -> (phase, class) for every produced value of ``events`` (one ledger's lines).

    A value is acknowledged if any of its ``acked`` events has no error; present if any
    ``consumed`` event carries it.
    """
    phase: dict[str, str] = {}
    acked: set[str] = set()
    present: set[str] = set()
    for e in events:
        if e.value is None:
            continue
        if e.kind == "produced":
            phase[e.value] = e.key or "during"
        elif e.kind == "acked" and e.error is None:
            acked.add(e.value)
        elif e.kind == "consumed":
            present.add(e.value)
    out = {}
    for v, ph in phase.items():
        cls = ("acked_" if v in acked else "not_acked_") + ("present" if v in present else ("lost" if v in acked else "absent"))
        out[v] = (ph, cls)
    return out


def classify_records(events: Iterable["Event"]) -> Classification:
    """Counts of ``record_classes`` (see the module docstring)."""
    classes = record_classes(events)
    during = [c for ph, c in classes.values() if ph == "during"]
    before = [c for ph, c in classes.values() if ph == "before"]
    return Classification(
        produced=len(during),
        acked=sum(c.startswith("acked_") for c in during),
        acked_present=during.count("acked_present"),
        acked_lost=during.count("acked_lost"),
        not_acked_present=during.count("not_acked_present"),
        not_acked_absent=during.count("not_acked_absent"),
        before_produced=len(before),
        before_lost=sum(c in ("acked_lost", "not_acked_absent") for c in before),
    )


def unavailable_seconds(samples: list[tuple[float, Mapping[tuple[str, int], tuple[int, list[int]]]]], killed: int,
                        back_after_s: float | None) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], int]]:
    """Seconds from the kill until each partition first had a live leader, and who that was.

    Args:
        samples: (seconds since the kill, {(topic, partition): (leader, isr)}) in time order
            (``replication.AvailabilityMonitor``).
        killed: the broker that was killed: as a leader it is dead until ``back_after_s``.
        back_after_s: seconds after the kill when it was registered again (None: never).

    Returns:
        ({partition: seconds}, {partition: first live leader}). A partition never seen with a
        live leader gets the last sample's time and leader -1 (a lower bound).
    """
    first: dict[tuple[str, int], float] = {}
    who: dict[tuple[str, int], int] = {}
    seen: set = set()
    last_t = 0.0
    for t, states in samples:
        last_t = t
        for tp, (leader, _isr) in states.items():
            seen.add(tp)
            if tp in first:
                continue
            alive = leader >= 0 and (leader != killed or (back_after_s is not None and t >= back_after_s))
            if alive:
                first[tp], who[tp] = t, leader
    for tp in seen - set(first):
        first[tp], who[tp] = last_t, -1
    return first, who


# ----------------------------------------------------------------------------- Spark


def classify_frame(spark: "SparkSession", ledger_paths: list[str], topics: list[str],
                   bootstrap_servers: str | None = None) -> "DataFrame":
    """One row per produced record with its class, computed by Spark.

    The ledgers' ``produced`` and ``acked`` lines (``kafkalab.ledger.load``) are joined by
    value with what the Spark Kafka source reads from ``topics`` now (``read_topic``,
    earliest to latest). Columns: ``topic``, ``partition``, ``phase``, ``value``, ``acked``
    (bool), ``present`` (bool), ``class`` (one of ``CLASSES``).

    Raises:
        pyspark.errors.AnalysisException: a ledger path matches no file. The topics must
        still exist (kept with ``keep_topics=True``).
    """
    from pyspark.sql import functions as F

    from .. import ledger as kledger
    from .. import spark as kspark

    events = kledger.load(spark, ledger_paths)
    produced = (events.where(F.col("kind") == "produced")
                .select("topic", "partition", F.col("key").alias("phase"), "value").distinct())
    acked = (events.where((F.col("kind") == "acked") & F.col("error").isNull())
             .select("topic", "value").distinct().withColumn("acked", F.lit(True)))
    # one Kafka source for all topics (``subscribe`` takes a comma-separated list)
    in_log = (kspark.read_topic(spark, ",".join(topics), bootstrap_servers)
              .select("topic", F.col("value").cast("string").alias("value")).distinct()
              .withColumn("present", F.lit(True)))
    joined = (produced.join(acked, ["topic", "value"], "left").join(in_log, ["topic", "value"], "left")
              .fillna({"acked": False, "present": False}))
    cls = (F.when(F.col("acked") & F.col("present"), "acked_present")
           .when(F.col("acked"), "acked_lost")
           .when(F.col("present"), "not_acked_present")
           .otherwise("not_acked_absent"))
    return joined.withColumn("class", cls)


def class_counts(frame: "DataFrame", topic_setting: Mapping[str, str], phase: str = "during") -> "pd.DataFrame":
    """Counts per setting and class of ``classify_frame`` rows of one phase, as a pandas table
    (index: setting label, columns: ``CLASSES``, missing classes 0)."""
    from pyspark.sql import functions as F

    rows = (frame.where(F.col("phase") == phase).groupBy("topic", "class").count().collect())
    import pandas as pd

    table = pd.DataFrame(0, index=list(dict.fromkeys(topic_setting.values())), columns=list(CLASSES))
    for r in rows:
        table.loc[topic_setting[r["topic"]], r["class"]] += r["count"]
    return table


def verdict_table(rounds: Iterable[object]) -> "pd.DataFrame":
    """One row per (scenario, setting) of ``replication.RoundResult`` objects: acked,
    lost_acked, produce_errors, not_acked_present, before_lost, unavailable_s (longest over
    the repeats), error codes and who was elected."""
    import pandas as pd

    rows = []
    for r in rounds:
        for label, s in r.by_setting().items():
            rows.append({"scenario": r.scenario, **s.to_json()})
    return pd.DataFrame(rows).set_index(["scenario", "setting"])
