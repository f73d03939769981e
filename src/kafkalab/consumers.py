"""Consumer-side primitives every family shares: the watermark query of one partition through
a consumer's own connection, asked again while the answer is one a retry fixes. The
AdminClient's ListOffsets of many partitions (earliest, latest, last stable) is
``admin.list_offsets``.

Sources: librdkafka 2.16 ``rd_kafka_query_watermark_offsets`` (confluent-kafka
``Consumer.get_watermark_offsets``); Kafka protocol ListOffsets.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .waiting import wait_until

# librdkafka errors of a watermark query that a retry fixes: the client's metadata does not yet
# know the new partition or its leader, the request timed out on a loaded machine, or a new
# leader has not yet caught its high watermark up (OFFSET_NOT_AVAILABLE, KIP-207), or the leader
# it asked has just lost the partition (error 6: librdkafka's name NOT_LEADER_FOR_PARTITION, the
# protocol's NOT_LEADER_OR_FOLLOWER). The names are ``KafkaError.name()``'s, librdkafka's.
TRANSIENT_WATERMARK_ERRORS = ("_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC", "_TIMED_OUT", "_TRANSPORT",
                              "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "UNKNOWN_TOPIC_OR_PART",
                              "OFFSET_NOT_AVAILABLE")


def watermarks(consumer: Consumer, topic: str, partition: int, timeout_s: float = 30.0) -> tuple[int, int]:
    """``(low, high)``: the partition's log start offset and high watermark, from
    ``consumer.get_watermark_offsets`` (ListOffsets to the leader), asked again while the
    answer is one of ``TRANSIENT_WATERMARK_ERRORS`` (a topic created a moment ago can be
    missing from this client's metadata even after every broker has its leader).

    Raises:
        KafkaException: any other error, at once.
        WaitTimeout: still transient after ``timeout_s`` seconds (the last error is named).
    """
    last: list[str] = []

    def ask() -> tuple[int, int] | None:
        try:
            return tuple(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5))
        except KafkaException as e:
            name = e.args[0].name() if e.args and hasattr(e.args[0], "name") else str(e)
            if name not in TRANSIENT_WATERMARK_ERRORS:
                raise
            last[:] = [name]
            return None

    return wait_until(ask, timeout_s=timeout_s, interval_s=0.2, what=f"the watermarks of {topic}-{partition}",
                      on_timeout=lambda: f"last error: {last}")
