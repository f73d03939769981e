"""Notebook 07's plots, drawn headless (Agg)."""

from __future__ import annotations

from kafkalab.experiments import ordering_plots as op


def test_log_order_names_a_run_that_lies_on_an_earlier_one() -> None:
    import matplotlib

    matplotlib.use("Agg")
    fig = op.log_order({"plain": [1, 2, 0], "one": [0, 1, 2], "idem": [0, 1, 2]})
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == ["plain", "one", "idem (same order as one)"]
    assert len({(line.get_marker(), line.get_linestyle()) for line in ax.lines}) == 3, "each run drawn its own way"
