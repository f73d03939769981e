"""kafkalab.metrics: JmxTool's output and librdkafka's statistics, parsed once (notebook 13)."""

from __future__ import annotations

import json

import pytest

from kafkalab import config, metrics
from kafkalab.cluster.common import jmx_flags

LSO0 = "kafka.cluster:type=Partition,name=LastStableOffsetLag,topic=t,partition=0"

# What `JmxTool --report-format tsv --reporting-interval 500` printed on the 4.4.0 cluster (shortened).
JMX_TSV = f"""Trying to connect to JMX url: service:jmx:rmi:///jndi/rmi://127.0.0.1:9098/jmxrmi
time\t1795959735180
{LSO0}:Value\t0
{metrics.LATE_TRANSACTIONS}:Value\t0
time\t1795959735680
{LSO0}:Value\t15
{metrics.LATE_TRANSACTIONS}:Value\t0
time\t1795959736180
{LSO0}:Value\t25
"""


def test_jmx_tsv_parses_into_one_sample_per_time_line() -> None:
    samples = metrics.parse_jmx(JMX_TSV)
    assert [s.t_ms for s in samples] == [1795959735180, 1795959735680, 1795959736180]
    assert [s.value(LSO0) for s in samples] == [0, 15, 25]
    assert samples[1].value(metrics.LATE_TRANSACTIONS) == 0
    assert samples[2].value(metrics.LATE_TRANSACTIONS) is None, "a sample still being written lacks values"


def test_jmx_values_that_are_no_numbers_are_skipped() -> None:
    (s,) = metrics.parse_jmx("time\t1\nkafka.x:type=A:RateUnit\tSECONDS\nkafka.x:type=A:Count\t3\n")
    assert s.values == {"kafka.x:type=A:Count": 3.0}


def test_the_lso_lag_mbean_is_the_one_kafkas_monitoring_docs_name() -> None:
    assert metrics.lso_lag_mbean("t", 0) == LSO0


def test_each_broker_has_a_jmx_port_beside_its_listeners(monkeypatch) -> None:
    monkeypatch.delenv("KAFKALAB_PORT_BASE", raising=False)
    b2 = config.Node(2, "broker")
    assert b2.jmx_port == 9198 and b2.ports["JMX"] == 9198
    assert "JMX" not in config.Node(101, "controller").ports, "controllers open no JMX port"
    assert metrics.jmx_url(2) == "service:jmx:rmi:///jndi/rmi://127.0.0.1:9198/jmxrmi"
    flags = jmx_flags(9198)
    assert "-Dcom.sun.management.jmxremote.port=9198" in flags and "-Dcom.sun.management.jmxremote.rmi.port=9198" in flags
    assert "-Dcom.sun.management.jmxremote.host=127.0.0.1" in flags, "bound to the loopback only"


def _report(time_s: int, partitions: dict) -> str:
    parts = {str(p): {"partition": p, **v} for p, v in partitions.items()}
    parts["-1"] = {"partition": -1, "hi_offset": -1001}
    return json.dumps({"client_id": "c", "time": time_s, "topics": {"t": {"topic": "t", "partitions": parts}}})


def test_statistics_give_each_partitions_offsets_and_lag_without_the_internal_one() -> None:
    report = _report(100, {1: {"hi_offset": 77, "ls_offset": 77, "committed_offset": 77, "app_offset": 77,
                               "consumer_lag": 0, "fetch_state": "active"},
                           0: {"hi_offset": 77, "ls_offset": 22, "committed_offset": 22, "app_offset": 22,
                               "consumer_lag": 0, "fetch_state": "active"}})
    rows = metrics.parse_statistics(report)
    assert [(r.partition, r.hi_offset, r.ls_offset, r.committed_offset) for r in rows] == [(0, 77, 22, 22), (1, 77, 77, 77)]
    assert rows[0].t_ms == 100_000 and rows[0].client_id == "c"


def test_a_statistics_file_skips_a_line_still_being_written(tmp_path) -> None:
    path = tmp_path / "c.jsonl.stats.jsonl"
    path.write_text(_report(1, {0: {"hi_offset": 5}}) + "\n" + _report(2, {0: {"hi_offset": 6}})[:40])
    assert [r.hi_offset for r in metrics.read_statistics(path)] == [5]
    assert metrics.read_statistics(tmp_path / "none") == []


def test_a_report_of_a_broker_without_ls_offset_falls_back_to_the_high_watermark() -> None:
    (r,) = metrics.parse_statistics(_report(1, {0: {"hi_offset": 9}}))
    assert r.ls_offset == 9, "STATISTICS.md: ls_offset is hi_offset on brokers older than 0.11"


@pytest.mark.cluster
def test_jmxtool_reads_a_brokers_gauge_once() -> None:
    sample = metrics.read_jmx_once(1, [metrics.UNDER_MIN_ISR])
    assert sample.value(metrics.UNDER_MIN_ISR) == 0, "a whole cluster has no partition under min ISR"
