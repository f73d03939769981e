"""The ``kafkalab`` command line: the notebooks' twin for instructors at a terminal."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_unknown_experiment_option_is_a_usage_error() -> None:
    r = invoke("run", "assignment", "--consumers", "2", "--topic", "A:2", "--bogus")
    assert r.exit_code == 2 and "No such option: --bogus" in r.output


def test_topic_needs_a_partition_count() -> None:
    r = invoke("run", "assignment", "--consumers", "2", "--topic", "A")
    assert r.exit_code == 2 and "NAME:PARTITIONS" in r.output


def test_strategy_and_remote_assignor_do_not_mix() -> None:
    r = invoke("run", "assignment", "--consumers", "2", "--topic", "A:2", "--strategy", "range",
               "--group-protocol", "consumer")
    assert r.exit_code == 2 and "--remote-assignor" in r.output


def test_unknown_node_is_one_line_and_exit_1() -> None:
    r = invoke("kill", "9")
    assert r.exit_code == 1 and "no node 9" in r.output and "Traceback" not in r.output


def test_tool_list_names_kafkas_scripts() -> None:
    r = invoke("tool", "list")
    assert r.exit_code == 0
    assert "kafka-dump-log" in r.output and "org.apache.kafka.tools.DumpLogSegments" in r.output


@pytest.mark.cluster
def test_status_json_has_brokers_controllers_and_bootstrap() -> None:
    d = json.loads(invoke("status", "--json").output)
    assert set(d) >= {"brokers", "controllers", "bootstrap_servers", "kafka_version"}
    assert all(b["alive"] for b in d["brokers"].values())


@pytest.mark.cluster
def test_run_assignment_json_reproduces_the_articles_range_example() -> None:
    r = invoke("run", "assignment", "--consumers", "3", "--topic", "A:2", "--topic", "B:2",
               "--strategy", "range", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    members = d["members"]
    assert len(members) == 3
    assert all(set(m) >= {"member_id", "group_instance_id", "partitions"} for m in members)
    assert all(t.endswith(("-A", "-B")) for m in members for t, _ in m["partitions"])
    assert sorted(len(m["partitions"]) for m in members) == [0, 2, 2], "range leaves one of 3 consumers idle"


@pytest.mark.cluster
def test_run_assignment_with_kip848_uniform_assignor_balances() -> None:
    r = invoke("run", "assignment", "--consumers", "3", "--topic", "A:2", "--topic", "B:2",
               "--group-protocol", "consumer", "--remote-assignor", "uniform", "--json")
    assert r.exit_code == 0, r.output
    counts = sorted(len(m["partitions"]) for m in json.loads(r.output)["members"])
    assert counts == [1, 1, 2]
