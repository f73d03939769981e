"""Notebook 12's pure logic: counting by id (lost, unexpected, duplicates), the requests a
restarted service gets, records/s, the instruments' crash point, and the CLI's wiring."""

from __future__ import annotations

import json

import pytest

from kafkalab.experiments import outbox as ob
from kafkalab.instruments import outbox as instruments


def test_count_finds_the_lost_the_unexpected_and_every_extra_copy() -> None:
    c = ob.count(["o1", "o2", "o3", "o3"], ["o1", "o1", "o1", "o2", "ghost"])
    assert (c.expected, c.seen) == (3, 5)
    assert c.lost == ["o3"] and c.unexpected == ["ghost"]
    assert c.repeated == {"o1": 2} and c.duplicates == 2, "an id seen three times is two duplicates"


def test_count_of_a_clean_run_is_all_zero() -> None:
    assert ob.count(["a", "b"], ["b", "a"]).row() == {"expected": 2, "seen": 2, "lost": 0, "unexpected": 0,
                                                      "duplicates": 0}


def test_a_restarted_service_gets_the_requests_after_the_one_it_died_in() -> None:
    reqs = ob.make_requests(5)
    assert [r[0] for r in ob.rest_of(reqs, 3)] == ["order-0004", "order-0005"]
    assert ob.rest_of(reqs, 5) == [] and ob.rest_of(reqs, 0) == reqs
    with pytest.raises(ValueError):
        ob.rest_of(reqs, 6)


def test_requests_are_the_same_every_run() -> None:
    assert ob.make_requests(3) == ob.make_requests(3) == [["order-0001", 38], ["order-0002", 75], ["order-0003", 15]]


def test_rate_is_records_per_second_and_zero_without_time() -> None:
    assert ob.rate(1000, 0, 500) == 2000.0
    assert ob.rate(10, 5, 5) == 0.0


def test_an_outcome_counts_what_it_holds() -> None:
    o = ob.Outcome("relay @ after-delivery", "relay", "after-delivery", 2, "t", "db", "", ["a", "b"], ["a", "a", "b"])
    assert o.row()["duplicates"] == 1 and o.to_json()["counts"]["lost"] == 0
    assert json.dumps(o.to_json())


def test_the_end_to_end_counts_events_and_side_effects_apart() -> None:
    e = ob.EndToEnd(ob.END_TO_END_CRASHES, ["a", "b"], ["a", "a", "b"], ["a", "b"], 3)
    assert e.topic_counts.duplicates == 1 and e.applied.row()["duplicates"] == 0
    assert json.loads(json.dumps(e.to_json()))["applied"]["lost"] == 0


def test_every_crash_of_the_table_is_a_known_point() -> None:
    assert {point for *_, point, _ in ob.CRASH_TABLE} <= set(instruments.CRASH_POINTS)
    assert {point for point, _ in ob.END_TO_END_CRASHES.values()} <= set(instruments.CRASH_POINTS)
    with pytest.raises(ValueError):
        ob.run_dual_write(ob.notebook_program("dual_write"), "after-lunch")


def test_the_notebook_has_every_program_the_experiment_runs() -> None:
    for name in ob.PROGRAMS:
        assert ob.notebook_program(name).name == name


def test_options_refuse_an_unknown_crash_point_and_a_passage_below_one() -> None:
    with pytest.raises(ValueError, match="crash_point"):
        instruments.OutboxOptions(crash_point="after-lunch")
    with pytest.raises(ValueError, match="crash_after"):
        instruments.OutboxOptions(crash_point="after-mark", crash_after=0)


class _Spec:
    def __init__(self, tmp_path, **options):
        self.name, self.conf, self.topics, self.run_id = "p", {}, ["t"], "r1"
        self.ledger, self.options = str(tmp_path / "p.jsonl"), options


def test_the_crash_point_fires_on_its_passage_only(tmp_path, monkeypatch) -> None:
    """The ``crash_after``-th passage of the run's point kills the process (``ledger.crash``);
    other points and earlier passages do nothing."""
    died = []
    monkeypatch.setattr(instruments, "crash", lambda ledger: died.append(dict(lab.reached)))
    lab = instruments.OutboxLab(_Spec(tmp_path, crash_point="after-delivery", crash_after=2))
    lab.crash_point("after-delivery")
    lab.crash_point("after-mark")
    assert died == []
    lab.crash_point("after-delivery")
    assert died == [{"after-delivery": 2, "after-mark": 1}]
    with pytest.raises(ValueError):
        lab.crash_point("somewhere")
    lab.close()


def test_requests_are_handed_over_in_order_and_written_to_the_ledger(tmp_path) -> None:
    from kafkalab.ledger import read_events

    lab = instruments.OutboxLab(_Spec(tmp_path, requests=[["order-0001", 5], ["order-0002", 7]]))
    assert list(lab.requests()) == [("order-0001", 5), ("order-0002", 7)]
    lab.close()
    assert [e.value for e in read_events(tmp_path / "p.jsonl", kinds="consumed")] == ["order-0001", "order-0002"]


def test_the_anomaly_plot_has_a_bar_per_run_and_kind_and_labels_what_is_not_zero() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from kafkalab.experiments import outbox_plots

    table = {"dual_write @ after-db-commit": {"lost": 1, "unexpected": 0, "duplicates": 0},
             "relay @ after-delivery": {"lost": 0, "unexpected": 0, "duplicates": 20}}
    fig = outbox_plots.anomalies(table, title="t")
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * len(outbox_plots.KINDS)
    assert sorted(t.get_text() for t in ax.texts) == ["1 lost", "20 duplicates"], "only the counts that are not 0 are written"
    assert [t.get_text() for t in ax.get_yticklabels()] == list(table)


def test_latency_is_from_the_request_to_the_first_copy_of_its_event() -> None:
    handed = {"a": 100, "b": 100, "c": 100}
    events = [{"event_id": "a", "timestamp_ms": 190}, {"event_id": "a", "timestamp_ms": 103},
              {"event_id": "b", "timestamp_ms": 150}, {"event_id": "x", "timestamp_ms": 150}]
    assert ob.latencies_ms(handed, events) == [3, 50], "a's first copy counts; x had no request; c no event"
