"""Pictures for notebook 05 (transactions), drawn with matplotlib: each function takes an
optional ``ax`` (or makes its own figure) and returns the Axes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes


def plot_throughput(table: "pd.DataFrame", ax: "Axes | None" = None) -> "Axes":
    """Records/s against records per transaction, with the non-transactional baseline as a
    dashed line. Both axes are logarithmic: the rates span orders of magnitude, and the point is
    how they grow with the transaction's size; each point is labelled with its value.

    Args:
        table: columns ``records_per_txn`` (None or NaN for the baseline row), ``records_per_s``.
        ax: where to draw; a new figure if None.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.2))
    txn = table[table["records_per_txn"].notna()]
    base = table[table["records_per_txn"].isna()]
    ax.plot(txn["records_per_txn"], txn["records_per_s"], marker="o", label="transactional")
    for x, y in zip(txn["records_per_txn"], txn["records_per_s"]):
        ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    for v in base["records_per_s"]:
        ax.axhline(v, linestyle="--", color="gray", label=f"idempotent, no transactions ({v:,.0f})")
    ax.set_xscale("log")
    ax.set_yscale("log")  # on a linear axis the small transactions' rates lie flat on zero
    ax.margins(x=0.1)
    ax.set_xlabel("records per transaction")
    ax.set_ylabel("records/s (measured, log scale)")
    ax.set_title("Throughput of one librdkafka producer")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=8, frameon=False)
    return ax
