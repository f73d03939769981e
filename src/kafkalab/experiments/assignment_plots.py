"""Pictures for notebook 01 (partition assignment): who holds which partition, and imbalance heatmaps.

Every function draws with matplotlib, takes an optional ``ax`` (or makes its own figure)
and returns the Axes or Figure, so notebooks can add to it and tests can inspect it with
the headless Agg backend. Nothing here talks to Kafka except ``assignment_explorer``, which
calls the experiment function it is given when its button is pressed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

if TYPE_CHECKING:  # only for type hints; this module must import without a cluster
    import pandas as pd

    from .assignment import AssignmentResult, LeaveResult

#: One color per topic, in order of the topics given to the experiment (A, B, C...).
TOPIC_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
IDLE_COLOR = "#9a9a9a"
HIGHLIGHT_COLOR = "#d62728"


def topic_colors(topics: Sequence[str]) -> dict[str, str]:
    """Given topic name -> color, stable for the order given."""
    return {t: TOPIC_COLORS[i % len(TOPIC_COLORS)] for i, t in enumerate(topics)}


def _label_topic(label: str) -> str:
    """``"A-0"`` -> ``"A"`` (topic names may contain dashes; the partition is after the last)."""
    return label.rsplit("-", 1)[0]


def draw_assignment(result: "AssignmentResult", ax: Axes | None = None, title: str | None = None,
                    highlight: set[str] | None = None, slots: int | None = None) -> Axes:
    """Draw one assignment: one row per member (consumer order, top to bottom), one box per
    partition it holds, colored by topic and labeled ``A-0``; a member with nothing says
    "idle".

    Args:
        result: an ``AssignmentResult`` (uses ``short()``, ``topics``, ``assignor``, ``counts``).
        ax: where to draw; a new figure if None.
        title: default ``"<assignor>: counts [..], imbalance n"``.
        highlight: partition labels (``"A-0"``) to outline in red, e.g. the ones that moved.
        slots: boxes per row the x axis has room for (default: the most any member holds), so
            panels drawn side by side can share one box size.
    Returns:
        The Axes.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 0.55 * len(result.members) + 1.2))
    colors = topic_colors(list(result.topics))
    held = result.short()
    highlight = highlight or set()
    width = max([len(v) for v in held.values()] + [1, slots or 1])
    names = list(held)
    for row, name in enumerate(names):
        y = len(names) - 1 - row
        labels = held[name]
        if not labels:
            ax.text(0.05, y, "idle", va="center", ha="left", color=IDLE_COLOR, style="italic", fontsize=10)
        for j, label in enumerate(labels):
            hot = label in highlight
            ax.add_patch(Rectangle((j + 0.05, y - 0.35), 0.9, 0.7, facecolor=colors.get(_label_topic(label), IDLE_COLOR),
                                   edgecolor=HIGHLIGHT_COLOR if hot else "white", linewidth=3 if hot else 1))
            ax.text(j + 0.5, y, label, ha="center", va="center", color="white", fontsize=9, fontweight="bold")
    ax.set_xlim(0, width)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([f"{n} ({len(held[n])})" for n in reversed(names)])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(title or f"{result.assignor}: counts {result.counts}, imbalance {result.imbalance}", fontsize=10)
    return ax


def draw_assignments(results: Mapping[str, "AssignmentResult"] | Sequence["AssignmentResult"],
                     ncols: int | None = None) -> Figure:
    """Several assignments side by side (e.g. ``assignment.compare(...)``), one panel each.

    Returns:
        The Figure (panels in ``fig.axes``, in the order given).
    """
    items = list(results.values()) if isinstance(results, Mapping) else list(results)
    if not items:
        raise ValueError("nothing to draw: no results")
    ncols = ncols or len(items)
    nrows = -(-len(items) // ncols)
    height = 0.55 * max(len(r.members) for r in items) + 1.3
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, height * nrows), squeeze=False)
    flat = [a for row in axes for a in row]
    slots = max(max(r.counts) for r in items)
    for ax, r in zip(flat, items):
        draw_assignment(r, ax=ax, slots=slots)
    for ax in flat[len(items):]:
        ax.remove()
    fig.tight_layout()
    return fig


def _given_labels(result: "AssignmentResult", partitions) -> set[str]:
    back = {v: k for k, v in result.topic_names.items()}
    return {f"{back.get(t, t)}-{p}" for t, p in partitions}


def draw_leave(leave: "LeaveResult", axes: Sequence[Axes] | None = None) -> Figure:
    """Before and after one member left: two panels; in both, the partitions that changed
    owner are outlined in red. The title says what the members that stayed had to give up.

    Returns:
        The Figure.
    """
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(8, 0.55 * len(leave.before.members) + 1.5))
    else:
        fig = axes[0].figure
    moved = _given_labels(leave.before, leave.moved)
    slots = max(leave.before.counts + leave.after.counts)
    draw_assignment(leave.before, ax=axes[0], highlight=moved, slots=slots, title=f"before: {leave.left} leaves")
    draw_assignment(leave.after, ax=axes[1], highlight=moved, slots=slots,
                    title=f"after: {len(leave.moved)} moved, {leave.revoked_from_survivors} revoked from survivors")
    fig.suptitle(leave.assignor, fontsize=11)
    fig.tight_layout()
    return fig


def imbalance_heatmap(table: "pd.DataFrame", ax: Axes | None = None, title: str = "imbalance (max - min partitions per member)",
                      cmap: str = "Reds", vmax: float | None = None) -> Axes:
    """A heatmap of a small table (rows: assignors, columns: cases), every cell annotated.

    Args:
        table: a pandas DataFrame of numbers, index = row labels, columns = column labels
            (``assignment_analysis.imbalance_pivot`` makes one). Missing cells (NaN) stay blank.
        ax: where to draw; a new figure if None.
        vmax: top of the color scale; default the table's maximum (at least 1).
    Returns:
        The Axes (the image is ``ax.images[0]``).
    """
    import numpy as np

    values = table.to_numpy(dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.85 * values.shape[1] + 2.8, 0.5 * values.shape[0] + 1.6))
    top = vmax if vmax is not None else max(1.0, float(np.nanmax(values)) if values.size else 1.0)
    ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0, vmax=top, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values[i, j]
            if not np.isnan(v):
                ax.text(j, i, f"{v:g}", ha="center", va="center", fontsize=9,
                        color="white" if v > top * 0.6 else "black")
    ax.set_xticks(range(values.shape[1]))
    ax.set_xticklabels([str(c) for c in table.columns], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(values.shape[0]))
    ax.set_yticklabels([str(i) for i in table.index], fontsize=9)
    ax.set_title(title, fontsize=10)
    return ax


def assignment_explorer(run: Callable[..., "AssignmentResult"] | None = None, consumers: int = 3, topics: int = 2,
                        partitions: int = 2, assignor: str = "range", render: bool = True):
    """An ipywidgets control to try a configuration on the live cluster: sliders for consumers
    (1-8), topics (1-3) and partitions per topic (1-8), a dropdown for the assignor, and a
    button that runs it once and draws the result.

    Nothing runs while sliders move (``interactive`` in manual mode); with ``render=True``
    the default configuration runs once now so the notebook shows a picture. The last
    ``AssignmentResult`` is ``widget.result``.

    Args:
        run: ``run(consumers, {"A": p, ...}, assignor) -> AssignmentResult``; default
            ``kafkalab.experiments.assignment.run_assignment``.
    Returns:
        The ``ipywidgets.interactive`` widget (display it, or leave it last in a cell).
    """
    import ipywidgets as widgets

    from .assignment import DEFAULT_LABELS, LABELS

    if run is None:
        from .assignment import run_assignment as run

    def show(consumers: int, topics: int, partitions: int, assignor: str):
        result = run(consumers, {chr(ord("A") + i): partitions for i in range(topics)}, assignor)
        draw_assignment(result)
        plt.show()
        return result

    w = widgets.interactive(
        show, {"manual": True, "manual_name": "Run on the cluster"},
        consumers=widgets.IntSlider(value=consumers, min=1, max=8, description="consumers"),
        topics=widgets.IntSlider(value=topics, min=1, max=3, description="topics"),
        partitions=widgets.IntSlider(value=partitions, min=1, max=8, description="partitions/topic"),
        assignor=widgets.Dropdown(options=list(LABELS + DEFAULT_LABELS), value=assignor, description="assignor"),
    )
    if render:
        w.update()
    return w
