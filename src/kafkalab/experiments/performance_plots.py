"""Plots of notebook 10: each knob's effect, measured in one run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def knobs(throughput: Mapping[str, float], latency: Mapping[str, float],
          consumer: Mapping[str, float] | None = None) -> "Figure":
    """Two panels: records/s per setting (left, log scale: producer settings in blue, then
    ``consumer`` settings in green, e.g. each ``max.partition.fetch.bytes``) and a latency in ms
    per setting (right, log scale; each label names its percentile). Each mapping: label ->
    value, drawn in its order."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    consumer = dict(consumer or {})
    rates = {**throughput, **consumer}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * max(len(rates), len(latency)) + 1.6))
    for ax, data, xlabel, colours in (
            (left, rates, "records/s (log scale)", {k: "tab:green" if k in consumer else "tab:blue" for k in rates}),
            (right, latency, "latency, ms (log scale)", {k: "tab:orange" for k in latency})):
        labels = list(data)[::-1]
        ax.barh(labels, [max(data[k], 1e-3) for k in labels], color=[colours[k] for k in labels])
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        for y, k in enumerate(labels):
            ax.text(data[k], y, f" {data[k]:,.0f}" if data[k] >= 10 else f" {data[k]:.2f}", va="center", fontsize=8)
    if consumer:
        left.legend(handles=[Patch(color="tab:blue", label="producing"), Patch(color="tab:green", label="consuming")],
                    fontsize=8, loc="lower right")
    left.set_title("throughput per knob", fontsize=10)
    right.set_title("latency per knob", fontsize=10)
    fig.tight_layout()
    return fig
