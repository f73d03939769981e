"""PySpark analysis of rebalance runs (``kafkalab.experiments.rebalance``): who owned which
partition when, how long partitions went unowned, what each rebalance revoked.

Inputs:

- the consumers' ledgers (``kafkalab.ledger.load``, a lazy DataFrame), of which only
  ``assigned`` and ``revoked`` events are used: a consumer's rebalance callbacks, per
  partition (``on_lost`` is recorded as ``revoked`` too);
- the experiment's actions (``start``, ``stop``, ``exited``, ``kill``) and the windows
  (settled group to settled group around each scenario), as small DataFrames;
- the generations (classic) or group epochs (KIP-848) the coordinator wrote: a few dozen
  rows per run, sorted into windows in plain Python (``rebalances_of``).

Definitions (times in ms, since the epoch):

*ownership interval*
    a consumer process's hold on a partition, as the process itself saw it: from an
    ``assigned`` event to its next ``revoked`` event, or to the process's death (SIGKILL)
    or exit, whichever is first; open if none.
*gap*
    a stretch of a window in which no live process held the partition: nobody could have
    consumed it. ``max_pause_s`` is the longest gap of any partition; ``partition_pause_s``
    the sum of all gaps over all partitions (partition-seconds not consumed).
*overlap*
    time in which two live processes both held the partition (a member that was removed but
    does not know it yet: a zombie), summed over partitions.
*rebalance*
    a new generation (group epoch) written inside the window, above the one current at its
    start.
*revoked*
    partitions revoked in the window, summed over all members (a member that stops revokes
    its own partitions too); *lost*: partitions a SIGKILLed process held when it died.
*needless revocation*
    a revoked partition whose next owner is the member that gave it up: it was handed back.
*moved*
    ownership handovers to a different process.

Each revoked or lost partition is attributed to the first rebalance written at or after it
(eager members revoke before they rejoin, so this is the rebalance they revoked for).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from typing import Any

    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    #: A ``rebalance.RunRecord``, read here by attribute: the run module imports this one,
    #: never the reverse (the arrow of a family points run -> analysis).
    RunRecord = Any

#: The protocols, in the order tables show them (``rebalance.PROTOCOLS`` has one entry each).
PROTOCOL_NAMES: tuple[str, ...] = ("eager", "cooperative", "static", "consumer")

#: The scenarios a group goes through (``rebalance`` runs them; see its docstring), in the
#: order tables show them.
SCENARIOS: tuple[str, ...] = ("rolling-restart", "scale-out", "scale-in", "crash", "add-partitions", "slow-consumer")

#: Larger than any timestamp: stands for "never" in ``least`` (ms).
NEVER_MS = 1 << 62

# ----------------------------------------------------------------------------- input frames


def membership(ledger: DataFrame) -> DataFrame:
    """``assigned``/``revoked`` rows: run_id, client_id, topic, partition, ts_ms, seq, kind."""
    from pyspark.sql import functions as F

    return (ledger.where(F.col("kind").isin("assigned", "revoked"))
            .select("run_id", "client_id", "topic", "partition", "ts_ms", "seq", "kind"))


def actions_frame(spark: SparkSession, records: Sequence[RunRecord]) -> DataFrame:
    """The experiment's actions: run_id, ts_ms, action, client_id."""
    rows = [(a["run_id"], int(a["ts_ms"]), a["action"], a.get("client_id")) for r in records for a in r.actions]
    return spark.createDataFrame(rows, "run_id string, ts_ms long, action string, client_id string")


def windows_frame(spark: SparkSession, records: Sequence[RunRecord]) -> DataFrame:
    """One row per window: run_id, index, scenario, protocol, start_ms, end_ms, partitions."""
    rows = [(r.run_id, w.index, w.scenario, r.protocol.name, int(w.start_ms), int(w.end_ms), int(w.partitions))
            for r in records for w in r.windows]
    return spark.createDataFrame(rows, "run_id string, index int, scenario string, protocol string, start_ms long, "
                                       "end_ms long, partitions int")


# ----------------------------------------------------------------------------- intervals and gaps


def ownership_intervals(events: DataFrame, actions: DataFrame) -> DataFrame:
    """Ownership intervals (see the module docstring) from ``membership`` rows and actions.

    Returns:
        run_id, client_id, topic, partition, start_ms, end_ms (null: still open),
        ended_by (``revoked``, ``killed``, ``exited`` or ``open``).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("run_id", "client_id", "topic", "partition").orderBy("ts_ms", "seq")
    ev = events.withColumn("next_kind", F.lead("kind").over(w)).withColumn("next_ts", F.lead("ts_ms").over(w))
    ends = (actions.groupBy("run_id", "client_id")
            .agg(F.min(F.when(F.col("action") == "kill", F.col("ts_ms"))).alias("kill_ms"),
                 F.min(F.when(F.col("action") == "exited", F.col("ts_ms"))).alias("exited_ms")))
    never = F.lit(NEVER_MS)
    rev = F.coalesce(F.col("next_ts"), never)
    kill = F.coalesce(F.col("kill_ms"), never)
    ex = F.coalesce(F.col("exited_ms"), never)
    end = F.least(rev, kill, ex)
    return (ev.where(F.col("kind") == "assigned").join(ends, ["run_id", "client_id"], "left")
            .select("run_id", "client_id", "topic", "partition", F.col("ts_ms").alias("start_ms"),
                    F.when(end < never, end).alias("end_ms"),
                    F.when(end == never, "open").when(end == rev, F.when(F.col("next_kind") == "revoked", "revoked")
                                                                   .otherwise("reassigned"))
                     .when(end == kill, "killed").otherwise("exited").alias("ended_by")))


def clipped(intervals: DataFrame, windows: DataFrame) -> DataFrame:
    """Intervals cut to each window they overlap, for the partitions that existed at the
    window's start: run_id, index, client_id, partition, start_ms, end_ms (both inside the
    window), ended_by, w_start, w_end."""
    from pyspark.sql import functions as F

    i = intervals.alias("i")
    w = windows.select("run_id", "index", F.col("start_ms").alias("w_start"), F.col("end_ms").alias("w_end"),
                       "partitions").alias("w")
    end = F.coalesce(F.col("i.end_ms"), F.lit(NEVER_MS))
    return (i.join(F.broadcast(w), (F.col("i.run_id") == F.col("w.run_id")) & (F.col("i.start_ms") < F.col("w_end"))
                   & (end > F.col("w_start")) & (F.col("i.partition") < F.col("partitions")))
            .select(F.col("i.run_id").alias("run_id"), F.col("w.index").alias("index"), "i.client_id", "i.partition",
                    F.greatest(F.col("i.start_ms"), F.col("w_start")).alias("start_ms"),
                    F.least(end, F.col("w_end")).alias("end_ms"), "i.ended_by", "w_start", "w_end"))


def partition_gaps(intervals: DataFrame, windows: DataFrame) -> DataFrame:
    """Every gap (no live owner) and overlap (two live owners) of every partition that
    existed at the start of each window.

    One pass: the clipped intervals of each (window, partition) plus two empty *sentinel*
    intervals at the window's start and end, sorted by start; a row starting after
    everything before it has ended opens a gap, a row starting before that overlaps.

    Returns:
        run_id, index, partition, kind (``gap`` or ``overlap``), from_ms, to_ms, ms (> 0).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    real = clipped(intervals, windows).select("run_id", "index", "partition", "start_ms", "end_ms",
                                              F.lit(False).alias("sentinel"))
    edges = (windows.select("run_id", "index", F.explode(F.array("start_ms", "end_ms")).alias("at"),
                            F.col("partitions"))
             .select("run_id", "index", F.explode(F.sequence(F.lit(0), F.col("partitions") - 1)).alias("partition"), "at")
             .select("run_id", "index", "partition", F.col("at").alias("start_ms"), F.col("at").alias("end_ms"),
                     F.lit(True).alias("sentinel")))
    rows = real.unionByName(edges)
    before = (Window.partitionBy("run_id", "index", "partition").orderBy("start_ms", "end_ms")
              .rowsBetween(Window.unboundedPreceding, -1))
    rows = rows.withColumn("covered_to", F.max("end_ms").over(before))
    gap = rows.where(F.col("start_ms") > F.col("covered_to")).select(
        "run_id", "index", "partition", F.lit("gap").alias("kind"), F.col("covered_to").alias("from_ms"),
        F.col("start_ms").alias("to_ms"))
    overlap = rows.where(~F.col("sentinel") & (F.col("start_ms") < F.col("covered_to"))).select(
        "run_id", "index", "partition", F.lit("overlap").alias("kind"), F.col("start_ms").alias("from_ms"),
        F.least(F.col("end_ms"), F.col("covered_to")).alias("to_ms"))
    return gap.unionByName(overlap).withColumn("ms", F.col("to_ms") - F.col("from_ms")).where(F.col("ms") > 0)


def successions(intervals: DataFrame) -> DataFrame:
    """Ownership intervals with the owner before and after each, per partition in order of
    start: adds prev_owner and next_owner (null for the first and the last)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("run_id", "topic", "partition").orderBy("start_ms", "client_id")
    return (intervals.withColumn("prev_owner", F.lag("client_id").over(w))
            .withColumn("next_owner", F.lead("client_id").over(w)))


def window_counts(intervals: DataFrame, windows: DataFrame) -> DataFrame:
    """Per window: revoked, needless, unreassigned, lost and moved (see the module
    docstring). An interval's end (revocation, death) counts in the window whose
    (start_ms, end_ms] holds it; a handover counts in the window that holds the new
    interval's start.

    Returns:
        run_id, index, revoked, needless, unreassigned, lost, moved.
    """
    from pyspark.sql import functions as F

    s = successions(intervals)
    w = windows.select("run_id", "index", F.col("start_ms").alias("ws"), F.col("end_ms").alias("we"))
    j = s.join(F.broadcast(w), "run_id")
    end_in = F.col("end_ms").isNotNull() & (F.col("end_ms") > F.col("ws")) & (F.col("end_ms") <= F.col("we"))
    start_in = (F.col("start_ms") > F.col("ws")) & (F.col("start_ms") <= F.col("we"))
    revoked = end_in & (F.col("ended_by") == "revoked")

    def count(cond):
        return F.sum(F.when(cond, 1).otherwise(0))

    return j.groupBy("run_id", "index").agg(
        count(revoked).alias("revoked"),
        count(revoked & (F.col("next_owner") == F.col("client_id"))).alias("needless"),
        count(revoked & F.col("next_owner").isNull()).alias("unreassigned"),
        count(end_in & (F.col("ended_by") == "killed")).alias("lost"),
        count(start_in & F.col("prev_owner").isNotNull() & (F.col("prev_owner") != F.col("client_id"))).alias("moved"))


def rebalances_of(record: RunRecord) -> list[dict]:
    """The rebalances of each window of a run, from the generations the coordinator wrote:
    ``{"run_id", "index", "generation", "ts_ms", "since_ms"}``. A generation counts in the
    window whose (start_ms, end_ms] holds the first time it was written, if it is above the
    last generation written at or before the window's start (a static member's replacement
    rewrites the current generation: no rebalance). ``since_ms``: the previous rebalance of
    the window, or its start.

    Plain Python: a few dozen rows of coordinator metadata; the ledger work is Spark's.
    """
    first: dict[int, int] = {}
    for g in record.generations:
        first[g["generation"]] = min(first.get(g["generation"], g["ts_ms"]), g["ts_ms"])
    out: list[dict] = []
    for w in record.windows:
        g0 = max((g["generation"] for g in record.generations if g["ts_ms"] <= w.start_ms), default=-1)
        since = w.start_ms
        for gen, ts in sorted(first.items(), key=lambda kv: kv[1]):
            if w.start_ms < ts <= w.end_ms and gen > g0:
                out.append({"run_id": record.run_id, "index": w.index, "generation": gen, "ts_ms": ts, "since_ms": since})
                since = ts
    return out


def rebalances_frame(spark: SparkSession, records: Sequence[RunRecord]) -> DataFrame:
    """``rebalances_of`` every run, with the window's partition count, as a DataFrame."""
    parts = {(r.run_id, w.index): w.partitions for r in records for w in r.windows}
    rows = [(x["run_id"], x["index"], x["generation"], x["ts_ms"], x["since_ms"], parts[(x["run_id"], x["index"])])
            for r in records for x in rebalances_of(r)]
    return spark.createDataFrame(rows, "run_id string, index int, generation int, ts_ms long, since_ms long, "
                                       "partitions int")


def per_rebalance(intervals: DataFrame, rebalances: DataFrame) -> DataFrame:
    """Every rebalance (``rebalances_frame``) with the number of distinct partitions revoked or
    lost (an ownership interval ended by ``revoked`` or ``killed``) in (since_ms, ts_ms]: after
    the previous rebalance of the same window, or after the window's start, and at or before it.

    Returns:
        run_id, index, generation, ts_ms, revoked_or_lost, partitions.
    """
    from pyspark.sql import functions as F

    given_up = intervals.where(F.col("ended_by").isin("revoked", "killed")).select(
        "run_id", F.col("partition").alias("p"), F.col("end_ms").alias("ev_ts"))
    r, g = rebalances.alias("r"), given_up.alias("g")
    return (r.join(g, (F.col("r.run_id") == F.col("g.run_id")) & (F.col("g.ev_ts") > F.col("r.since_ms"))
                   & (F.col("g.ev_ts") <= F.col("r.ts_ms")), "left")
            .groupBy("r.run_id", "r.index", "r.generation", "r.ts_ms", "r.partitions")
            .agg(F.countDistinct("g.p").alias("revoked_or_lost"))
            .select("run_id", "index", "generation", "ts_ms", "revoked_or_lost", "partitions"))


#: Spark settings for these analyses: the data are a few hundred rows, so planning and
#: code generation cost more than they save (measured on the 2-core lab machine: about 3x
#: faster end to end).
SMALL_DATA_CONF = {"spark.sql.shuffle.partitions": "1", "spark.sql.adaptive.enabled": "false",
                   "spark.sql.codegen.wholeStage": "false"}


class small_data_conf:
    """Context manager: apply ``SMALL_DATA_CONF`` to a session, restore the old values after."""

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> "small_data_conf":
        for k, v in SMALL_DATA_CONF.items():
            self.saved[k] = self.spark.conf.get(k, None)
            self.spark.conf.set(k, v)
        return self

    def __exit__(self, *exc) -> None:
        for k, v in self.saved.items():
            if v is None:
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, v)


# ----------------------------------------------------------------------------- results


@dataclass
class PhaseResult:
    """What one scenario (one window) of one run cost.

    The first four fields after the names are the CLI's headline: ``rebalances`` (new
    generations after the group first settled), ``revoked`` (partitions revoked, summed over
    members), ``max_pause_s`` (longest time any partition had no live owner, s) and
    ``partition_pause_s`` (the sum of those gaps over partitions, partition-seconds).
    ``paused_partitions``: how many partitions had any gap at all (eager: every one).
    ``per_rebalance``: ``{"generation", "at_s", "revoked_or_lost", "partitions"}`` per
    rebalance (``at_s``: seconds after the window started). ``verdicts``: see ``verdicts``.
    """

    protocol: str
    scenario: str
    consumers: int
    partitions: int
    rebalances: int
    revoked: int
    max_pause_s: float
    partition_pause_s: float
    lost: int
    moved: int
    needless_revocations: int
    unreassigned: int
    overlap_s: float
    paused_partitions: int
    window_s: float
    session_timeout_ms: int
    heartbeat_interval_ms: int
    run_id: str
    index: int
    group_type: str | None = None
    partition_assignor: str | None = None
    per_rebalance: list[dict] = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    verdicts: dict[str, bool | None] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def verdicts(r: PhaseResult) -> dict[str, bool | None]:
    """The claims of notebook 02, decided for one window (None: does not apply).

    - ``rebalanced`` / ``no_rebalance``: at least one / no new generation;
    - ``every_rebalance_revoked_every_partition``: each rebalance was preceded by the
      revocation (or loss, in a crash) of every partition of the topic (eager);
    - ``revoked_only_what_moved``: no revoked partition went back to the member that revoked
      it, and every revoked partition got a new owner (incremental);
    - ``pause_at_least_session_timeout``: some partition went unowned for at least
      ``session.timeout.ms - heartbeat.interval.ms`` (the earliest the coordinator can give
      away a silent member's partitions: its last heartbeat was up to one interval before it
      fell silent). A lower bound from the protocol, not a measured speed;
    - ``slow_member_removed_while_alive`` (scenario ``slow-consumer`` only): the coordinator
      gave the slow consumer's partitions to the others while it was still busy with one record.
    """
    floor_s = (r.session_timeout_ms - r.heartbeat_interval_ms) / 1000
    return {
        "rebalanced": r.rebalances > 0,
        "no_rebalance": r.rebalances == 0,
        "every_rebalance_revoked_every_partition": (None if not r.per_rebalance else
                                                    all(g["revoked_or_lost"] == g["partitions"] for g in r.per_rebalance)),
        "revoked_only_what_moved": r.needless_revocations == 0 and r.unreassigned == 0,
        "pause_at_least_session_timeout": r.max_pause_s >= floor_s,
        "slow_member_removed_while_alive": (r.notes.get("removed_while_alive") if r.scenario == "slow-consumer"
                                            else None),
    }


#: What notebook 02 claims, per protocol and scenario: verdict -> expected value. The CLI test
#: checks other consumer and partition counts against the same table.
EXPECTED: dict[tuple[str, str], dict[str, bool]] = {}
for _p in ("eager", "static"):
    for _s in ("scale-out", "crash"):
        EXPECTED[(_p, _s)] = {"rebalanced": True, "every_rebalance_revoked_every_partition": True,
                              "revoked_only_what_moved": False}
EXPECTED[("eager", "rolling-restart")] = {"rebalanced": True, "every_rebalance_revoked_every_partition": True,
                                          "revoked_only_what_moved": False}
EXPECTED[("eager", "scale-in")] = dict(EXPECTED[("eager", "rolling-restart")])
EXPECTED[("static", "rolling-restart")] = {"no_rebalance": True}
EXPECTED[("static", "scale-in")] = {"rebalanced": True, "every_rebalance_revoked_every_partition": True,
                                    "pause_at_least_session_timeout": True}
for _p in ("cooperative", "consumer"):
    for _s in ("rolling-restart", "scale-out", "scale-in", "crash"):
        EXPECTED[(_p, _s)] = {"rebalanced": True, "every_rebalance_revoked_every_partition": False,
                              "revoked_only_what_moved": True}
for _p in PROTOCOL_NAMES:
    EXPECTED[(_p, "crash")]["pause_at_least_session_timeout"] = True
    EXPECTED[(_p, "add-partitions")] = {"rebalanced": True}
    EXPECTED[(_p, "slow-consumer")] = {"rebalanced": True, "slow_member_removed_while_alive": True}


def unexpected(r: PhaseResult) -> dict[str, tuple[bool, bool | None]]:
    """Verdicts of ``r`` that differ from ``EXPECTED``: name -> (expected, got)."""
    want = EXPECTED.get((r.protocol, r.scenario), {})
    return {k: (v, r.verdicts.get(k)) for k, v in want.items() if r.verdicts.get(k) is not v}


@dataclass
class Analysis:
    """``analyse``'s output: ``results`` (one per window, in run order), and the small
    pandas frames the plots and tables use: ``intervals`` (ownership, with seconds since the
    run started), ``gaps``, ``rebalances`` (per rebalance) and ``windows``."""

    results: list[PhaseResult]
    intervals: "pd.DataFrame"
    gaps: "pd.DataFrame"
    rebalances: "pd.DataFrame"
    windows: "pd.DataFrame"

    def result(self, protocol: str, scenario: str) -> PhaseResult:
        """The result of ``scenario`` in the run of ``protocol`` (the first, if several).

        Raises:
            KeyError: no such window.
        """
        for r in self.results:
            if r.protocol == protocol and r.scenario == scenario:
                return r
        raise KeyError(f"no {scenario} window of protocol {protocol}")

    def table(self, scenarios: Iterable[str] | None = None) -> "pd.DataFrame":
        """The headline numbers, one row per window, ordered by protocol (``PROTOCOL_NAMES``)
        and scenario (``SCENARIOS``); only ``scenarios`` if given."""
        import pandas as pd

        keep = set(scenarios) if scenarios is not None else None
        order = {p: i for i, p in enumerate(PROTOCOL_NAMES)}
        ranked = sorted(self.results, key=lambda r: (order.get(r.protocol, len(order)), SCENARIOS.index(r.scenario)
                                                     if r.scenario in SCENARIOS else len(SCENARIOS)))
        rows = [{"protocol": r.protocol, "scenario": r.scenario, "rebalances": r.rebalances, "revoked": r.revoked,
                 "lost": r.lost, "moved": r.moved, "needless": r.needless_revocations, "paused": r.paused_partitions,
                 "max_pause_s": round(r.max_pause_s, 2), "partition_pause_s": round(r.partition_pause_s, 2),
                 "overlap_s": round(r.overlap_s, 2)}
                for r in ranked if keep is None or r.scenario in keep]
        return pd.DataFrame(rows).set_index(["protocol", "scenario"])


def analyse(spark: SparkSession, records: Sequence[RunRecord], ledger: DataFrame | None = None) -> Analysis:
    """Analyse finished runs with Spark; returns per-window results and small plot frames.

    Two Spark actions, whatever the number of runs: the ownership intervals (kept, and
    returned for plots), then the per-window counts, the gaps and the per-rebalance
    revocations in one union.
    Runs with ``SMALL_DATA_CONF`` and restores the session's settings after.

    Args:
        spark: the session (``kafkalab.spark.session()``).
        records: ``RunRecord`` of each run (``rebalance.run_rebalance``).
        ledger: the ledger events as a DataFrame; default: the runs' ledger files
            (``kafkalab.ledger.load``).

    Raises:
        ValueError: no records.
        pyspark.errors.AnalysisException: a run's ledger folder holds no file.
    """
    import pandas as pd

    from ..ledger import load

    if not records:
        raise ValueError("no runs to analyse")
    with small_data_conf(spark):
        events = membership(ledger if ledger is not None else load(spark, [r.ledger_glob for r in records]))
        wins = windows_frame(spark, records)
        intervals = ownership_intervals(events, actions_frame(spark, records)).cache()
        try:
            iv = intervals.toPandas()
            # One more action for the rest: three small tables in one union (tagged by `table`).
            from pyspark.sql import functions as F

            parts = [window_counts(intervals, wins).withColumn("table", F.lit("counts")),
                     partition_gaps(intervals, wins).withColumn("table", F.lit("gaps")),
                     per_rebalance(intervals, rebalances_frame(spark, records)).withColumn("table", F.lit("rebalances"))]
            both = parts[0].unionByName(parts[1], allowMissingColumns=True).unionByName(parts[2], allowMissingColumns=True)
            rest = both.toPandas()
        finally:
            intervals.unpersist()
    counts = {(r["run_id"], int(r["index"])): r for r in rest[rest["table"] == "counts"].to_dict("records")}
    gaps = rest[rest["table"] == "gaps"][["run_id", "index", "partition", "kind", "from_ms", "to_ms", "ms"]].copy()
    gaps = gaps.astype({"index": int, "partition": int, "from_ms": "int64", "to_ms": "int64", "ms": "int64"})
    reb_rows = (rest[rest["table"] == "rebalances"].sort_values(["run_id", "index", "ts_ms"])
                .astype({"index": int, "generation": int, "ts_ms": "int64", "revoked_or_lost": int, "partitions": int})
                .to_dict("records"))

    started = {r.run_id: r.started_ms for r in records}
    iv["start_s"] = (iv["start_ms"] - iv["run_id"].map(started)) / 1000
    iv["end_s"] = (iv["end_ms"] - iv["run_id"].map(started)) / 1000
    gaps["from_s"] = (gaps["from_ms"] - gaps["run_id"].map(started)) / 1000
    gaps["seconds"] = gaps["ms"] / 1000
    per_reb: dict[tuple[str, int], list[dict]] = {}
    starts = {(r.run_id, w.index): w.start_ms for r in records for w in r.windows}
    for row in reb_rows:
        k = (row["run_id"], row["index"])
        per_reb.setdefault(k, []).append({"generation": row["generation"], "at_s": (row["ts_ms"] - starts[k]) / 1000,
                                          "revoked_or_lost": row["revoked_or_lost"], "partitions": row["partitions"]})

    results: list[PhaseResult] = []
    rebs, wrows = [], []
    for r in records:
        for w in r.windows:
            k = (r.run_id, w.index)
            c = counts.get(k, {})
            g = gaps[(gaps["run_id"] == r.run_id) & (gaps["index"] == w.index)]
            pause = g[g["kind"] == "gap"]["ms"]
            res = PhaseResult(
                protocol=r.protocol.name, scenario=w.scenario, consumers=len(w.members_before), partitions=w.partitions,
                rebalances=len(per_reb.get(k, [])), revoked=int(c.get("revoked", 0)),
                max_pause_s=float(pause.max()) / 1000 if len(pause) else 0.0,
                partition_pause_s=float(pause.sum()) / 1000, lost=int(c.get("lost", 0)), moved=int(c.get("moved", 0)),
                needless_revocations=int(c.get("needless", 0)), unreassigned=int(c.get("unreassigned", 0)),
                overlap_s=float(g[g["kind"] == "overlap"]["ms"].sum()) / 1000,
                paused_partitions=int(g[g["kind"] == "gap"]["partition"].nunique()), window_s=(w.end_ms - w.start_ms) / 1000,
                session_timeout_ms=r.protocol.session_timeout_ms, heartbeat_interval_ms=r.protocol.heartbeat_interval_ms,
                run_id=r.run_id, index=w.index, group_type=r.group_type, partition_assignor=r.partition_assignor,
                per_rebalance=per_reb.get(k, []), notes=w.notes)
            res.verdicts = verdicts(res)
            results.append(res)
            wrows.append({"run_id": r.run_id, "protocol": r.protocol.name, "index": w.index, "scenario": w.scenario,
                          "start_s": (w.start_ms - r.started_ms) / 1000, "end_s": (w.end_ms - r.started_ms) / 1000})
            for x in res.per_rebalance:
                rebs.append({"run_id": r.run_id, "protocol": r.protocol.name, "scenario": w.scenario,
                             **x, "at_s": (w.start_ms - r.started_ms) / 1000 + x["at_s"]})
    return Analysis(results, iv, gaps, pd.DataFrame(rebs), pd.DataFrame(wrows))


def combine(analyses: Sequence[Analysis]) -> Analysis:
    """One ``Analysis`` of several, each of its own runs (``analyse`` per run, one scenario of
    the notebook at a time): their results in order, their frames concatenated."""
    import pandas as pd

    def cat(frames: list) -> "pd.DataFrame":
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    return Analysis([r for a in analyses for r in a.results], cat([a.intervals for a in analyses]),
                    cat([a.gaps for a in analyses]), cat([a.rebalances for a in analyses]),
                    cat([a.windows for a in analyses]))


# ----------------------------------------------------------------------------- tables


#: The article's triggers and the scenario that shows each (eager protocol).
TRIGGERS: dict[str, str] = {
    "a consumer joins": "scale-out",
    "a consumer shuts down": "scale-in",
    "missed heartbeats (session.timeout.ms)": "crash",
    "max.poll.interval.ms exceeded": "slow-consumer",
    "partitions added": "add-partitions",
}


def trigger_table(a: Analysis, protocol: str = "eager") -> "pd.DataFrame":
    """One row per trigger of the article (``TRIGGERS``) that ``a`` ran for ``protocol``:
    rebalances, when each was written (seconds after the event's window started; measured,
    not a claim), revoked partitions, longest pause."""
    import pandas as pd

    rows = []
    ran = {(r.protocol, r.scenario) for r in a.results}
    for trigger, scenario in TRIGGERS.items():
        if (protocol, scenario) not in ran:
            continue
        r = a.result(protocol, scenario)
        rows.append({"trigger": trigger, "scenario": scenario, "rebalances": r.rebalances,
                     "rebalances at s": [round(g["at_s"], 1) for g in r.per_rebalance],
                     "revoked": r.revoked, "max_pause_s": round(r.max_pause_s, 2)})
    return pd.DataFrame(rows).set_index("trigger")


def slow_table(a: Analysis) -> "pd.DataFrame":
    """One row per ``slow-consumer`` window: the protocol's timeouts (ms), how long the slow
    consumer worked on its record, when the coordinator let it go (s after its last poll;
    measured), rebalances while it was busy, and what its next poll said."""
    import pandas as pd

    rows = [{"protocol": r.protocol, "max.poll.interval.ms": r.notes["max_poll_interval_ms"],
             "session timeout ms": r.session_timeout_ms, "processing ms": r.notes["process_ms"],
             "removed after s": None if r.notes.get("removed_after_ms") is None else r.notes["removed_after_ms"] / 1000,
             "rebalances while busy": r.notes.get("rebalances_while_stuck"), "next poll said": r.notes.get("poll_error")}
            for r in a.results if r.scenario == "slow-consumer"]
    return pd.DataFrame(rows).set_index("protocol")


def rebalance_table(a: Analysis, scenarios: Sequence[str]) -> "pd.DataFrame":
    """Every rebalance of the given scenarios: protocol, scenario, generation (group epoch),
    seconds into the window, partitions revoked or lost since the previous one."""
    import pandas as pd

    rows = [{"protocol": r.protocol, "scenario": r.scenario, "generation": g["generation"], "at_s": round(g["at_s"], 2),
             "revoked_or_lost": g["revoked_or_lost"], "of_partitions": g["partitions"]}
            for r in a.results if r.scenario in scenarios for g in r.per_rebalance]
    return pd.DataFrame(rows)


def longest_gaps(a: Analysis, protocol: str, scenario: str) -> dict[int, float]:
    """partition -> its longest gap (s) in that window (0.0 if it had none)."""
    r = a.result(protocol, scenario)
    g = a.gaps[(a.gaps["run_id"] == r.run_id) & (a.gaps["index"] == r.index) & (a.gaps["kind"] == "gap")]
    top = g.groupby("partition")["seconds"].max().to_dict()
    return {p: float(top.get(p, 0.0)) for p in range(r.partitions)}


def assignors(a: Analysis) -> dict[str, tuple[str | None, str | None]]:
    """protocol -> (group type, assignor) as the coordinator reported them (``CLASSIC`` or
    ``CONSUMER``; ``range``, ``cooperative-sticky``, ``uniform``...)."""
    return {r.protocol: (r.group_type, r.partition_assignor) for r in a.results}


def warm_up(spark: SparkSession, example: tuple[list, RunRecord]) -> None:
    """Run ``analyse`` on a small hand-made run (``rebalance.example_run()``: ``(events,
    record)``), so the JVM has compiled Spark's code paths for these queries before the real
    runs end. Give it to ``kafkalab.spark.session_in_background``:
    ``session_in_background(name, lambda spark: warm_up(spark, rebalance.example_run()))``."""
    from ..ledger import events_frame

    events, record = example
    analyse(spark, [record], ledger=events_frame(spark, events))
