"""kafkalab.experiments.idempotence (notebook 04): the result objects on captured samples
(the kafka-dump-log parser is tested in tests/test_dumplog.py), then, on the live cluster, one
`kafkalab run lost-ack --json` and a program librdkafka refuses failing the run. The verdicts on
lost acks, restarts, retries=0, requests in flight, the retry timeline and the clients' defaults
are asserted by notebook 04 and its solution (issue 34)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab import dumplog, programs
from kafkalab.errors import KafkalabError
from kafkalab.experiments import idempotence as idem
from kafkalab.instruments.producer import ProducerLab, ProducerOptions
from kafkalab.ledger import read_events
from kafkalab.producers import Delivery
from kafkalab.worker import ProgramSpec
from kafkalab.workloads import Copy
from test_dumplog import DUMP_PLAIN

@pytest.mark.parametrize("kwargs, message", [
    ({"messages": 0, "drop_acks": 0}, "messages >= 1"),
    ({"messages": 3, "drop_acks": 4}, "drop-acks <= messages"),
    ({"messages": 3, "drop_acks": 0, "restart_producer": True}, "needs --drop-acks >= 1"),
    ({"messages": 3, "drop_acks": 1, "partitions": 0}, "partitions"),
    ({"messages": 3, "drop_acks": 1, "ack_loss": "lost"}, "ack_loss"),
])
def test_run_lost_ack_refuses_bad_arguments_before_touching_the_cluster(kwargs: dict, message: str) -> None:
    with pytest.raises(KafkalabError, match=message):
        idem.run_lost_ack(programs.Program("p", "pass\n"), **kwargs)


def _result(**kw) -> idem.LostAckResult:
    base = dict(topic="t", partitions=1, program="plain_producer", lab_conf={"client.id": "r-producer"}, drop_acks=1,
                restart_producer=False, ack_loss="timeout", sent=2, acked=2, failed=0, records_in_log=3, unique_in_log=2, duplicates=1,
                duplicated_values=1, producer_ids=[-1], producer_epochs=[-1], dropped_responses=1, lost_ack_records=1,
                retry_offsets=[[0, 1]], resent=0, produce_requests=3, acks_on_the_wire=[-1], elapsed_ms=1, run_id="r",
                ledger_glob="x/*.jsonl", client_ids=["r-producer"])
    base.update(kw)
    return idem.LostAckResult(**base)


def test_result_json_has_the_fields_the_cli_promises() -> None:
    r = _result(batches=dumplog.parse(DUMP_PLAIN).batches)
    d = json.loads(json.dumps(r.to_json()))
    for k in ("sent", "acked", "records_in_log", "unique_in_log", "duplicates", "producer_ids"):
        assert k in d
    assert d["batches"][0]["producer_id"] == -1 and "records" not in d["batches"][0] and "log" not in d


def test_copies_table_puts_the_duplicate_first_with_what_the_producer_was_told() -> None:
    log = [Copy(0, 0, "a"), Copy(0, 1, "a"), Copy(0, 2, "b")]
    deliveries = [Delivery("k", "a", 0, 1, None, "p"), Delivery("k", "b", 0, 2, None, "p")]
    df = _result(log=log, deliveries=deliveries).copies_table()
    assert df.index.tolist() == ["a", "b"]
    assert df.loc["a", "copies"] == 2 and df.loc["a", "log offsets"] == ["0:0", "0:1"]
    assert df.loc["a", "delivery reports"] == ["0:1"]


def test_throughput_plot_gives_each_batching_its_own_linear_axis_from_zero() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from kafkalab.experiments import idempotence_plots
    from kafkalab.producers import ProgramBurst

    def burst(on: bool, seconds: float, batch: int, records: int) -> ProgramBurst:
        return ProgramBurst("p", {"enable.idempotence": on, "batch.num.messages": batch}, {}, records, 100, seconds)

    bursts = [burst(on, s, 10000, 1000) for on, s in ((False, 0.10), (True, 0.11))] + \
             [burst(on, s, 10, 100) for on, s in ((False, 0.5), (True, 0.9))]
    fig = idempotence_plots.throughput(bursts)
    assert len(fig.axes) == 2
    for ax, group in zip(fig.axes, (bursts[:2], bursts[2:])):
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
        assert [round(p.get_height()) for p in ax.patches] == [round(b.records_per_s) for b in group]
    assert [ax.get_title() for ax in fig.axes] == ["batch.num.messages=10000", "batch.num.messages=10"]


def test_cli_offers_only_the_notebooks_programs() -> None:
    r = CliRunner().invoke(idem.cli_command, ["--program", "hidden_producer"])
    assert r.exit_code == 2 and "plain_producer" in r.output
    assert idem.cli_command.name == "lost-ack"


def test_cli_runs_the_notebooks_programs_edited_only_where_a_flag_asks() -> None:
    shown = programs.notebook_programs(idem.NOTEBOOK)
    assert set(idem.PROGRAMS) <= set(shown), "every program the CLI offers is a cell of notebook 04"
    assert idem.cli_program("idempotent_producer", None, False, None) == shown["idempotent_producer"]
    assert idem.cli_program(None, "off", False, None) == shown["plain_producer"]
    assert idem.cli_program(None, "on", False, None) == shown["idempotent_producer"]
    assert idem.cli_program(None, "on", True, None) == shown["restartable_producer"]
    off_restart = idem.cli_program(None, "off", True, None)
    assert '"enable.idempotence": False,' in off_restart.source and off_restart.origin.startswith("edited")
    assert idem.cli_program(None, "off", False, 0) == shown["at_most_once_producer"]
    assert '"retries": 3,' in idem.cli_program(None, "off", False, 3).source
    assert idem.cli_program(None, None, False, None) == shown["plain_producer"]
    for bad in [("plain_producer", "on", False, None), (None, "on", False, 0)]:
        with pytest.raises(KafkalabError):
            idem.cli_program(*bad)


def test_shown_producers_differ_from_plain_producer_only_where_the_text_says() -> None:
    shown = programs.notebook_programs(idem.NOTEBOOK)
    plain = shown["plain_producer"].source.splitlines()
    for name, changed in [("idempotent_producer", ['"enable.idempotence": True']), ("at_most_once_producer", ['"retries": 0'])]:
        other = shown[name].source.splitlines()
        assert [line for line in other if line not in plain] and all(
            any(c in line for c in changed) for line in other if line not in plain), name
    for source in (p.source for p in shown.values() if p.name in idem.PROGRAMS):
        assert "lab.conf |" in source and "lab.delivered(err, msg)" in source, "settings and reports go through the lab"


class _Msg:
    def __init__(self, value: bytes, offset: int):
        self._value, self._offset = value, offset

    def topic(self): return "t"
    def partition(self): return 1
    def offset(self): return self._offset
    def key(self): return b"k"
    def value(self): return self._value


class _Err:
    def name(self): return "_MSG_TIMED_OUT"


def test_producer_instruments_give_the_records_and_write_sends_and_reports_to_the_ledger(tmp_path) -> None:
    spec = ProgramSpec("p", "run", str(tmp_path / "p.jsonl"), "producer", "plain_producer", "pass\n",
                       conf={"bootstrap.servers": "proxy:1", "client.id": "p"}, topics=["t"],
                       options={"records": [["k", "v1", 1], ["k", "v2", 0]], "together": 1})
    lab = ProducerLab(spec)
    assert lab.records() == [("k", "v1", 1), ("k", "v2", 0)] and lab.together == 1 and lab.topic == "t"
    assert lab.conf == {"bootstrap.servers": "proxy:1", "client.id": "p"}, "the harness adds addresses and names only"
    lab.produced("k", "v1", 1)
    lab.delivered(None, _Msg(b"v1", 7))
    lab.delivered(_Err(), _Msg(b"v2", -1001))
    lab.close()
    events = [(e.kind, e.value, e.offset, e.error) for e in read_events(tmp_path / "p.jsonl")]
    assert events == [("produced", "v1", None, None), ("acked", "v1", 7, None), ("acked", "v2", None, "_MSG_TIMED_OUT")]
    assert [d.offset for d in idem.deliveries_of(tmp_path / "p.jsonl")] == [7, None]
    with pytest.raises(ValueError, match="together"):
        ProducerOptions(records=[["k", "v", 0]], together=2)


def test_librdkafka_lines_are_the_percent_lines_of_a_worker_log(tmp_path) -> None:
    log = tmp_path / "w.log"
    log.write_text("%5|1.0|REQTMOUT|rdkafka#producer-1| Timed out ProduceRequest\nTraceback (most recent call last):\n")
    assert idem.librdkafka_lines(log) == ["%5|1.0|REQTMOUT|rdkafka#producer-1| Timed out ProduceRequest"]
    assert idem.librdkafka_lines(tmp_path / "none.log") == []


# ----------------------------------------------------------------------------- live: other N and K than the notebook


def _run_cli(*args: str) -> dict:
    r = CliRunner().invoke(idem.cli_command, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.cluster
@pytest.mark.parametrize("messages, drop_acks, ack_loss", [(4, 4, "disconnect")])  # the CLI's smoke: notebook 04 cells 12, 18, 22
def test_cli_verdicts_hold_for_other_message_and_lost_ack_counts(messages: int, drop_acks: int, ack_loss: str) -> None:
    off = _run_cli("--idempotence", "off", "--messages", str(messages), "--drop-acks", str(drop_acks),
                   "--ack-loss", ack_loss)
    assert off["lost_ack_records"] == off["dropped_responses"] == drop_acks
    assert off["duplicates"] == off["duplicated_values"] == drop_acks
    assert (off["sent"], off["acked"], off["records_in_log"]) == (messages, messages, messages + drop_acks)
    assert off["producer_ids"] == [-1]
    on = _run_cli("--idempotence", "on", "--messages", str(messages), "--drop-acks", str(drop_acks),
                  "--ack-loss", ack_loss, "--partitions", "2")
    assert on["lost_ack_records"] == drop_acks and on["duplicates"] == 0
    assert on["records_in_log"] == on["unique_in_log"] == on["acked"] == messages
    assert len(on["producer_ids"]) == 1 and on["producer_ids"][0] >= 0 and on["producer_epochs"] == [0]
    assert all(first == retry for first, retry in on["retry_offsets"])


@pytest.mark.cluster
def test_a_program_librdkafka_refuses_fails_the_run_with_its_traceback() -> None:
    refused = programs.from_notebook(idem.NOTEBOOK, "idempotent_producer").replace('"acks": "all",', '"acks": 1,')
    with pytest.raises(KafkalabError, match="acks"):
        idem.run_lost_ack(refused, messages=2, drop_acks=0, dump=False)


@pytest.mark.jvm
def test_java_client_switches_idempotence_off_unless_it_was_written_true() -> None:
    r = idem.run_java_settings(["", "acks=1", "enable.idempotence=true,acks=1"])
    assert r.results[""].startswith("enable.idempotence=true,acks=-1")
    assert r.results["acks=1"].startswith("enable.idempotence=false,acks=1")
    assert r.results["enable.idempotence=true,acks=1"].startswith("ConfigException: Must set acks to all")
    assert r.log == ["Idempotence will be disabled because acks is set to 1, not set to 'all'."]


def test_written_settings_reads_the_programs_settings_lines() -> None:
    source = '''producer = Producer(lab.conf | {
    "enable.idempotence": False,        # a comment
    "acks": "all",
    "socket.timeout.ms": 2000,
    "on_delivery": report
})'''
    assert idem.written_settings(source) == {"enable.idempotence": False, "acks": "all", "socket.timeout.ms": 2000,
                                             "on_delivery": "report"}


def test_parse_java_settings_reads_tab_separated_lines_and_the_switch_off_log() -> None:
    out = "\tenable.idempotence=true\nacks=1\tenable.idempotence=false\nnoise\n"
    err = "ProducerConfig values:\n\tenable.idempotence = true\nIdempotence will be disabled because acks is set to 1\n"
    r = idem.parse_java_settings(out, err)
    assert r.results == {"": "enable.idempotence=true", "acks=1": "enable.idempotence=false"}
    assert r.log == ["Idempotence will be disabled because acks is set to 1"]
    assert r.table().index.tolist() == ["(none: the defaults)", "acks=1"]


#: The start of kafka-producer-perf-test's INFO log (Kafka 4.3.1 Java client), shortened.
JAVA_CONFIG_LOG = """\
ProducerConfig values: 
\tacks = -1
\tbatch.size = 16384
\tdelivery.timeout.ms = 120000
\tenable.idempotence = true
\ttransactional.id = null
\tvalue.serializer = class org.apache.kafka.common.serialization.ByteArraySerializer

initializing Kafka metrics collector
[Producer clientId=perf-producer-client] Instantiated an idempotent producer.
[Producer clientId=perf-producer-client] ProducerId set to 3107 with epoch 0
"""


def test_parse_producer_config_log_reads_the_values_block_and_the_producer_id() -> None:
    values, pid = idem.parse_producer_config_log(JAVA_CONFIG_LOG)
    assert values["acks"] == "-1" and values["enable.idempotence"] == "true" and values["transactional.id"] == "null"
    assert values["delivery.timeout.ms"] == "120000" and "initializing" not in " ".join(values)
    assert pid == 3107
    with pytest.raises(ValueError, match="ProducerConfig values"):
        idem.parse_producer_config_log("nothing here")


def test_defaults_table_shows_both_clients_and_what_one_lacks() -> None:
    df = idem.defaults_table()
    java = [c for c in df.columns if c.startswith("Java")][0]
    assert df.loc["enable.idempotence"].tolist() == ["false", "true"]
    assert df.loc["socket.timeout.ms", java] == "(no such setting)"
    assert df.loc["delivery.timeout.ms", java] == "120000"
    live = idem.defaults_table({"enable.idempotence": "true"})
    assert any("start-up log" in c for c in live.columns) and live.loc["acks"].iloc[1] == "(no such setting)"


def _event(kind: str, corr: int, records: int = 0, conn: int = 1):
    from kafkalab.faults import ProxyEvent

    batches = [{"record_count": records}] if kind == "request" else []
    return ProxyEvent(t_ms=0.0, wall_ms=0, broker=1, conn=conn, kind=kind, api="Produce", correlation_id=corr,
                      batches=batches)


def test_records_in_flight_at_send_counts_records_awaiting_a_response() -> None:
    # 1-record requests: sent with 0, 1, 2 records in flight; the held response of request 1 ends it late
    events = [_event("request", 1, 1), _event("request", 2, 1), _event("response", 2), _event("request", 3, 1),
              _event("response", 1), _event("response", 3), _event("request", 4, 10)]
    assert idem.records_in_flight_at_send(events) == [(1, 0), (1, 1), (1, 1), (10, 0)]
    # the same correlation id on another connection is another request
    assert idem.records_in_flight_at_send([_event("request", 1, 3, conn=1), _event("response", 1, conn=2),
                                           _event("request", 2, 2, conn=1)]) == [(3, 0), (2, 3)]


def test_run_in_flight_needs_a_program() -> None:
    with pytest.raises(KafkalabError, match="programs is empty"):
        idem.run_in_flight({})
