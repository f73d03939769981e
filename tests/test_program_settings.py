"""``programs.program_settings``: the settings a program's text gives its clients, read with
``ast`` (no regex, nothing runs), so a row names what the program that ran writes."""

from __future__ import annotations

import pytest

from kafkalab.programs import ProgramError, from_notebook, program_settings


def test_the_dict_merged_into_lab_conf_is_read_with_its_literal_values() -> None:
    source = '''from confluent_kafka import Producer
producer = Producer(lab.conf | {
    "acks": "all",            # a comment with "linger.ms": 7 in it is not a setting
    "linger.ms": 5,
    "enable.idempotence": True,
    "stats_cb": lab.statistics,
})
other = {"batch.size": 16384}   # not a client's settings
'''
    assert program_settings(source) == {"acks": "all", "linger.ms": 5, "enable.idempotence": True,
                                        "stats_cb": "lab.statistics"}


def test_every_client_constructor_counts_and_a_later_key_wins() -> None:
    source = '''conf = {"bootstrap.servers": "x", "acks": "1"}
p = Producer(conf)
c = confluent_kafka.Consumer(lab.conf | {"fetch.min.bytes": 1, "acks": "all"})
s = ShareConsumer({**lab.conf, "share.acknowledgement.mode": "explicit"})
'''
    assert program_settings(source) == {"bootstrap.servers": "x", "acks": "all", "fetch.min.bytes": 1,
                                        "share.acknowledgement.mode": "explicit"}


def test_a_program_without_a_client_writes_no_settings_and_one_that_does_not_parse_is_refused() -> None:
    assert program_settings("x = {'linger.ms': 5}\n") == {}
    with pytest.raises(ProgramError, match="does not parse"):
        program_settings("Producer({")


def test_notebook_10s_producer_settings_are_read_from_the_saved_cell() -> None:
    written = program_settings(from_notebook("10_performance", "burst_producer").source)
    assert written == {"acks": "1", "linger.ms": 1000, "batch.size": 1000000, "compression.type": "none",
                       "enable.idempotence": False}
