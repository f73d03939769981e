"""kafkalab.experiments.assignment_analysis on planted ledgers: the Spark rules flag exactly
the planted violations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkalab.experiments import assignment_analysis as AA

pytestmark = pytest.mark.spark


def plant(path: Path, cases: list[tuple[str, int, int, int, list[int]]]) -> Path:
    """One ledger line per member: (assignor, consumers, topics, partitions, counts)."""
    with open(path, "w") as f:
        for i, (assignor, c, t, p, counts) in enumerate(cases):
            for j, n in enumerate(counts):
                f.write(json.dumps({"assignor": assignor, "consumers": c, "topics": t, "partitions": p,
                                    "member": f"consumer-{j}", "assigned": n, "group_id": f"g{i}",
                                    "elapsed_ms": 1000 + i}) + "\n")
    return path


GOOD = [
    ("range", 3, 1, 2, [1, 1, 0]),
    ("range", 3, 2, 2, [2, 2, 0]),         # the article's example
    ("range", 3, 3, 4, [6, 3, 3]),         # imbalance = topics
    ("roundrobin", 3, 2, 2, [2, 1, 1]),
    ("roundrobin", 3, 3, 2, [2, 2, 2]),
    ("consumer/uniform", 3, 2, 2, [1, 1, 2]),
    ("consumer/range", 3, 2, 3, [2, 2, 2]),
]


def test_per_case_computes_imbalance_idle_and_totals(spark, tmp_path: Path) -> None:
    cases = AA.per_case(AA.read_sweep(spark, plant(tmp_path / "s.jsonl", GOOD)))
    got = {r["group_id"]: r for r in cases.collect()}  # 7 rows
    assert (got["g1"]["imbalance"], got["g1"]["idle"], got["g1"]["total"], got["g1"]["members"]) == (2, 1, 4, 3)
    assert got["g2"]["imbalance"] == 3 and got["g2"]["case"] == "C3 T3xP4"
    assert got["g4"]["imbalance"] == 0 and got["g4"]["idle"] == 0


def test_good_cases_break_no_rule(spark, tmp_path: Path) -> None:
    cases = AA.per_case(AA.read_sweep(spark, plant(tmp_path / "s.jsonl", GOOD)))
    assert AA.violations(cases).count() == 0


def test_each_planted_violation_is_flagged(spark, tmp_path: Path) -> None:
    bad = [
        ("cooperative-sticky", 3, 2, 2, [3, 1, 0]),   # unbalanced
        ("range", 3, 2, 2, [2, 1, 1]),                # not what range does
        ("roundrobin", 3, 2, 2, [2, 1]),              # a member row is missing
        ("consumer/uniform", 3, 2, 2, [2, 1, 0]),     # a partition unassigned
    ]
    cases = AA.per_case(AA.read_sweep(spark, plant(tmp_path / "s.jsonl", GOOD + bad)))
    flagged = sorted(r["group_id"] for r in AA.violations(cases).select("group_id").collect())
    assert flagged == ["g10", "g7", "g8", "g9"]


def test_a_malformed_line_fails_the_read(spark, tmp_path: Path) -> None:
    path = plant(tmp_path / "s.jsonl", GOOD[:1])
    with open(path, "a") as f:
        f.write('{"assignor": "range", "consumers": "three"}\n')
    with pytest.raises(Exception):
        AA.read_sweep(spark, path).collect()


def test_pivots_for_the_heatmap_and_topic_growth(spark, tmp_path: Path) -> None:
    rows = [("range", 3, t, 2, [t, t, 0]) for t in (1, 2, 3)] + [("roundrobin", 3, t, 2, rr)
            for t, rr in ((1, [1, 1, 0]), (2, [2, 1, 1]), (3, [2, 2, 2]))]
    cases = AA.per_case(AA.read_sweep(spark, plant(tmp_path / "s.jsonl", rows)))
    table = AA.imbalance_pivot(cases)
    assert list(table.index) == ["range", "roundrobin"]
    assert list(table.columns) == ["C3 T1xP2", "C3 T2xP2", "C3 T3xP2"]
    assert table.loc["range"].tolist() == [1, 2, 3]
    growth = AA.by_topic_count(cases)
    assert growth.loc[("range", 3, 2)].tolist() == [1, 2, 3]
    assert growth.loc[("roundrobin", 3, 2)].tolist() == [1, 1, 0]
    idle = AA.imbalance_pivot(cases, "idle")
    assert idle.loc["range"].tolist() == [1, 1, 1], "range leaves C - P members idle whatever the topic count"
    both = AA.pivots(cases)
    assert both["imbalance"].equals(table) and both["idle"].equals(idle), "one pivot gives the same tables"
    summary = AA.by_assignor(cases)
    assert summary.loc["range", "worst_imbalance"] == 3 and summary.loc["roundrobin", "runs"] == 3


def test_warm_up_runs_the_per_case_query_in_the_background_start(spark) -> None:
    from kafkalab import spark as kspark

    started = kspark.session_in_background("kafkalab-tests", AA.warm_up).result(timeout=120)
    assert started is spark, "getOrCreate: the process's one session"
