"""Plots of notebook 10: each knob's effect, measured in one run.

``summary`` draws one panel per run and record size, on a linear axis of its own: numbers of
different runs (a burst of 100-byte records, a paced run, a read of 1000-byte records) are never
put on one axis, and every bar names what it is (the client, the percentile)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Colours of the named series (percentiles, clients), the same in every panel.
SERIES_COLOURS = {"p50": "tab:blue", "p99": "tab:orange", "max": "tab:red",
                  "confluent-kafka": "tab:blue", "Java perf tool": "tab:green"}


@dataclass
class Panel:
    """One run's numbers, one record size: ``rows`` maps a setting (the bar group's label) to
    ``{series: value}`` (a percentile, a client); ``unit`` labels the linear x axis. ``notes``
    maps a setting that has no bar to the sentence drawn in its row instead (why it has none)."""

    title: str
    unit: str
    rows: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def series(self) -> list[str]:
        """The series names in first-seen order."""
        out: list[str] = []
        for values in self.rows.values():
            out += [s for s in values if s not in out]
        return out


def summary(panels: Sequence[Panel], columns: int = 2) -> "Figure":
    """One horizontal grouped bar chart per panel, each on its own linear axis starting at 0. A
    bar's end names its series and value (``p99 15.2``), so no legend covers a bar; long setting
    names are wrapped, not squeezing the panel. A panel's ``notes`` come after its bars, one row
    each, the sentence written in italics where the bars would be.

    Raises:
        ValueError: no panels, or a panel without rows.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    if not panels or any(not p.rows for p in panels):
        raise ValueError("every panel needs at least one row")
    rows_n = -(-len(panels) // columns)
    heights = [0.3 * max(len(p.rows) * len(p.series()) + 2 * len(p.notes) for p in panels[r * columns:(r + 1) * columns])
               + 1.4 for r in range(rows_n)]
    fig, axes = plt.subplots(rows_n, columns, figsize=(13, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, panel in zip(axes.flat, panels):
        series = panel.series()
        labels = list(panel.rows) + list(panel.notes)
        width = 0.8 / len(series)
        top = max(v for values in panel.rows.values() for v in values.values()) or 1.0
        for k, s in enumerate(series):
            ys = [i - 0.4 + width / 2 + k * width for i in range(len(labels))]
            vals = [panel.rows[label].get(s) if label in panel.rows else None for label in labels]
            shown = [(y, v) for y, v in zip(ys, vals) if v is not None]
            ax.barh([y for y, _ in shown], [v for _, v in shown], height=width * 0.9, color=SERIES_COLOURS.get(s, "tab:blue"))
            for y, v in shown:
                number = f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"
                ax.text(v + top * 0.01, y, f"{s} {number}" if len(series) > 1 or s in SERIES_COLOURS else number,
                        va="center", fontsize=8)
        for i, label in enumerate(labels):
            if label in panel.notes:
                ax.text(top * 0.01, i, "\n".join(textwrap.wrap(panel.notes[label], 48)), va="center", ha="left",
                        fontsize=8, style="italic", color="0.3")
        ax.set_yticks(range(len(labels)), ["\n".join(textwrap.wrap(label, 24, break_long_words=False)) for label in labels], fontsize=9)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlim(0, top * 1.35)
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 10 or x == 0 else f"{x:g}"))
        ax.set_xlabel(panel.unit, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title("\n".join(textwrap.wrap(panel.title, 52)), fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def summary_panels(clients: Sequence[Any], batching: Iterable[Any], codecs: Iterable[Any], acks: Iterable[Any],
                   transactions: Iterable[Any], latency: Any, reads: Any, messages: int, size: int) -> list[Panel]:
    """The panels of notebook 10's summary, one per run, from the results its sections returned
    (``performance.run_throughput`` x3, ``run_batching_programs``, ``run_compression``, ``run_acks_programs``,
    ``run_transactions``, ``run_latency``, ``run_consumer_throughput``); ``messages``, ``size``:
    section 1's burst."""
    batching, codecs, acks, transactions = list(batching), list(codecs), list(acks), list(transactions)
    burst = Panel(f"1. bursts of {messages:,} records of {size} B, linger.ms=1000", "records/s")
    for r, name in zip(clients, ("acks=1, own batch.size", "acks=all, own batch.size", "acks=1, batch.size=16384")):
        burst.rows[name] = {"confluent-kafka": r.python_records_per_s, "Java perf tool": r.java_records_per_s}
    b0 = batching[0]
    paced = Panel(f"2. {b0.records:,} records of {size} B paced at {b0.rate:,.0f}/s: send to ack, median",
                  "ms", {r.label: {"p50": r.ack_p50_ms} for r in batching})
    flights = Panel(f"3. {codecs[0].records:,} flight records (JSON) per codec: bytes on disk per record",
                    "bytes per record", {c.codec: {"bytes": c.bytes_on_disk_per_record} for c in codecs})
    a0 = acks[0]
    ack = Panel(f"4a. {a0.records:,} records of 100 B per setting, paced: send to ack", "ms",
                {f"acks={a.acks}": {"p50": a.ack_p50_ms, "p99": a.ack_p99_ms} for a in acks if a.acks != "0"},
                {f"acks={a.acks}": "no bar: with acks=0 the broker sends no answer, so there is no ack to time"
                 for a in acks if a.acks == "0"})
    txn = Panel(f"4b. transactions of {size} B records: records/s", "records/s",
                {f"{t.records_per_transaction:,} records per transaction": {"records/s": t.records_per_s}
                 for t in transactions})
    e2e = Panel(f"5a. {latency.runs[0].records} records of {size} B at {latency.runs[0].rate:.0f}/s: end to end",
                "ms", {r.label: {"p50": r.p50_ms, "p99": r.p99_ms, "max": r.max_ms} for r in latency.runs})
    fetch = Panel(f"5b. reading {reads.messages:,} records of {reads.record_size:,} B from offset 0, "
                  "per max.partition.fetch.bytes", "records/s",
                  {f"limit {r.max_partition_fetch_bytes:,} B":
                   {"confluent-kafka": r.python.records_per_s,
                    **({"Java perf tool": r.java.records_per_s} if r.java else {})} for r in reads.rows})
    return [burst, paced, flights, ack, txn, e2e, fetch]
