"""Pictures for notebook 05 (transactions), drawn with matplotlib: each function takes an
optional ``ax`` (or makes its own figure) and returns the Axes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes


def plot_throughput(table: "pd.DataFrame", ax: "Axes | None" = None) -> "Axes":
    """Records/s against records per transaction (log x axis), with the non-transactional
    baseline as a dashed line.

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
    for v in base["records_per_s"]:
        ax.axhline(v, linestyle="--", color="gray", label="idempotent, no transactions")
    ax.set_xscale("log")
    ax.set_xlabel("records per transaction")
    ax.set_ylabel("records/s (measured)")
    ax.set_title("Throughput of one librdkafka producer")
    ax.legend(loc="lower right")
    return ax
