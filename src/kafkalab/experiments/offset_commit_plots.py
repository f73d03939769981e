"""Charts of notebook 03: lost and duplicated records, and records/s, per commit mode.

Plotting only: the numbers come from ``offset_commit`` / ``offset_commit_analysis``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Bar colours: lost writes red, duplicates amber, throughput grey-blue.
COLORS = {"lost": "#c0392b", "duplicates": "#e6a23c", "records_per_s": "#5b7c99"}


def _rows(table: Any) -> list[Mapping[str, Any]]:
    """Rows as dicts, from a pandas DataFrame or an iterable of mappings."""
    if hasattr(table, "to_dict"):
        return table.to_dict("records")
    return [dict(r) for r in table]


def plot_outcomes(table: Any, title: str | None = None) -> "Figure":
    """Two panels: lost and duplicated records per mode (grouped bars, counts written on
    the bars), and the restarted consumer's records/s per mode on a linear axis, so that a
    ratio near 1 looks like one.

    Args:
        table: pandas DataFrame or iterable of mappings with columns ``mode``, ``lost``,
            ``duplicates``, ``records_per_s`` (None/NaN drawn as no bar).
        title: figure title.

    Returns:
        The matplotlib ``Figure`` (not shown; a notebook displays it).

    Raises:
        ValueError: ``table`` is empty or lacks a column.
    """
    import math

    import matplotlib.pyplot as plt

    rows = _rows(table)
    if not rows:
        raise ValueError("nothing to plot: the table is empty")
    missing = {"mode", "lost", "duplicates", "records_per_s"} - set(rows[0])
    if missing:
        raise ValueError(f"the table lacks columns {sorted(missing)}")
    modes = [str(r["mode"]) for r in rows]
    xs = range(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2), constrained_layout=True)
    width = 0.4
    for shift, col in ((-width / 2, "lost"), (width / 2, "duplicates")):
        values = [int(r[col]) for r in rows]
        bars = ax1.bar([x + shift for x in xs], values, width, label=col, color=COLORS[col])
        ax1.bar_label(bars, labels=[str(v) for v in values], fontsize=8)
    ax1.set_ylabel("records")
    ax1.set_title("after a crash and a restart")
    ax1.legend(["lost (never processed)", "duplicates (processed again)"], fontsize=8)
    rates = []
    for r in rows:
        v = r["records_per_s"]
        rates.append(float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else 0.0)
    bars = ax2.bar(list(xs), rates, 0.6, color=COLORS["records_per_s"])
    ax2.bar_label(bars, labels=[f"{v:.0f}" if v else "n/a" for v in rates], fontsize=8)
    ax2.set_ylabel("records/s")
    ax2.set_title("restarted consumer draining, no simulated work")
    for ax in (ax1, ax2):
        ax.set_xticks(list(xs), modes, rotation=25, ha="right", fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def outcome_rows(results: Iterable[Any]) -> list[dict[str, Any]]:
    """``OffsetCommitResult.row()`` of each result, for ``plot_outcomes`` and tables."""
    return [r.row() for r in results]
