"""Tables of notebook 13: what each dashboard showed over a ``stalled_partition.StalledRun``.

Plain Python over the run's samples (a few hundred rows: no Spark needed). Times are seconds
after the lab killed the producer (the fault), so every table and plot shares one clock.
"""

from __future__ import annotations

from typing import Any

#: librdkafka's "no offset yet" (``RD_KAFKA_OFFSET_INVALID``, STATISTICS.md).
INVALID = -1001


def _t(run: Any, t_ms: int) -> float:
    return round((t_ms - run.killed_ms) / 1000, 3)


def jmx_rows(run: Any) -> list[dict]:
    """One row per ``JmxTool`` sample and partition: ``t_s``, ``partition``,
    ``LastStableOffsetLag`` (broker 1, the leader), and broker 1's
    ``PartitionsWithLateTransactionsCount``."""
    return [{"t_s": _t(run, s["t_ms"]), "partition": int(p), "LastStableOffsetLag": v,
             "PartitionsWithLateTransactionsCount": s["late_transactions"]}
            for s in run.jmx for p, v in sorted(s["lso_lag"].items(), key=lambda kv: int(kv[0]))]


def client_rows(run: Any, uncommitted: bool = False) -> list[dict]:
    """One row per librdkafka statistics report and partition of the ``read_committed`` consumer
    (``uncommitted``: the other one), offsets known: ``t_s``, ``partition``, ``hi_offset``,
    ``ls_offset``, ``committed_offset``, librdkafka's ``consumer_lag``, and ``lag_to_hw``: the
    high watermark minus the committed offset (the lag ``kafka-consumer-groups`` shows)."""
    stats = run.statistics_uncommitted if uncommitted else run.statistics
    return [{"t_s": _t(run, s["t_ms"]), "partition": s["partition"], "hi_offset": s["hi_offset"],
             "ls_offset": s["ls_offset"], "committed_offset": s["committed_offset"],
             "consumer_lag": s["consumer_lag"], "lag_to_hw": s["hi_offset"] - s["committed_offset"]}
            for s in stats if s["committed_offset"] != INVALID and s["hi_offset"] != INVALID]


def lag_table(run: Any, when: str) -> list[dict]:
    """The group tools' lag (``metrics.group_lag``) ``when`` = ``"stalled"`` or ``"after"``: one
    row per group and partition."""
    return [{"group": label, "partition": int(p), **v}
            for label, parts in run.lag[when].items() for p, v in sorted(parts.items(), key=lambda kv: int(kv[0]))]


def stalled_partitions(run: Any) -> list[int]:
    """Partitions whose ``LastStableOffsetLag`` was above 0 in some sample."""
    return sorted({r["partition"] for r in jmx_rows(run) if r["LastStableOffsetLag"] > 0})


def max_client_lag(run: Any, partition: int, field: str = "consumer_lag") -> int:
    """The largest ``field`` (``consumer_lag`` or ``lag_to_hw``) the ``read_committed``
    consumer's statistics showed for ``partition`` between the fault and the end of the
    stall (``resolved_ms``)."""
    end = _t(run, run.resolved_ms)
    values = [r[field] for r in client_rows(run) if r["partition"] == partition and 0 < r["t_s"] <= end]
    return max(values, default=0)


def timeout_window_ms(run: Any) -> tuple[int, int]:
    """When the coordinator may abort a transaction on its own, in ms after the transaction's
    start: not before ``transaction.timeout.ms``, and by the next run of its check after it (every
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``), plus one more interval
    for writing the markers and for the harness to see the LSO move (KIP-98; the coordinator's
    ``abortTimedOutTransactions``)."""
    return run.transaction_timeout_ms, run.transaction_timeout_ms + 2 * run.cleanup_interval_ms


def gauge_rows(samples: list, mbeans: dict[str, str], t0_ms: int) -> list[dict]:
    """One row per ``JmxTool`` sample (``metrics.JmxSample``): ``t_s`` (seconds after ``t0_ms``)
    and one column per label of ``mbeans`` (label -> MBean), its ``Value``."""
    return [{"t_s": round((s.t_ms - t0_ms) / 1000, 3), **{label: s.value(m) for label, m in mbeans.items()}}
            for s in samples]


def between(rows: list[dict], column: str, start_s: float, end_s: float) -> list[float]:
    """``column``'s values of the rows with ``start_s <= t_s < end_s``."""
    return [r[column] for r in rows if start_s <= r["t_s"] < end_s]
