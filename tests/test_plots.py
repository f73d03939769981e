"""kafkalab.experiments.assignment_plots, drawn headless (Agg): the pictures hold what the results say."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from kafkalab.experiments import assignment_plots as plots  # noqa: E402
from kafkalab.experiments import assignment as A  # noqa: E402


def result(held: dict[str, list[str]], topics: dict[str, int], assignor: str = "range") -> A.AssignmentResult:
    names = A.topic_names(topics, "kl-rplot")
    members = [A.Member(n, f"{n}-id", None,
                        sorted((names[x.rsplit("-", 1)[0]], int(x.rsplit("-", 1)[1])) for x in labels))
               for n, labels in held.items()]
    return A.AssignmentResult("g", assignor, dict(topics), names, members, 1)


ARTICLE = {"consumer-0": ["A-0", "B-0"], "consumer-1": ["A-1", "B-1"], "consumer-2": []}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def boxes(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def test_draw_assignment_draws_one_box_per_partition_colored_by_topic_and_marks_idle() -> None:
    ax = plots.draw_assignment(result(ARTICLE, {"A": 2, "B": 2}))
    assert len(boxes(ax)) == 4
    colors = {matplotlib.colors.to_hex(b.get_facecolor()) for b in boxes(ax)}
    assert colors == {plots.TOPIC_COLORS[0], plots.TOPIC_COLORS[1]}
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("idle") == 1
    assert {"A-0", "B-1"} <= set(texts)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["consumer-2 (0)", "consumer-1 (2)", "consumer-0 (2)"]
    assert "imbalance 2" in ax.get_title()


def test_draw_assignment_outlines_highlighted_partitions() -> None:
    ax = plots.draw_assignment(result(ARTICLE, {"A": 2, "B": 2}), highlight={"A-1"})
    red = [b for b in boxes(ax) if matplotlib.colors.to_hex(b.get_edgecolor()) == plots.HIGHLIGHT_COLOR]
    assert len(red) == 1


def test_draw_assignments_makes_one_panel_per_result() -> None:
    r = result(ARTICLE, {"A": 2, "B": 2})
    fig = plots.draw_assignments({"range": r, "roundrobin": r, "x": r}, ncols=2)
    assert len(fig.axes) == 3
    with pytest.raises(ValueError):
        plots.draw_assignments([])


def test_draw_leave_has_before_and_after_and_outlines_moved_partitions() -> None:
    topics = {"A": 2, "B": 2}
    before = result(ARTICLE, topics)
    after = result({"consumer-1": ["A-0", "B-0"], "consumer-2": ["A-1", "B-1"]}, topics)
    n = before.topic_names
    leave = A.LeaveResult("range", before, after, "consumer-0", [(n["A"], 0), (n["B"], 0)], 0)
    fig = plots.draw_leave(leave)
    assert len(fig.axes) == 2
    red = [b for ax in fig.axes for b in boxes(ax)
           if matplotlib.colors.to_hex(b.get_edgecolor()) == plots.HIGHLIGHT_COLOR]
    assert len(red) == 4, "A-0 and B-0 outlined before and after"
    assert "0 revoked from survivors" in fig.axes[1].get_title()


def test_imbalance_heatmap_annotates_every_value_and_leaves_missing_cells_blank() -> None:
    table = pd.DataFrame([[1, 2, 3], [1, 1, np.nan]], index=["range", "roundrobin"], columns=["T1", "T2", "T3"])
    ax = plots.imbalance_heatmap(table)
    assert sorted(t.get_text() for t in ax.texts) == ["1", "1", "1", "2", "3"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["range", "roundrobin"]
    assert ax.images[0].get_array().shape == (2, 3)


def test_explorer_runs_the_default_once_and_nothing_until_the_button() -> None:
    calls = []

    def fake_run(consumers, topics, assignor):
        calls.append((consumers, topics, assignor))
        return result(ARTICLE, topics, assignor)

    w = plots.assignment_explorer(run=fake_run)
    assert calls == [(3, {"A": 2, "B": 2}, "range")]
    assert w.result.idle == 1
    w.kwargs_widgets[0].value = 5  # moving a slider runs nothing
    assert len(calls) == 1
    quiet = plots.assignment_explorer(run=fake_run, render=False)
    assert len(calls) == 1 and quiet.result is None


def test_panels_side_by_side_share_one_box_size() -> None:
    small = result({"c0": ["A-0"], "c1": ["A-1"]}, {"A": 2})
    big = result({"c0": ["A-0", "A-1", "A-2"], "c1": []}, {"A": 3})
    fig = plots.draw_assignments([small, big])
    assert [ax.get_xlim()[1] for ax in fig.axes] == [3, 3]
    assert plots.draw_assignment(small, slots=5).get_xlim()[1] == 5


def test_the_performance_summary_has_a_panel_per_run_each_on_its_own_linear_axis() -> None:
    from types import SimpleNamespace as NS

    from kafkalab.experiments import performance_plots as pp

    clients = [NS(python_records_per_s=2e5, java_records_per_s=9e4)] * 3
    batching = [NS(label="linger.ms=0", ack_p50_ms=3.2, records=2000, rate=2000)]
    codecs = [NS(codec="none", bytes_on_disk_per_record=260, records=10000)]
    acks = [NS(acks="0", records=100, ack_p50_ms=0.1, ack_p99_ms=0.2), NS(acks="all", records=100, ack_p50_ms=3, ack_p99_ms=9)]
    txn = [NS(records_per_transaction=10, records_per_s=900)]
    lat = NS(runs=[NS(label="defaults", records=200, rate=100, p50_ms=3, p99_ms=15, max_ms=30)])
    reads = NS(messages=2000, record_size=1000, rows=[NS(max_partition_fetch_bytes=1000, python=NS(records_per_s=3e3),
                                                         java=None)])
    panels = pp.summary_panels(clients, batching, codecs, acks, txn, lat, reads, 50_000, 100)
    assert len(panels) == 7
    assert panels[3].rows == {"acks=all": {"p50": 3, "p99": 9}}, "acks=0 has no ack to time"
    assert "no ack to time" in panels[3].notes["acks=0"], "the panel says why acks=0 has no bar"
    numbers = [p.title.split(" ")[0] for p in panels]
    assert numbers == ["1.", "2.", "3.", "4a.", "4b.", "5a.", "5b."], "each panel numbered once, by its section"
    assert panels[5].series() == ["p50", "p99", "max"], "each percentile named"
    fig = pp.summary(panels)
    drawn = [ax for ax in fig.axes if ax.has_data()]
    assert len(drawn) == 7 and all(ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0 for ax in drawn)
    assert any("no ack to time" in t.get_text() for t in drawn[3].texts), "the note is drawn in the acks panel"
    with pytest.raises(ValueError):
        pp.summary([pp.Panel("empty", "ms")])
