"""kafkalab.coordinators, pure parts: Java's String.hashCode, Kafka's Utils.abs and
partitionFor (values printed by OpenJDK 17 and Kafka's own functions), and the decoders of
``__consumer_offsets`` records on planted bytes. The coordinator lookups run against the live
cluster in tests/test_transactions.py and notebooks 03, 05 and 06."""

from __future__ import annotations

import struct

import pytest

from kafkalab import coordinators
from kafkalab.coordinators import java_abs, java_string_hash, partition_for

# ----------------------------------------------------------------------------- String.hashCode


@pytest.mark.parametrize("text, java", [
    # values printed by OpenJDK 17's String.hashCode()
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE
    ("orders-7", 1234322255), ("txn-r1a2b3c-abandoned-0", -870728823), ("offset-commit-r123456-group", 742816491),
    ("한글", 54620 * 31 + 44544), ("트랜잭션", 1653850671), ("오프셋 커밋", 783817724),
    ("\U0001F600 emoji", -1572615351),  # a surrogate pair: two UTF-16 code units
])
def test_java_string_hash_matches_javas_string_hashcode(text: str, java: int) -> None:
    assert java_string_hash(text) == java


def test_java_string_hash_counts_utf16_code_units_not_code_points() -> None:
    # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00, not the code point 0x1F600
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00 != 0x1F600
    assert java_string_hash("\ud83d") == 0xD83D, "a lone surrogate is one code unit, as in Java"


# ----------------------------------------------------------------------------- Utils.abs and partitionFor


def test_java_abs_is_kafkas_utils_abs_not_to_positive() -> None:
    assert java_abs(-(2**31)) == 0, "Utils.abs(Integer.MIN_VALUE) is 0 (Math.abs would stay negative)"
    assert java_abs(-5) == 5 and java_abs(7) == 7 and java_abs(2**31 - 1) == 2**31 - 1
    # Utils.toPositive (n & 0x7fffffff, the producer partitioner's) is another function: it agrees on
    # MIN_VALUE and on non-negative numbers only
    assert java_abs(-1) == 1 != (-1 & 0x7FFFFFFF)


@pytest.mark.parametrize("key, partitions, expected", [
    # Utils.abs(hashCode) % partitions (computed with Java 17)
    ("hello", 10, 2), ("hello", 50, 99162322 % 50), ("polygenelubricants", 10, 0), ("polygenelubricants", 50, 0),
    ("txn-r1a2b3c-abandoned-0", 10, 3), ("트랜잭션", 50, 21), ("orders-7", 50, 5),
    ("offset-commit-r123456-group", 10, 742816491 % 10),
])
def test_partition_for_is_kafkas_partition_for(key: str, partitions: int, expected: int) -> None:
    assert partition_for(key, partitions) == expected


def test_partition_for_a_negative_hash_and_its_bounds() -> None:
    h = java_string_hash("my-group-with-a-negative-hash-zz")
    assert h < 0 and partition_for("my-group-with-a-negative-hash-zz", 10) == abs(h) % 10
    assert all(0 <= partition_for(f"g{i}", 10) < 10 for i in range(200))
    with pytest.raises(ValueError):
        partition_for("x", 0)


# ----------------------------------------------------------------------------- __consumer_offsets records


def key(rtype: int, group: str) -> bytes:
    g = group.encode()
    return struct.pack(">hh", rtype, len(g)) + g


def test_decode_classic_group_metadata_v3_reads_the_generation() -> None:
    value = struct.pack(">h", 3) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 7) + b"\x00\x05range"
    assert coordinators.decode_group_record(key(2, "g1"), value) == coordinators.GroupRecord("g1", "classic", 7)


def test_decode_classic_group_metadata_v4_flexible_reads_the_generation() -> None:
    value = struct.pack(">h", 4) + bytes([len("consumer") + 1]) + b"consumer" + struct.pack(">i", 9) + b"\x06range"
    assert coordinators.decode_group_record(key(2, "g1"), value) == coordinators.GroupRecord("g1", "classic", 9)


def test_decode_empty_classic_group_has_generation_zero() -> None:
    # what the coordinator writes when a group is created: empty protocol type, generation 0
    value = struct.pack(">h", 3) + struct.pack(">h", 0) + struct.pack(">i", 0) + b"\xff\xff\xff\xff"
    assert coordinators.decode_group_record(key(2, "g1"), value).generation == 0


def test_decode_consumer_group_metadata_reads_the_group_epoch() -> None:
    value = struct.pack(">h", 0) + struct.pack(">i", 5) + b"\x01\x00\x08" + b"\x00" * 8
    assert coordinators.decode_group_record(key(3, "g2"), value) == coordinators.GroupRecord("g2", "consumer", 5)


def test_decode_tombstones_other_record_types_and_torn_records() -> None:
    assert coordinators.decode_group_record(key(3, "g2"), None) == coordinators.GroupRecord("g2", "consumer", None)
    assert coordinators.decode_group_record(key(1, "g"), b"\x00\x03" + b"\x00" * 20) is None  # offset commit
    assert coordinators.decode_group_record(key(5, "g"), b"\x00\x00") is None  # member metadata
    assert coordinators.decode_group_record(None, None) is None
    with pytest.raises(ValueError, match="malformed group record"):
        coordinators.decode_group_record(key(2, "g"), struct.pack(">h", 3) + struct.pack(">h", 8) + b"cons")


def test_decode_offset_commit_key_names_group_topic_and_partition() -> None:
    def commit_key(rtype: int, group: str, topic: str, partition: int) -> bytes:
        g, t = group.encode(), topic.encode()
        return struct.pack(">hh", rtype, len(g)) + g + struct.pack(">h", len(t)) + t + struct.pack(">i", partition)

    assert coordinators.decode_offset_commit_key(commit_key(1, "g-1", "orders", 3)) == \
        coordinators.OffsetCommitKey("g-1", "orders", 3)
    assert coordinators.decode_offset_commit_key(commit_key(0, "그룹", "t", 0)).group_id == "그룹"
    assert coordinators.decode_offset_commit_key(key(2, "g1")) is None, "a group metadata record is no commit"
    assert coordinators.decode_offset_commit_key(commit_key(1, "g", "t", 0)[:-2]) is None, "a torn key"
    assert coordinators.decode_offset_commit_key(None) is None
