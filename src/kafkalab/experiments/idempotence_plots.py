"""Plots of notebook 04 (the idempotent producer). Plotting only: no claim lives here.

``retry_timeline``: each producer configuration's Produce attempts against a blackholed
broker and the moment its delivery report failed. ``throughput``: records/s of each burst
with and without idempotence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..producers import ProgramBurst
    from .idempotence import RetryTimeline


def retry_timeline(timeline: "RetryTimeline", ax: "Axes | None" = None) -> "Axes":
    """One row per configuration: a dot per Produce attempt (ms since ``produce``), a cross
    where the delivery report arrived with its error, and the delivery timeout as a line."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.8 + 0.7 * len(timeline.producers)))
    names = list(timeline.producers)
    for y, name in enumerate(names):
        p = timeline.producers[name]
        ax.scatter([a.t_ms for a in p.attempts], [y] * len(p.attempts), marker="o", s=60, color="tab:blue",
                   label="Produce attempt (seen by the proxy)" if y == 0 else None, zorder=3)
        if p.report_ms is not None:
            ax.scatter([p.report_ms], [y], marker="x", s=80, color="tab:red",
                       label="delivery report (error)" if y == 0 else None, zorder=3)
            ax.annotate(p.error or "ok", (p.report_ms, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
        timeout = p.conf.get("message.timeout.ms") or p.conf.get("delivery.timeout.ms")
        if timeout:
            ax.plot([timeout, timeout], [y - 0.3, y + 0.3], color="grey", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlabel("ms since produce()")
    ax.set_title("Producer against a blackholed broker (dashed: message.timeout.ms)")
    # below the axes: inside, it covered the last row's attempts and its delivery report
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return ax


def throughput(bursts: Iterable["ProgramBurst"]) -> "Figure":
    """Records/s of each burst (``producers.ProgramBurst``): one panel per
    ``batch.num.messages`` the program wrote, each on its own linear axis from 0 so that the
    on/off ratio reads as bar heights; ``enable.idempotence`` off grey, on green, in the order
    they ran. Returns the figure."""
    import matplotlib.pyplot as plt

    bursts = list(bursts)
    groups: dict[str, list] = {}
    for b in bursts:
        groups.setdefault(f"batch.num.messages={b.settings.get('batch.num.messages', 'default')}", []).append(b)
    fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3), squeeze=False)
    for ax, (batching, group) in zip(axes[0], groups.items()):
        rounds = {False: 0, True: 0}
        labels = []
        on = [bool(b.settings.get("enable.idempotence")) for b in group]
        for o in on:
            rounds[o] += 1
            labels.append(f"{'on' if o else 'off'} #{rounds[o]}")
        ax.bar(range(len(group)), [b.records_per_s for b in group],
               color=["tab:green" if o else "tab:grey" for o in on])
        ax.set_xticks(range(len(group)), labels, fontsize=8)
        ax.set_ylim(0, None)
        ax.set_title(batching, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("records/s")
    fig.suptitle("enable.idempotence off (grey) / on (green), same run; each panel its own scale", fontsize=9)
    fig.tight_layout()
    return fig
