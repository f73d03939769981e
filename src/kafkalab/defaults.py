"""Client defaults that differ between librdkafka (confluent-kafka) and the Java client.

confluent-kafka-python wraps librdkafka, a C client with its own defaults; the Java client
(``org.apache.kafka:kafka-clients``, also inside Spark's Kafka connector, Kafka Connect,
Kafka Streams and Kafka's own CLI tools) has others. An article written for one is wrong
for the other, and two producers with the same keys can put records in different
partitions. ``CLIENT_DEFAULTS`` is the table of notebook 00, with sources; the
partitioner functions let a notebook predict both clients' partitions and check them live.

Versions: librdkafka 2.16 (confluent-kafka 2.16.1, pyproject.toml); Java client 4.x
(Kafka 4.4.0; no default in this table changed from 4.3.1: the ``ConfigDef`` defaults of
``ProducerConfig``, ``ConsumerConfig`` and ``AdminClientConfig`` of both jars compared, 4.4.0 only
adds settings) unless a row says otherwise. Spark's connector bundles its own
kafka-clients (``kafka_clients_jar_version``), 3.9.2 with connector 4.2.0.

Sources: librdkafka CONFIGURATION.md (v2.16); Kafka documentation "Producer Configs" and
"Consumer Configs" (4.4); KIP-679 (producer idempotence on by default, 3.0);
librdkafka src/rdkafka_msg.c (``rd_kafka_msg_partitioner_consistent_random``: CRC32 of
the key modulo the partition count); Kafka clients ``Utils.murmur2`` and
``BuiltInPartitioner.partitionForKey`` (``toPositive(murmur2(key)) % numPartitions``).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

#: librdkafka minor version the table describes (confluent-kafka 2.16.1 ships librdkafka 2.16.0).
LIBRDKAFKA_VERSION = "2.16"
#: Java client version the table describes: the one of the brokers' own release.
JAVA_CLIENT_VERSION = "4.4"


@dataclass(frozen=True)
class ClientDefault:
    """One setting's default in both clients.

    Attributes:
        setting: the property name (librdkafka's; Java's where it differs, after a slash).
        librdkafka: librdkafka 2.16's default, as CONFIGURATION.md states it.
        java: the Java client's default (4.x), with the version it changed in.
        source: where both values come from.
        checked: where the lab asserts it live (notebook or "not checked live").
    """

    setting: str
    librdkafka: str
    java: str
    source: str
    checked: str


#: The table of FACTS.md "Clients: librdkafka is not the Java client", with sources.
CLIENT_DEFAULTS: tuple[ClientDefault, ...] = (
    ClientDefault(
        "enable.idempotence", "false", "true since 3.0 (KIP-679; in effect from 3.0.1/3.1.1/3.2.0, KAFKA-13598)",
        "librdkafka CONFIGURATION.md; Kafka Producer Configs; KIP-679",
        "00 (producer id in the batch header, kafka-dump-log); idempotence notebook"),
    ClientDefault(
        "acks", "all (-1)", "all since 3.0 (KIP-679; 1 before)",
        "librdkafka CONFIGURATION.md (topic property request.required.acks); Kafka Producer Configs",
        "replication notebook"),
    ClientDefault(
        "max.in.flight.requests.per.connection", "1000000 (5 when idempotent, must be <= 5)", "5",
        "librdkafka CONFIGURATION.md; Kafka Producer Configs",
        "ordering notebook"),
    ClientDefault(
        "enable.auto.commit / auto.commit.interval.ms", "true / 5000 ms", "true / 5000 ms",
        "librdkafka CONFIGURATION.md; Kafka Consumer Configs",
        "offset-commit notebook"),
    ClientDefault(
        "enable.auto.offset.store", "true (offset stored when poll hands the message over)",
        "(no such setting: commits the positions of the previous poll)",
        "librdkafka CONFIGURATION.md; KafkaConsumer javadoc",
        "offset-commit notebook"),
    ClientDefault(
        "partition.assignment.strategy", "range,roundrobin", "[RangeAssignor, CooperativeStickyAssignor] since 3.0",
        "librdkafka CONFIGURATION.md; Kafka Consumer Configs",
        "01 partition assignment"),
    ClientDefault(
        "isolation.level", "read_committed", "read_uncommitted",
        "librdkafka CONFIGURATION.md; Kafka Consumer Configs",
        "transactions notebook"),
    ClientDefault(
        "partitioner (keyed records)", "consistent_random: CRC32(key) % partitions",
        "murmur2: toPositive(murmur2(key)) % partitions",
        "librdkafka CONFIGURATION.md (partitioner) and rdkafka_msg.c; Kafka BuiltInPartitioner.partitionForKey",
        "00 (both clients, same keys)"),
)


def table() -> "pd.DataFrame":
    """``CLIENT_DEFAULTS`` as a pandas DataFrame indexed by setting, columns named with the versions."""
    import pandas as pd

    df = pd.DataFrame([asdict(d) for d in CLIENT_DEFAULTS]).set_index("setting")
    return df.rename(columns={"librdkafka": f"librdkafka {LIBRDKAFKA_VERSION}",
                              "java": f"Java client {JAVA_CLIENT_VERSION}"})


# ----------------------------------------------------------------------------- partitioners

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data``, as the Java client computes it (a signed int).

    A port of ``org.apache.kafka.common.utils.Utils.murmur2`` (seed 0x9747b28c, m 0x5bd1e995,
    r 24, little-endian 4-byte blocks, tail bytes folded in, final mix 13/15). Checked against
    the vectors of Kafka's ``UtilsTest.testMurmur2`` (tests/test_defaults.py).
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff`` (not ``abs``: abs(MIN_VALUE) overflows)."""
    return n & 0x7FFFFFFF


def java_partition(key: bytes, partitions: int) -> int:
    """Partition the Java client's default partitioner picks for a non-null ``key``:
    ``toPositive(murmur2(key)) % partitions`` (``BuiltInPartitioner.partitionForKey``;
    librdkafka's ``murmur2_random`` partitioner computes the same)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, not {partitions}")
    return to_positive(murmur2(key)) % partitions


def librdkafka_partition(key: bytes | None, partitions: int) -> int | None:
    """Partition librdkafka's default ``consistent_random`` partitioner picks: ``CRC32(key) %
    partitions`` (zlib's CRC-32, as ``rd_crc32``), or None for a null or empty key, which it
    places at random (sticky for ``sticky.partitioning.linger.ms``)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, not {partitions}")
    if not key:
        return None
    return zlib.crc32(key) % partitions


def kafka_clients_jar_version(jars: list[Path]) -> str | None:
    """Version of the ``kafka-clients-<version>.jar`` among ``jars`` (e.g. Spark's connector
    jars, ``kafkalab.spark.spark_jars()``), or None if there is none."""
    for jar in jars:
        m = re.fullmatch(r"kafka-clients-(\d+(?:\.\d+)*)\.jar", Path(jar).name)
        if m:
            return m.group(1)
    return None
