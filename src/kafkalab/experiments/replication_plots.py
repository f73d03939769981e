"""Notebook 08's chart: lost acknowledged writes and seconds without a leader, per configuration.

Draws with matplotlib and returns the Figure (headless Agg works), so tests can inspect it.
Nothing here talks to Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

if TYPE_CHECKING:
    import pandas as pd

LOST_COLOR = "#c44e52"
KEPT_COLOR = "#55a868"
DOWN_COLOR = "#8172b3"


def empty_row_note(row) -> str:
    """What an empty row of the verdict chart means: ``row`` (a ``verdict_table`` row, or any
    mapping with ``produce_errors`` and ``error_codes``) had no acknowledged write. E.g.
    ``"no write acknowledged: all 24 refused (NOT_ENOUGH_REPLICAS)"``."""
    refused = int(row.get("produce_errors", 0) or 0)
    codes = row.get("error_codes") or {}
    if refused:
        return f"no write acknowledged: all {refused} refused ({', '.join(sorted(codes)) or 'error'})"
    return "no write acknowledged"


def verdict_chart(table: "pd.DataFrame") -> Figure:
    """Two horizontal bar panels sharing the rows of ``table`` (``replication_analysis.verdict_table``:
    index (scenario, setting); columns ``acked``, ``lost_acked``, ``unavailable_s``):
    left, acknowledged writes kept (green) and lost (red); right, seconds from the kill until
    the partition had a live leader again (the longest over the repeats). A row with no
    acknowledged write has no bar: the left panel says why on the row (``empty_row_note``:
    the writes were refused, with the broker's error from ``produce_errors``/``error_codes``).

    Returns:
        The Figure (``fig.axes[0]`` counts, ``fig.axes[1]`` seconds).

    Raises:
        ValueError: an empty table.
    """
    if table.empty:
        raise ValueError("nothing to draw: empty table")
    labels = [f"{scen}: {setting}" for scen, setting in table.index]
    y = list(range(len(labels)))[::-1]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 0.45 * len(labels) + 2.0), sharey=True)
    kept = (table["acked"] - table["lost_acked"]).tolist()
    lost = table["lost_acked"].tolist()
    ax1.barh(y, kept, color=KEPT_COLOR, label="acknowledged, kept")
    ax1.barh(y, lost, left=kept, color=LOST_COLOR, label="acknowledged, lost")
    ax1.set_yticks(y)
    ax1.set_yticklabels(labels, fontsize=8)
    ax1.set_xlabel("records written during the fault")
    ax1.set_title("acknowledged writes: kept and lost", fontsize=10)
    for yy, (_, row) in zip(y, table.iterrows()):
        if row["acked"] == 0:
            ax1.text(0, yy, " " + empty_row_note(row), va="center", ha="left", fontsize=8, style="italic",
                     color="#444444")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)  # below: no bar hidden
    ax2.barh(y, table["unavailable_s"].tolist(), color=DOWN_COLOR)
    ax2.set_xlabel("seconds from the kill until a live leader")
    ax2.set_title("unavailable (no live leader)", fontsize=10)
    ax2.set_xlim(0, max(table["unavailable_s"].max(), 1.0) * 1.12)  # room for the numbers
    for yy, v in zip(y, table["unavailable_s"].tolist()):
        ax2.text(v, yy, f" {v:.1f}", va="center", fontsize=8)
    fig.tight_layout()
    return fig
