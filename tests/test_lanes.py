"""tests/lanes.py's schedule and benchmarks/test_times.py's budget report, on planted JUnit reports."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import lanes

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.test_cli" name="test_a" time="3.5"/>
  <testcase classname="tests.test_cli" name="test_b" time="1.5"/>
  <testcase classname="notebooks.01_partition_assignment.ipynb" name="Cell 0" time="40.0"/>
  <testcase classname="notebooks.01_partition_assignment.ipynb" name="Cell 1" time="60.0"/>
  <testcase classname="notebooks.solutions.03_offset_commit_solutions.ipynb" name="Cell 0" time="20.0"/>
</testsuite></testsuites>
"""
ROOT = Path(__file__).resolve().parent.parent


def plant(root: Path) -> Path:
    report = root / lanes.LAST_REPORT
    report.parent.mkdir(parents=True)
    report.write_text(REPORT)
    return report


def test_seconds_and_tests_are_summed_per_file(tmp_path: Path) -> None:
    seconds, tests = lanes.per_file(plant(tmp_path))
    assert seconds["notebooks/01_partition_assignment.ipynb"] == 100.0
    assert seconds["notebooks/solutions/03_offset_commit_solutions.ipynb"] == 20.0
    assert (seconds["tests/test_cli.py"], tests["tests/test_cli.py"]) == (5.0, 2)


def test_the_last_report_overrides_the_committed_table_file_by_file(tmp_path: Path) -> None:
    plant(tmp_path)
    cost = lanes.costs(tmp_path)
    assert cost["notebooks/01_partition_assignment.ipynb"] == 100.0, "the last run's seconds win"
    untouched = next(f for f in lanes.COSTS_S if f not in lanes.per_file(tmp_path / lanes.LAST_REPORT)[0])
    assert cost[untouched] == lanes.COSTS_S[untouched], "a file the report lacks keeps the table's figure"


def test_without_a_readable_report_the_table_orders_the_files(tmp_path: Path) -> None:
    assert lanes.costs(tmp_path) == lanes.COSTS_S
    (tmp_path / lanes.LAST_REPORT).parent.mkdir(parents=True)
    (tmp_path / lanes.LAST_REPORT).write_text("<testsuites><testsuite")  # a run killed while writing it
    assert lanes.costs(tmp_path) == lanes.COSTS_S


def test_the_budget_report_marks_the_notebooks_over_budget(tmp_path: Path, monkeypatch, capsys) -> None:
    report = plant(tmp_path)
    script = ROOT / "benchmarks" / "test_times.py"
    # as `python benchmarks/test_times.py ...` runs it (.ci/run), in this process
    monkeypatch.setattr(sys, "argv", [str(script), str(report), "--slowest", "2", "--budget", "90"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts tests/ on it
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| notebooks") or line.startswith("| tests")]
    assert rows[0].startswith("| notebooks/01_partition_assignment.ipynb | 2 | 100.0 | OVER"), out
    assert rows[1].startswith("| notebooks/solutions/03_offset_commit_solutions.ipynb | 1 | 20.0 | ok"), out
    assert len(rows) == 2, "only the 2 slowest files are listed"
    assert "1 notebook(s) over it" in out


def test_the_spark_connect_port_lies_between_two_lanes_clusters(monkeypatch) -> None:
    from kafkalab import config

    monkeypatch.delenv("KAFKALAB_PORT_BASE", raising=False)
    nodes = [config.Node(i, "broker") for i in (1, 2, 3)] + [config.Node(i, "controller") for i in (101, 102, 103)]
    highest = max([p for n in nodes for p in n.ports.values()] + [n.fault_proxy_port for n in nodes if n.role == "broker"])
    offset = highest - config.port_base()
    assert offset < lanes.SPARK_CONNECT_PORT_OFFSET < lanes.LANE_PORT_STEP, (
        f"a cluster uses its base .. base + {offset}: the Spark Connect server at base + "
        f"{lanes.SPARK_CONNECT_PORT_OFFSET} must lie above that and below the next lane's base")


def test_a_lane_knows_an_older_kafkas_format_when_kafkalab_up_reports_it() -> None:
    """A lane wipes its own state when ``kafkalab up`` says an older Kafka formatted it (the lane's
    state holds only earlier test runs); it recognises that by ``STALE_FORMAT`` in the message."""
    from kafkalab import cluster

    assert lanes.STALE_FORMAT in cluster.stale_features({"share.version": 1})
    assert cluster.stale_features(dict(cluster.FORMAT_FEATURES)) is None
