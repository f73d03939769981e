"""kafkalab.consumers.watermarks without a cluster: which librdkafka errors it asks again after."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkalab import consumers


def test_every_transient_watermark_error_is_a_name_librdkafka_gives() -> None:
    """The retry list compares ``KafkaError.name()``: a protocol name librdkafka spells otherwise
    (NOT_LEADER_OR_FOLLOWER is its NOT_LEADER_FOR_PARTITION) would never match."""
    for name in consumers.TRANSIENT_WATERMARK_ERRORS:
        assert hasattr(KafkaError, name), f"{name} is not a librdkafka error name"
        assert KafkaError(getattr(KafkaError, name)).name() == name


class _Consumer:
    """Answers get_watermark_offsets with the given errors first, then (0, 5)."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.calls = 0

    def get_watermark_offsets(self, tp, timeout=None):
        self.calls += 1
        if self.codes:
            raise KafkaException(KafkaError(self.codes.pop(0)))
        return (0, 5)


def test_a_leader_that_just_lost_the_partition_is_asked_again() -> None:
    c = _Consumer(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert consumers.watermarks(c, "t", 0, timeout_s=30) == (0, 5) and c.calls == 3


def test_any_other_error_is_raised_at_once() -> None:
    c = _Consumer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        consumers.watermarks(c, "t", 0, timeout_s=30)
    assert c.calls == 1
