"""Plots of notebook 07: sequence number against the order records were consumed or stored.

A producer's order is the diagonal; every step down is an inversion
(``kafkalab.experiments.ordering_analysis``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

from .ordering_analysis import Consumed

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def sequence_vs_consumption(runs: Mapping[str, Iterable[Consumed]], by_partition: bool = True) -> "Figure":
    """One panel per run: x = global consumption index, y = sequence number, one colour per
    partition (``by_partition``). Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.8), squeeze=False)
    for ax, (title, records) in zip(axes[0], runs.items()):
        recs = sorted(records, key=lambda r: r.index)
        ax.scatter([r.index for r in recs], [r.seq for r in recs], s=3,
                   c=[r.partition for r in recs] if by_partition else None, cmap="tab10")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("consumption order (all consumers)")
        ax.set_ylabel("sequence number (producer order)")
    fig.tight_layout()
    return fig


def log_order(runs: Mapping[str, list[int]]) -> "Figure":
    """One line per run: x = position in the partition (offset order), y = sequence number."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-.")]
    seen: dict[tuple, str] = {}
    for i, (label, seqs) in enumerate(runs.items()):
        marker, line = styles[i % len(styles)]
        same = seen.setdefault(tuple(seqs), label)  # a run in the same order as an earlier one lies on it
        ax.plot(range(len(seqs)), seqs, marker=marker, ms=7 - 1.5 * i, linestyle=line, alpha=0.8,
                lw=1 + 0.5 * (len(runs) - i), label=label if same == label else f"{label} (same order as {same})")
    ax.set_xlabel("position in the partition (offset order)")
    ax.set_ylabel("sequence number (producer order)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
