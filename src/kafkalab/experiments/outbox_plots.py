"""Plots of notebook 12: what each crashed run left behind, by id (``outbox_analysis.counts``).

One horizontal stacked bar per run, top to bottom in the notebook's order: lost (expected, never
seen), unexpected (seen, never expected: an event for an order that does not exist) and
duplicates (extra copies: events sent twice, or orders shipped twice). The dual write's runs
have a lost or an unexpected id; the outbox runs only duplicates in the topic; the consumer's
runs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The counts drawn, with their colour.
KINDS = {"lost": "tab:red", "unexpected": "tab:orange", "duplicates": "tab:blue"}


def anomalies(table: Mapping[str, Mapping[str, int]], title: str = "") -> "Figure":
    """One stacked bar per run (``table``: run label -> counts with ``KINDS`` keys, e.g.
    ``outbox_analysis.as_dicts``), one colour per kind, each part labelled with its count and kind
    when not 0. Returns the matplotlib Figure.

    Raises:
        KeyError: a run without one of ``KINDS``.
    """
    import matplotlib.pyplot as plt

    runs = list(table)
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(runs) + 1.4))
    left = [0] * len(runs)
    for kind, colour in KINDS.items():  # stacked: a run rarely has more than one kind
        values = [table[r][kind] for r in runs]
        bars = ax.barh(range(len(runs)), values, left=left, height=0.6, color=colour, label=kind)
        for bar, v in zip(bars, values):
            if v:
                ax.annotate(f"{v} {kind}", (bar.get_x() + bar.get_width(), bar.get_y() + 0.3), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=8)
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(runs)), runs)
    ax.invert_yaxis()
    ax.set_xlabel("ids")
    ax.margins(x=0.15)  # room for the labels
    ax.legend(loc="lower right")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
