"""Plots of notebook 10: each knob's effect, measured in one run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def knobs(throughput: Mapping[str, float], latency: Mapping[str, float]) -> "Figure":
    """Two panels: records/s per producer setting (left, log scale) and a latency in ms per
    setting (right, log scale; each label names its percentile). Each mapping: label ->
    value, drawn in its order."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * max(len(throughput), len(latency)) + 1.6))
    for ax, data, xlabel, colour in ((left, throughput, "records/s (log scale)", "tab:blue"),
                                     (right, latency, "latency, ms (log scale)", "tab:orange")):
        labels = list(data)[::-1]
        ax.barh(labels, [max(data[k], 1e-3) for k in labels], color=colour)
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        for y, k in enumerate(labels):
            ax.text(data[k], y, f" {data[k]:,.0f}" if data[k] >= 10 else f" {data[k]:.2f}", va="center", fontsize=8)
    left.set_title("throughput per knob", fontsize=10)
    right.set_title("latency per knob", fontsize=10)
    fig.tight_layout()
    return fig
