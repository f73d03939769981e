"""Plots of notebook 09: every delivery of a share group run, in time.

x = ms since the first delivery, y = the record's offset, one colour per consumer, one marker
per delivery count (1: circle, 2: triangle, 3 and more: square); a delivery that was never
acknowledged (its consumer crashed or froze) is drawn hollow. Redeliveries stand above a
record's first delivery on the same row; order across consumers is read left to right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

MARKERS = {1: "o", 2: "^"}


def deliveries_timeline(frame: "pd.DataFrame", title: str = "", lock_ms: int | None = None) -> "Figure":
    """One panel per partition of ``frame`` (``share_groups_analysis.deliveries(...).toPandas()``).
    ``lock_ms``: the acquisition lock (ms), drawn as a bar after each unacknowledged delivery
    until the record's next delivery, at most until the lock would run out. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    parts = sorted(frame["partition"].unique()) if len(frame) else [0]
    clients = sorted(frame["client_id"].unique()) if len(frame) else []
    colour = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(clients)}
    fig, axes = plt.subplots(1, len(parts), figsize=(6.5 * len(parts), 3.6), squeeze=False)
    for ax, p in zip(axes[0], parts):
        rows = frame[frame["partition"] == p]
        for c in clients:
            mine = rows[rows["client_id"] == c]
            for count, group in mine.groupby("delivery_count"):
                marker = MARKERS.get(int(count), "s")
                held = group["ack"].isna()
                ax.scatter(group["ms"][~held], group["offset"][~held], s=22, marker=marker, color=colour[c],
                           label=f"{c}, delivery {int(count)}")
                if held.any():
                    ax.scatter(group["ms"][held], group["offset"][held], s=40, marker=marker, facecolors="none",
                               edgecolors=colour[c], label=f"{c}, delivery {int(count)}, never acknowledged")
                    if lock_ms:  # plotting
                        for x, y in zip(group["ms"][held], group["offset"][held]):
                            # the record is held until its next delivery, at most until the lock runs out:
                            # a crashed member's records come back sooner (its session ended)
                            later = rows[(rows["offset"] == y) & (rows["delivery_count"] > count)]["ms"]
                            end = min([x + lock_ms, *later])
                            ax.plot([x, end], [y, y], color=colour[c], lw=1, alpha=0.5)
        ax.set_title(f"{title} partition {p}".strip(), fontsize=10)
        ax.set_xlabel("ms since the first delivery")
        ax.set_ylabel("offset")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig
