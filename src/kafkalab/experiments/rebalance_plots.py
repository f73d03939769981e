"""Plots of notebook 02: partition ownership timelines, one panel per protocol and scenario.

Each panel shows one window (settled group to settled group) of one run: partitions on the
y axis, seconds since the window started on the x axis, one bar per ownership interval
coloured by consumer slot (``c0``, ``c1``, ...; a restarted process keeps its slot's colour
and is hatched), white where nobody owned the partition (the pause), and a dotted line at
every rebalance (a generation or group epoch the coordinator wrote).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .rebalance_analysis import Analysis

#: One colour per consumer slot (matplotlib's tab10).
SLOT_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
                "tab:olive", "tab:cyan", "tab:gray")


def slot_of(client_id: str) -> int:
    """``"c2.1"`` -> 2 (the consumer slot; ``.1`` is its second process)."""
    return int(client_id[1:].split(".")[0])


def incarnation_of(client_id: str) -> int:
    """``"c2.1"`` -> 1."""
    return int(client_id.split(".")[1]) if "." in client_id else 0


def draw_window(ax: Axes, analysis: Analysis, protocol: str, scenario: str, title: str | None = None,
                legend: bool = False) -> None:
    """Draw the ownership timeline of one window on ``ax`` (see the module docstring).

    Raises:
        KeyError: the analysis has no such window.
    """
    from matplotlib.patches import Patch

    r = analysis.result(protocol, scenario)
    w = analysis.windows
    w = w[(w["run_id"] == r.run_id) & (w["index"] == r.index)].iloc[0]
    t0, t1 = float(w["start_s"]), float(w["end_s"])
    iv = analysis.intervals[analysis.intervals["run_id"] == r.run_id]
    for row in iv.itertuples():
        start = max(row.start_s, t0)
        end = t1 if row.end_s != row.end_s or row.end_s is None else min(row.end_s, t1)  # NaN: still open
        if end <= t0 or start >= t1 or row.partition >= r.partitions:
            continue
        slot = slot_of(row.client_id)
        ax.broken_barh([(start - t0, end - start)], (row.partition - 0.4, 0.8),
                       facecolors=SLOT_COLOURS[slot % len(SLOT_COLOURS)], edgecolor="white", linewidth=0.5,
                       hatch="///" if incarnation_of(row.client_id) else None, alpha=0.85)
    for g in r.per_rebalance:
        ax.axvline(g["at_s"], color="black", linestyle=":", linewidth=1, alpha=0.6)
    ax.set_xlim(0, max(t1 - t0, 0.1))
    ax.set_ylim(-0.6, r.partitions - 0.4)
    ax.set_yticks(range(r.partitions))
    ax.invert_yaxis()
    rebalances = f"{r.rebalances} rebalance" + ("" if r.rebalances == 1 else "s")
    ax.set_title(f"{title or f'{protocol}: {scenario}'}\n{rebalances}, {r.revoked} revoked, "
                 f"longest pause {r.max_pause_s:.1f} s", fontsize=9)
    if legend:
        slots = sorted({slot_of(c) for c in iv["client_id"]})
        ax.legend(handles=[Patch(color=SLOT_COLOURS[s % len(SLOT_COLOURS)], label=f"c{s}") for s in slots]
                  + [Patch(facecolor="white", edgecolor="grey", hatch="///", label="restarted")],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def timelines(analysis: Analysis, protocols: Sequence[str], scenarios: Sequence[str],
              panel_size: tuple[float, float] = (4.0, 2.2)) -> Figure:
    """A grid of ``draw_window`` panels: one row per scenario, one column per protocol (side
    by side), x in seconds since each window started, partitions down the y axis.

    Returns:
        The matplotlib ``Figure`` (not shown).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(scenarios), len(protocols), squeeze=False,
                             figsize=(panel_size[0] * len(protocols), panel_size[1] * len(scenarios)))
    for i, s in enumerate(scenarios):
        for j, p in enumerate(protocols):
            ax = axes[i][j]
            draw_window(ax, analysis, p, s, legend=(i == 0 and j == len(protocols) - 1))
            if j == 0:
                ax.set_ylabel(f"{s}\npartition", fontsize=9)
            if i == len(scenarios) - 1:
                ax.set_xlabel("seconds since the group was settled")
    fig.tight_layout()
    return fig


def pause_bars(analysis: Analysis, scenario: str, ax: Axes | None = None) -> Axes:
    """Bar chart of ``max_pause_s`` and ``partition_pause_s`` per protocol for ``scenario``."""
    import matplotlib.pyplot as plt

    rows = [r for r in analysis.results if r.scenario == scenario]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 2.8))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r.max_pause_s for r in rows], width=0.4, label="longest pause of a partition (s)")
    ax.bar([i + 0.2 for i in x], [r.partition_pause_s for r in rows], width=0.4,
           label="sum of pauses over partitions (partition-s)")
    ax.set_xticks(list(x))
    ax.set_xticklabels([r.protocol for r in rows])
    ax.set_title(scenario)
    top = max([r.partition_pause_s for r in rows] + [r.max_pause_s for r in rows] + [0.1])
    ax.set_ylim(0, top * 1.45)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    return ax
