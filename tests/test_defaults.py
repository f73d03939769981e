"""kafkalab.defaults: the client-defaults table and both clients' default partitioners."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalab import defaults

#: Kafka's own vectors: apache/kafka clients/src/test/java/org/apache/kafka/common/utils/
#: UtilsTest.java, testMurmur2 (signed 32-bit results of Utils.murmur2).
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("data,expected", KAFKA_MURMUR2_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_kafkas_utils_test_vectors(data: bytes, expected: int) -> None:
    assert defaults.murmur2(data) == expected


#: librdkafka's vectors of the Java client's murmur2 (src/rdmurmur2.c, unittest_murmur2,
#: "java_murmur2_results"), as unsigned 32-bit hex; they cover 1-byte tails and the empty key.
_UNALIGNED = "PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_JAVA_MURMUR2_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    _UNALIGNED.encode(): 0x78424F1C,
    _UNALIGNED[1:].encode(): 0x4A62B377,
    _UNALIGNED[2:].encode(): 0xE0E4E09E,
    _UNALIGNED[3:].encode(): 0x62B8B43F,
    b"": 0x106E08D9,
}


@pytest.mark.parametrize("data,expected", LIBRDKAFKA_JAVA_MURMUR2_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_librdkafkas_java_compatibility_vectors(data: bytes, expected: int) -> None:
    assert defaults.murmur2(data) & 0xFFFFFFFF == expected
    assert -(2**31) <= defaults.murmur2(data) < 2**31  # a Java int


def test_the_vectors_cover_every_tail_length() -> None:
    keys = [*KAFKA_MURMUR2_VECTORS, *LIBRDKAFKA_JAVA_MURMUR2_VECTORS]
    assert {len(k) % 4 for k in keys} == {0, 1, 2, 3}


def test_to_positive_masks_the_sign_bit_instead_of_abs() -> None:
    assert defaults.to_positive(-790332482) == 1357151166
    assert defaults.to_positive(-(2**31)) == 0  # abs() would overflow in Java
    assert defaults.to_positive(479470107) == 479470107


def test_java_partition_is_to_positive_murmur2_modulo_partitions() -> None:
    assert defaults.java_partition(b"foobar", 10) == 1357151166 % 10 == 6
    assert defaults.java_partition(b"abc", 3) == 479470107 % 3
    with pytest.raises(ValueError):
        defaults.java_partition(b"abc", 0)


#: librdkafka's own expectations for its consistent_random partitioner: confluentinc/librdkafka
#: tests/0048-partitioner.c, do_test_partitioners (CRC-32 values "acquired using the 'crc32'
#: command on OSX"; the test runs with 7 or 17 partitions). The key "23456" is its unaligned case.
LIBRDKAFKA_CONSISTENT_VECTORS = [
    (b"23456", 0xB1B451D7),
    (b"this is another string with more length to it perhaps", 0xB0150DF7),
    (b"hejsan", 0xD077037E),
]


@pytest.mark.parametrize("partitions", [7, 17])
@pytest.mark.parametrize("key, crc", LIBRDKAFKA_CONSISTENT_VECTORS)
def test_librdkafka_partition_matches_librdkafkas_partitioner_test(key: bytes, crc: int, partitions: int) -> None:
    assert defaults.librdkafka_partition(key, partitions) == crc % partitions


def test_librdkafka_places_null_and_empty_keys_at_random() -> None:
    assert defaults.librdkafka_partition(None, 3) is None
    assert defaults.librdkafka_partition(b"", 3) is None


def test_the_two_partitioners_disagree_on_some_keys() -> None:
    keys = [f"N{i}UA".encode() for i in range(30)]
    assert any(defaults.java_partition(k, 3) != defaults.librdkafka_partition(k, 3) for k in keys)


def test_table_has_every_facts_row_with_a_source_and_the_versions_in_the_headers() -> None:
    df = defaults.table()
    assert {"enable.idempotence", "acks", "isolation.level", "partition.assignment.strategy",
            "partitioner (keyed records)"} <= set(df.index)
    assert f"librdkafka {defaults.LIBRDKAFKA_VERSION}" in df.columns
    assert f"Java client {defaults.JAVA_CLIENT_VERSION}" in df.columns
    assert all(df["source"].str.len() > 0) and all(df["checked"].str.len() > 0)
    assert df.loc["enable.idempotence", f"librdkafka {defaults.LIBRDKAFKA_VERSION}"] == "false"


def test_librdkafka_version_of_the_table_is_the_one_installed() -> None:
    import confluent_kafka

    assert confluent_kafka.libversion()[0].startswith(defaults.LIBRDKAFKA_VERSION + ".")


def test_kafka_clients_jar_version_reads_the_file_name() -> None:
    jars = [Path("/x/spark-sql-kafka-0-10_2.13-4.2.0.jar"), Path("/x/kafka-clients-3.9.2.jar")]
    assert defaults.kafka_clients_jar_version(jars) == "3.9.2"
    assert defaults.kafka_clients_jar_version([Path("/x/commons-pool2-2.13.1.jar")]) is None
