"""kafkalab.experiments.late_txn_plots, drawn headless (Agg), on a planted run."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from kafkalab.experiments import late_txn_plots as plots  # noqa: E402

RUN = SimpleNamespace(
    held={"api": "EndTxn", "api_version": 1, "held_ms": 1000.0, "client_closed_ms": 3010.0, "released_ms": 3600.0},
    txn_answers=[{"api": "AddPartitionsToTxn", "error": "NONE", "action": "forwarded", "t_ms": 900.0},
                 {"api": "EndTxn", "error": "NONE", "action": "forwarded", "t_ms": 3200.0},
                 {"api": "EndTxn", "error": "NONE", "action": "released", "t_ms": 3605.0}])


def test_schedule_points_start_at_the_held_request_and_end_with_the_late_answer() -> None:
    points = plots.schedule_points(RUN)
    assert points[0] == (0.0, "EndTxn v1 of N held")
    assert [t for t, _ in points] == sorted(t for t, _ in points) and points[-1] == (2605.0, "late EndTxn answered NONE")
    assert (2010.0, "client closes the connection") in points and (2200.0, "EndTxn answered NONE") in points
    assert not any("AddPartitionsToTxn" in text for _, text in points), "answers before the hold are left out"


def test_schedule_draws_one_panel_per_run_and_one_row_per_point() -> None:
    fig = plots.schedule({"librdkafka": RUN, "java": RUN})
    assert [ax.get_title() for ax in fig.axes] == ["librdkafka", "java"]
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert sorted(labels) == sorted(text for _, text in plots.schedule_points(RUN))
        assert sum(1 for line in ax.lines if line.get_marker() == "o") == len(labels)
    plt.close(fig)
