"""kafkalab.producers: teaching settings, librdkafka's refusals, the workload records
(kafkalab.data.workload_record: the one record-id rule), and the timed producer programs of
notebooks 04 and 07's cost tables (run_bursts, live)."""

from __future__ import annotations

import json

import pytest

from kafkalab import data, producers
from kafkalab.errors import KafkalabError


def test_records_are_unique_flights_round_robin_over_partitions() -> None:
    recs = producers.records_for(2005, 3)
    assert len({v for _, v, _ in recs}) == 2005, "values stay unique past the 2000 flights of the sample"
    assert [p for _, _, p in recs[:5]] == [0, 1, 2, 0, 1]
    assert recs[0] == ("N14228", "flight-2013-01-01-UA-1545-EWR", 0)


def test_producer_conf_teaching_values_and_defaults() -> None:
    conf = producers.producer_conf("c", "s:1", True)
    assert conf["socket.timeout.ms"] == producers.TEACHING_SOCKET_TIMEOUT_MS == 2000
    assert conf["message.timeout.ms"] == 30000 and conf["enable.idempotence"] is True and "retries" not in conf
    bare = producers.producer_conf("c", "s:1", None, None, None)
    assert not {"enable.idempotence", "socket.timeout.ms", "message.timeout.ms"} & set(bare), "librdkafka's defaults"
    assert producers.producer_conf("c", "s:1", False, extra={"logger": object()})["log_level"] == 5


def test_make_producer_turns_librdkafkas_refusal_into_one_message() -> None:
    with pytest.raises(KafkalabError, match="acks"):
        producers.make_producer({"bootstrap.servers": "127.0.0.1:1", "enable.idempotence": True, "acks": 1})


def test_record_ids_get_a_lap_suffix_past_the_sample_and_json_values_carry_them() -> None:
    f0, rid0 = data.workload_record(0)
    f1, rid1 = data.workload_record(2000)
    assert f0 == f1 and rid0 == f0.record_id and rid1 == f"{f0.record_id}#1"
    assert data.record_id_of(data.record_json(f1, rid1)) == rid1
    assert json.loads(data.record_json(f0, rid0))["origin"] == f0.origin
    with pytest.raises(ValueError):
        data.workload_record(-1)


def test_a_program_burst_counts_records_and_value_bytes_per_second() -> None:
    b = producers.ProgramBurst("p", {"linger.ms": 0}, {"client.id": "c"}, 3000, 100, 0.5)
    assert b.records_per_s == 6000 and b.mb_per_s == 0.6


@pytest.mark.cluster
def test_run_bursts_times_the_shown_program_and_its_copies_and_names_the_settings_each_ran_with() -> None:
    """Notebook 07's timed producer and a copy edited as its cost table edits it: each run in a
    worker, every record reported, the row's settings read from the program that ran, and a copy
    librdkafka refuses (idempotence with 1000000 in flight) fails with the program's name."""
    from kafkalab import programs

    shown = programs.notebook_programs("07_ordering")["timed_producer"]
    one = shown.replace('"max.in.flight.requests.per.connection": 1000000,',
                        '"max.in.flight.requests.per.connection": 1,', name="timed_one_in_flight")
    bursts = producers.run_bursts([shown, one], records=200, value_bytes=10, rounds=1, scope="bursttest")
    assert [b.program for b in bursts] == ["timed_producer", "timed_one_in_flight"]
    assert [b.settings["max.in.flight.requests.per.connection"] for b in bursts] == [1000000, 1]
    assert all(b.records == 200 and b.seconds > 0 for b in bursts)
    assert all(set(b.lab_conf) == {"bootstrap.servers", "client.id"} for b in bursts), "addresses and names only"
    refused = shown.replace('"enable.idempotence": False,', '"enable.idempotence": True,', name="refused")
    with pytest.raises(KafkalabError, match="program refused exited 1") as e:
        producers.run_bursts([refused], records=10, value_bytes=10, scope="bursttest")
    assert "max.in.flight" in str(e.value), "the program's log names librdkafka's refusal"
