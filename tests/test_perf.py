"""kafkalab.perf and notebook 10's family: settings for both clients, the parsers of the perf
tools' and strace's output, percentiles; `kafkalab run throughput`, `latency` and
`consume-throughput` live, once each (issue 34: the TLS read without sendfile and the edited
programs are asserted by notebook 10 and its solution)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab import admin, perf
from kafkalab.cli import main
from kafkalab.errors import KafkalabError
from kafkalab.perf import ProducerSettings

PERF_OUTPUT = """\
25001 records sent, 4997.2 records/sec (0.48 MB/sec), 1102.3 ms avg latency, 2063.0 ms max latency.
50000 records sent, 10923.1 records/sec (1.04 MB/sec), 1268.03 ms avg latency, 2412.00 ms max latency, 1210 ms 50th, 2301 ms 95th, 2380 ms 99th, 2405 ms 99.9th.
"""

#: kafka-consumer-perf-test 4.3.1 --print-metrics, captured on the lab cluster (metrics trimmed).
CONSUMER_PERF_OUTPUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-25 19:25:36:877, 2026-11-25 19:25:44:917, 4.7693, 0.5932, 5001, 622.0149, 1045, 6995, 0.6818, 714.9392

Metric Name                                                                                                                 Value
app-info:start-time-ms:{client-id=perf-consumer-client}                                                              : 1795634664642
consumer-fetch-manager-metrics:fetch-size-avg:{client-id=perf-consumer-client, topic=h15-probe}                      : 2998.150
consumer-fetch-manager-metrics:fetch-size-avg:{client-id=perf-consumer-client}                                       : 2998.150
consumer-fetch-manager-metrics:fetch-total:{client-id=perf-consumer-client}                                                               : 1668.000
consumer-fetch-manager-metrics:records-per-request-avg:{client-id=perf-consumer-client, topic=h15-probe}             : 2.998
consumer-fetch-manager-metrics:records-per-request-avg:{client-id=perf-consumer-client}                                                   : 2.998
"""

STRACE_C = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 61.22    0.001234          64        19           sendfile
 30.00    0.000600          25        24         2 write
  8.78    0.000177           1        89           read
------ ----------- ----------- --------- --------- ----------------
100.00    0.002011                   132         2 total
"""


def test_settings_name_the_same_knobs_for_both_clients() -> None:
    s = ProducerSettings(acks="1", linger_ms=20, batch_size=16384, compression="zstd")
    assert s.librdkafka_conf() == {"acks": "1", "linger.ms": "20", "batch.size": "16384", "compression.codec": "zstd"}
    assert s.java_props() == ["acks=1", "linger.ms=20", "batch.size=16384", "enable.idempotence=false",
                              "compression.type=zstd"], "Java would refuse acks=1 with its default idempotence"
    assert ProducerSettings(transactional_batch=10).props()["enable.idempotence"] == "true"


@pytest.mark.parametrize("kwargs,message", [
    ({"acks": "2"}, "acks must be one of 0, 1, all"),
    ({"compression": "brotli"}, "compression must be one of"),
    ({"transactional_batch": 5, "acks": "1"}, "transactions need acks=all"),
])
def test_bad_settings_are_refused_with_the_choices(kwargs, message) -> None:
    with pytest.raises(KafkalabError, match=message):
        ProducerSettings(**kwargs)


def test_the_perf_tools_last_summary_line_is_read() -> None:
    s = perf.parse_perf_summary(PERF_OUTPUT)
    assert (s["records"], s["records_per_s"], s["mb_per_s"], s["avg_latency_ms"], s["p99_ms"]) == \
        (50000, 10923.1, 1.04, 1268.03, 2380.0)
    with pytest.raises(KafkalabError, match="no summary line"):
        perf.parse_perf_summary(PERF_OUTPUT.splitlines()[0])


def test_the_consumer_perf_tools_summary_and_client_wide_fetch_metrics_are_read() -> None:
    s = perf.parse_consumer_perf_summary(CONSUMER_PERF_OUTPUT)
    assert (s["data.consumed.in.nMsg"], s["fetch.time.ms"], s["fetch.nMsg.sec"], s["rebalance.time.ms"]) == \
        (5001, 6995, 714.9392, 1045)
    assert "start.time" not in s and "end.time" not in s
    assert s["fetch_total"] == 1668 and s["records_per_request_avg"] == 2.998 and s["fetch_size_avg"] == 2998.15, \
        "the client-wide metric, not the per-topic one"
    without_metrics = perf.parse_consumer_perf_summary("\n".join(CONSUMER_PERF_OUTPUT.splitlines()[:2]))
    assert "fetch_total" not in without_metrics and without_metrics["MB.sec"] == 0.5932
    with pytest.raises(KafkalabError, match="no summary"):
        perf.parse_consumer_perf_summary("WARN something\n")
    with pytest.raises(KafkalabError, match="values for 10 columns"):
        perf.parse_consumer_perf_summary(CONSUMER_PERF_OUTPUT.splitlines()[0] + "\n1, 2\n")


def test_a_consume_burst_reports_rates_and_records_per_fetch() -> None:
    b = perf.ConsumeBurst("confluent-kafka", {"max.partition.fetch.bytes": 1000}, 3000, 3_000_000, 1.5, 1000)
    assert (b.records_per_s, b.mb_per_s, b.records_per_fetch) == (2000, 2.0, 3.0)
    assert b.to_json()["records_per_fetch"] == 3.0
    assert perf.ConsumeBurst("x", {}, 10, 10, 1.0, None).to_json()["records_per_fetch"] is None


def test_strace_counts_are_read_from_its_summary_table() -> None:
    assert perf.parse_strace_summary(STRACE_C) == {"sendfile": 19, "write": 24, "read": 89}
    assert perf.parse_strace_summary("") == {}


def test_percentiles_are_nearest_rank() -> None:
    assert perf.percentiles(list(range(1, 101))) == (50, 99, 100)
    assert perf.percentiles([7.0]) == (7.0, 7.0, 7.0)
    with pytest.raises(KafkalabError, match="nothing was received"):
        perf.percentiles([])


def test_the_cli_refuses_bad_settings_at_once() -> None:
    r = CliRunner().invoke(main, ["run", "throughput", "--acks", "1", "--transactional-batch", "10"])
    assert r.exit_code == 2 and "transactions need acks=all" in r.output
    r = CliRunner().invoke(main, ["run", "throughput", "--compression", "brotli"])
    assert r.exit_code == 2 and "--compression" in r.output


def run_json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["run", *args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{"):])


@pytest.mark.cluster
@pytest.mark.parametrize("args,java", [
    # the CLI's smoke; both clients with compression: notebook 10 cell 8, solution 10 cell 6
    (["--messages", "2000", "--record-size", "50", "--transactional-batch", "200"], False),
])
def test_throughput_runs_both_clients_with_the_same_settings(args, java) -> None:
    r = run_json("throughput", *args)
    assert r["python"]["records"] == r["messages"] and r["python_records_per_s"] > 0
    if java:
        assert r["java"]["records"] == r["messages"] and r["ratio"] == pytest.approx(
            r["python_records_per_s"] / r["java_records_per_s"], rel=0.01)
        assert "compression.type=lz4" in ProducerSettings(**r["settings"]).java_props()
        assert r["bytes_on_disk_per_record"] < r["record_size"], "300 bytes of 'x' compress with lz4"
    else:
        assert r["java"] is None and len(r["python"]["commit_ms"]) == 10, "10 transactions of 200 records"


@pytest.mark.cluster
def test_latency_reports_percentiles_and_a_waiting_consumer_is_later() -> None:
    r = run_json("latency", "--rate", "200", "--seconds", "1", "--fetch-min-bytes", "1000000",
                 "--fetch-wait-max-ms", "300", "--java-records", "50")
    default, held = r["runs"]
    assert default["records"] == held["records"] == 200
    assert default["p50_ms"] <= default["p99_ms"] <= default["max_ms"]
    assert held["p50_ms"] > default["p50_ms"] and held["max_ms"] >= 0.9 * 300
    assert r["java"]["p50_ms"] <= r["java"]["p99_ms"]


def _perf_groups() -> set[str]:
    """The groups on the cluster named as ``perf.consume_throughput_java`` names its groups."""
    return {g.group_id for g in admin.admin().list_consumer_groups().result(timeout=15).valid if "-perf-" in g.group_id}


@pytest.mark.cluster
def test_consume_throughput_reads_one_batch_per_fetch_below_the_batch_size() -> None:
    perf_groups_before = _perf_groups()
    r = run_json("consume-throughput", "--messages", "1200", "--record-size", "300", "--producer-batch-size", "1500",
                 "--max-partition-fetch-bytes", "50", "--max-partition-fetch-bytes", "2000000")
    tiny, big = r["rows"]
    assert (tiny["max_partition_fetch_bytes"], big["max_partition_fetch_bytes"]) == (50, 2000000)
    assert r["max_batch_bytes"] > 50 and r["records_per_batch"] < 10
    for row in (tiny, big):
        for client in ("python", "java"):
            assert row[client]["records"] == 1200, f"{client} read every record"
    for client in ("python", "java"):
        assert r["batches"] <= tiny[client]["fetch_requests"] <= r["batches"] + 3, \
            "KIP-74: one whole batch per fetch, however small the limit (and a few empty long polls at the end)"
        assert big[client]["records_per_fetch"] > 5 * tiny[client]["records_per_fetch"]
    assert big["python"]["records_per_s"] > 1.5 * tiny["python"]["records_per_s"]
    assert tiny["python"]["value_bytes"] == 1200 * 300
    assert _perf_groups() <= perf_groups_before, \
        "kafka-consumer-perf-test's groups are deleted after each read: the cluster as it was found"


def test_a_lingering_producer_allows_one_batch_per_linger_in_the_span() -> None:
    from kafkalab.experiments.performance import BatchingRow

    row = BatchingRow("linger.ms=200", 200, None, 2000, 2000, 5, 400, 415, 100.0, span_ms=811, min_gap_ms=201)
    assert row.most_batches_for_linger() == pytest.approx(811 / 199 + 1)
    with pytest.raises(KafkalabError, match="no lower bound"):
        BatchingRow("linger.ms=0", 0, None, 2000, 2000, 1300, 1.5, 25, 70.0).most_batches_for_linger()


def test_a_frozen_follower_stays_in_the_isr_for_the_shorter_of_lag_and_fencing() -> None:
    from kafkalab.experiments.follower_wait import FollowerWait

    w = FollowerWait(1, 3, {}, {}, [1, 2, 3], {}, 500.0, 10000, 6000, 1000)
    assert w.isr_kept_ms == 5000 and w.to_json()["isr_kept_ms"] == 5000


def test_resident_bytes_of_a_file_just_written_is_its_size(tmp_path) -> None:
    f = tmp_path / "segment.log"
    f.write_bytes(b"x" * 10_000)
    assert perf.resident_bytes(f) == 10_000, "pages just written are in the page cache"
    (tmp_path / "empty").write_bytes(b"")
    assert perf.resident_bytes(tmp_path / "empty") == 0


def test_thread_tracers_lists_every_thread_of_a_process_untraced() -> None:
    import os
    import threading

    ready, stop = threading.Event(), threading.Event()

    def named() -> None:
        ready.set()
        stop.wait(5)

    t = threading.Thread(target=named, name="kafkalab-probe")
    t.start()
    ready.wait(5)
    try:
        threads = perf.thread_tracers(os.getpid())
        assert len(threads) >= 2 and all(isinstance(name, str) and tracer >= 0 for name, tracer in threads)
    finally:
        stop.set()
        t.join()


def test_a_measuring_program_is_paced_and_names_its_settings() -> None:
    from kafkalab.experiments.performance import program_setting
    from kafkalab.instruments.measuring import MeasureOptions, times_path
    from kafkalab.programs import Program

    p = Program("p", 'producer = Producer(lab.conf | {"linger.ms": 200, "batch.size": 1000000})\n')
    assert (program_setting(p, "linger.ms"), program_setting(p, "batch.size"), program_setting(p, "acks")) == (200, 1000000, None)
    assert MeasureOptions(10, 100, rate=200).rate == 200 and times_path("a/b.jsonl") == "a/b.jsonl.times.json"
    for bad in ((0, 100), (10, 0), (10, 100, 0)):
        with pytest.raises(ValueError):
            MeasureOptions(*bad)


def test_the_settings_a_program_writes_are_read_and_edited_line_by_line() -> None:
    from kafkalab.experiments.follower_wait import program_acks
    from kafkalab.experiments.performance import program_flag, with_fetch
    from kafkalab.programs import Program

    p = Program("p", 'c = Consumer(lab.conf | {"acks": "all", "enable.idempotence": False,\n'
                     '        "fetch.min.bytes": 1, "fetch.wait.max.ms": 500})\n')
    assert (program_acks(p), program_flag(p, "enable.idempotence"), program_flag(p, "linger.ms")) == ("all", False, None)
    held = with_fetch(p, "held", fetch_min_bytes=100000, fetch_wait_max_ms=300)
    assert held.name == "held" and '"fetch.min.bytes": 100000' in held.source and '"fetch.wait.max.ms": 300' in held.source
    with pytest.raises(KafkalabError, match="max.partition.fetch.bytes"):
        with_fetch(p, "x", max_partition_fetch_bytes=1000)


def test_a_statistics_report_counts_fetches_only_once_it_has_seen_every_record() -> None:
    from kafkalab.instruments.measuring import fetch_requests

    report = json.dumps({"brokers": {"b1": {"req": {"Fetch": 7}}, "b2": {"req": {"Fetch": 2}}},
                         "topics": {"t": {"partitions": {"0": {"partition": 0, "rxmsgs": 30},
                                                         "-1": {"partition": -1, "rxmsgs": 99}}}}})
    assert fetch_requests(report, 30) == 9 and fetch_requests(report, 31) is None


def test_a_measuring_consumer_keeps_latencies_bytes_and_the_fetch_count(tmp_path) -> None:
    from types import SimpleNamespace as NS

    from kafkalab.instruments.measuring import MeasuringConsumerLab, ready_path, times_path

    ledger = str(tmp_path / "c.jsonl")
    spec = NS(name="c", conf={"group.id": "g"}, topics=["t"], ledger=ledger, run_id="r",
              options={"count": 2, "value_bytes": 1})
    lab = MeasuringConsumerLab(spec)
    lab.start()
    assert (tmp_path / "c.jsonl.ready").exists() and ready_path(ledger).endswith(".ready")
    msg = NS(timestamp=lambda: (1, 0), value=lambda: b"abc")
    assert lab.wanted()
    lab.arrived(msg)
    lab.arrived(msg)
    assert not lab.wanted() and not lab.counted()
    lab.statistics(json.dumps({"brokers": {"b": {"req": {"Fetch": 3}}},
                               "topics": {"t": {"partitions": {"0": {"partition": 0, "rxmsgs": 2}}}}}))
    assert lab.counted()
    lab.statistics(json.dumps({"brokers": {"b": {"req": {"Fetch": 4}}}, "topics": {}}))  # a report during close()
    lab.close()
    out = json.loads(open(times_path(ledger)).read())
    assert out["value_bytes"] == 6 and out["fetch_requests"] == 3 and len(out["latencies_ms"]) == 2
    assert out["seconds"] >= 0


def _edited_notebook(tmp_path, old: str, new: str):
    """A copy of notebook 10 with ``old`` replaced by ``new`` in its cells, as a learner's edit saved on disk."""
    from kafkalab.programs import notebooks_dir

    text = (notebooks_dir() / "10_performance.ipynb").read_text()
    assert text.count(json.dumps(old)[1:-1]) == 1
    path = tmp_path / "10_performance.ipynb"
    path.write_text(text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1]))
    return path


def test_run_throughput_runs_the_saved_burst_producer_with_each_option_edited_into_its_line(tmp_path, monkeypatch) -> None:
    from kafkalab.experiments import performance as pf

    program, settings = pf.throughput_program(acks="all", compression="zstd", idempotence="on")
    assert program.name == "burst_producer_edited" and '"compression.type": "zstd"' in program.source
    assert '"enable.idempotence": True' in program.source and '"acks": "all"' in program.source
    assert settings == ProducerSettings("all", 1000, 1000000, "zstd", True), "Kafka's tool gets what the program writes"
    assert pf.throughput_program()[0].source == pf.notebook_program("burst_producer").source, "no option: as saved"
    txn, txn_settings = pf.throughput_program(transactional_batch=50)
    assert "RECORDS_PER_TRANSACTION = 50" in txn.source and txn_settings.transactional_batch == 50
    with pytest.raises(KafkalabError, match="does not write compression.type"):
        pf.throughput_program(compression="lz4", transactional_batch=50)
    monkeypatch.setattr(pf, "NOTEBOOK", _edited_notebook(tmp_path, '"linger.ms": 1000,', '"linger.ms": 7,'))
    edited, edited_settings = pf.throughput_program()
    assert '"linger.ms": 7' in edited.source and edited_settings.linger_ms == 7, "an edit saved on disk is what runs"


@pytest.mark.cluster
def test_run_throughput_reports_the_settings_of_the_program_on_disk(tmp_path, monkeypatch) -> None:
    from kafkalab.experiments import performance as pf

    monkeypatch.setattr(pf, "NOTEBOOK", _edited_notebook(tmp_path, '"batch.size": 1000000,              # full at',
                                                              '"batch.size": 2000,                 # full at'))
    r = run_json("throughput", "--messages", "3000", "--record-size", "100")
    assert r["program"] == "burst_producer" and r["python_settings"]["batch.size"] == 2000
    assert r["settings"]["batch_size"] == 2000, "kafka-producer-perf-test got the program's batch.size"
    assert r["records_per_batch"] <= 2000 // 100, "the edited program ran: batches of at most 2000 bytes"
    assert r["python"]["records"] == r["java"]["records"] == 3000
