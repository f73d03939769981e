"""Plots of notebook 11: the schedule of a late transaction request, as the fault proxy saw it.

One row per client; on the proxy's clock (ms, 0 = the proxy took the request): the held
request, the client closing its connection (it gave up), the coordinator's answers to the
client's own transaction requests, and the late delivery with the coordinator's answer to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def schedule_points(run: Any) -> list[tuple[float, str]]:
    """``(ms after the request was held, label)`` of a ``late_txn.LateTxnRun``, in time order."""
    held = run.held
    t0 = held["held_ms"]
    points = [(0.0, f"{held['api']} v{held['api_version']} of N held"),
              (held["client_closed_ms"] - t0, "client closes the connection")]
    for a in run.txn_answers:
        if a["action"] == "released":
            points.append((a["t_ms"] - t0, f"late {a['api']} answered {a['error']}"))
        elif a["t_ms"] >= t0:
            points.append((a["t_ms"] - t0, f"{a['api']} answered {a['error']}"))
    points.append((held["released_ms"] - t0, "proxy delivers the held request"))
    return sorted(points)


def schedule(runs: Mapping[str, Any]) -> "Figure":
    """One panel per run (label -> ``LateTxnRun``): its ``schedule_points``, one row each, top
    to bottom in time order, x the time; the late answer in red. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    all_points = {label: schedule_points(run) for label, run in runs.items()}
    height = sum(len(p) for p in all_points.values()) * 0.32 + 1.2 * len(runs)
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, height), squeeze=False,
                             gridspec_kw={"height_ratios": [len(p) for p in all_points.values()]})
    for ax, (label, points) in zip(axes[:, 0], all_points.items()):
        ys = list(range(len(points)))[::-1]
        colours = ["tab:red" if text.startswith("late ") else "tab:blue" for _, text in points]
        for (t, _), y, c in zip(points, ys, colours):
            ax.plot([t], [y], marker="o", color=c)
        ax.hlines(ys, 0, [t for t, _ in points], color="lightgrey", lw=0.8)
        ax.set_yticks(ys, [text for _, text in points], fontsize=8)
        for tick, c in zip(ax.get_yticklabels(), colours):
            tick.set_color("tab:red" if c == "tab:red" else "black")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("ms after the proxy held the request (the proxy's clock)")
    fig.tight_layout()
    return fig
