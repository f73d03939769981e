"""Plots of notebook 13: the dashboard an operator would look at, with the fault marked.

x: seconds after the lab killed the producer. Marked: the kill (the fault), the fix (the
``kafka-transactions abort`` call, or, waiting for the timeout, the transaction's start +
``transaction.timeout.ms``) and the moment the partition's LSO reached its log end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import stalled_partition_analysis as sa

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _marks(ax, run: Any) -> None:
    t = lambda ms: (ms - run.killed_ms) / 1000  # noqa: E731
    ax.axvline(0, color="tab:red", lw=1.2, label="producer killed (the fault)")
    if run.fix == "abort":
        ax.axvline(t(run.fix_ms), color="tab:green", lw=1.2, ls="--", label="kafka-transactions abort")
    else:
        ax.axvline(t(run.txn_start_ms + run.transaction_timeout_ms), color="tab:green", lw=1.2, ls="--",
                   label="start + transaction.timeout.ms")
    ax.axvline(t(run.resolved_ms), color="tab:gray", lw=1, ls=":", label="LSO = log end (seen)")


def dashboard(run: Any, title: str = "") -> "Figure":
    """Two panels over time: broker 1's ``LastStableOffsetLag`` per partition (JMX, ``JmxTool``),
    and the ``read_committed`` consumer's lag per partition from its librdkafka statistics: its own
    ``consumer_lag`` (solid) and the high watermark minus its committed offset (dashed, what
    ``kafka-consumer-groups`` shows). Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    jmx = sa.jmx_rows(run)
    client = sa.client_rows(run)
    colours = {0: "tab:orange", 1: "tab:blue", 2: "tab:purple"}
    for p in sorted({r["partition"] for r in jmx}):
        rows = [r for r in jmx if r["partition"] == p]
        top.step([r["t_s"] for r in rows], [r["LastStableOffsetLag"] for r in rows], where="post",
                 color=colours.get(p), label=f"partition {p}")
        crows = [r for r in client if r["partition"] == p]
        bottom.step([r["t_s"] for r in crows], [r["consumer_lag"] for r in crows], where="post", color=colours.get(p),
                    label=f"partition {p}: librdkafka consumer_lag")
        bottom.step([r["t_s"] for r in crows], [r["lag_to_hw"] for r in crows], where="post", color=colours.get(p),
                    ls="--", alpha=0.8, label=f"partition {p}: high watermark - committed")
    top.set_ylabel("records")
    top.set_title("broker 1 (JMX): kafka.cluster:type=Partition,name=LastStableOffsetLag", fontsize=9)
    bottom.set_ylabel("records")
    bottom.set_title("read_committed consumer (librdkafka statistics)", fontsize=9)
    bottom.set_xlabel("seconds after the producer was killed")
    for ax in (top, bottom):
        _marks(ax, run)
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def gauges(rows: list[dict], columns: list[str], marks: dict[str, float], title: str = "") -> "Figure":
    """Broker gauges over time (``stalled_partition_analysis.gauge_rows``), one step line per
    column, with ``marks`` (label -> seconds) drawn as vertical lines: the faults and the
    recovery. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.2))
    for column in columns:
        ax.step([r["t_s"] for r in rows], [r[column] for r in rows], where="post", label=column)
    styles = ["tab:red", "darkred", "tab:green", "tab:gray"]
    for (label, t), colour in zip(marks.items(), styles):
        ax.axvline(t, color=colour, lw=1.2, ls="--", label=label)
    ax.set_xlabel("seconds")
    ax.set_ylabel("partitions")
    ax.legend(fontsize=7, loc="upper left")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig
