"""Notebook 05's plots, drawn headless (Agg)."""

from __future__ import annotations

from kafkalab.experiments import transactions_plots as tp


def test_throughput_plot_draws_the_sizes_and_the_baseline() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    table = pd.DataFrame({"records_per_txn": [None, 1, 10, 100], "records_per_s": [5000.0, 80.0, 700.0, 4000.0]})
    ax = tp.plot_throughput(table)
    assert list(ax.lines[0].get_xdata()) == [1, 10, 100]
    assert ax.get_xscale() == "log" and len(ax.lines) == 2
    assert ax.get_yscale() == "log", "the rates span orders of magnitude: on a linear axis the small ones lie on zero"
    assert [t.get_text() for t in ax.texts] == ["80", "700", "4,000"], "each point labelled with its rate"
