"""kafkalab.versions: what the setup cells compare with the versions the notebooks were checked on."""

from __future__ import annotations

import pytest

from kafkalab import config, versions
from kafkalab.cluster import ClusterStatus, NodeStatus
from kafkalab.errors import KafkalabError

LINE = "[2026-11-25 07:37:59,871] INFO Kafka version: {} (org.apache.kafka.common.utils.AppInfoParser)\n"


def status_with_logs(tmp_path, logs: dict[int, str]) -> ClusterStatus:
    brokers = {}
    for b, text in logs.items():
        d = tmp_path / f"node-{b}" / "logs"
        d.mkdir(parents=True)
        (d / "server.log").write_text(text)
        brokers[b] = NodeStatus(b, "broker", 1, True, False, {}, str(d), str(tmp_path / f"node-{b}" / "data"))
    return ClusterStatus("local", "4.3.1", "127.0.0.1:9092", brokers)


def test_a_broker_reports_the_version_it_logged_at_its_last_start(tmp_path) -> None:
    st = status_with_logs(tmp_path, {1: LINE.format("4.2.0") + "restart\n" + LINE.format("4.3.1"),
                                     2: LINE.format("4.3.1")})
    assert versions.broker_versions(st) == {1: "4.3.1", 2: "4.3.1"}
    assert versions.versions(st)["kafka"] == "4.3.1"


def test_a_4_4_broker_logs_the_version_from_appinfoparser_in_internals(tmp_path) -> None:
    """Kafka 4.4.0 moved AppInfoParser to ``org.apache.kafka.common.utils.internals``, and its
    log line names the class where it now is (server.log of this lab's 4.4.0 brokers)."""
    line = "[2026-11-29 11:51:36,448] INFO Kafka version: 4.4.0 (org.apache.kafka.common.utils.internals.AppInfoParser)\n"
    st = status_with_logs(tmp_path, {1: LINE.format("4.3.1") + line})
    assert versions.broker_versions(st) == {1: "4.4.0"}


def test_brokers_on_different_versions_are_reported_as_mixed(tmp_path) -> None:
    st = status_with_logs(tmp_path, {1: LINE.format("4.4.0"), 2: LINE.format("4.3.1")})
    assert versions.versions(st)["kafka"] == "mixed: {1: '4.4.0', 2: '4.3.1'}"
    assert versions.differences(st)["kafka"] == (config.KAFKA_VERSION, "mixed: {1: '4.4.0', 2: '4.3.1'}")


def test_a_broker_without_a_version_line_is_an_error(tmp_path) -> None:
    st = status_with_logs(tmp_path, {1: "nothing here\n"})
    with pytest.raises(KafkalabError, match="broker 1: no 'Kafka version:' line"):
        versions.broker_versions(st)


def test_the_installed_clients_are_the_taught_ones(tmp_path) -> None:
    st = status_with_logs(tmp_path, {1: LINE.format(versions.TAUGHT["kafka"])})
    assert versions.differences(st) == {}, "pyproject.toml pins what versions.TAUGHT says"
