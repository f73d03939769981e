"""Coordinators: which broker holds a consumer group's or a transactional id's state, and
what it keeps there.

A group's committed offsets and metadata live in one partition of the internal topic
``__consumer_offsets``; a transactional id's state in one partition of
``__transaction_state``. Which one is ``partitionFor``: ``Utils.abs(key.hashCode()) %
partitions``, with Java's ``String.hashCode`` over UTF-16 code units. The leader of that
partition is the coordinator (group coordinator, transaction coordinator).

==============================  ==================================================================
``java_string_hash``            Java's ``String.hashCode()`` (int32)
``java_abs``                    Kafka's ``Utils.abs`` (``Integer.MIN_VALUE`` -> 0)
``partition_for``               the partition of ``__consumer_offsets``/``__transaction_state``
``partition_leaders``           partition -> leader broker id of any topic (metadata)
``partition_leader``            one partition's leader, None if the cluster does not answer
``group_coordinator``           a group's coordinator as DescribeGroups reports it
``transaction_coordinator``     ``(partition, broker)`` for a transactional id, computed
``committed_offsets``           a group's committed offsets (OffsetFetch)
``commit_offset``               commit an offset for a group without joining it (OffsetCommit)
``commit_home``                 the ``__consumer_offsets`` partition of a group, its leader, the coordinator
``describe_group_offsets``      ``kafka-consumer-groups --describe``, parsed
``decode_group_record``         a GroupMetadata/ConsumerGroupMetadata record of ``__consumer_offsets``
``decode_offset_commit_key``    an OffsetCommit record's key (group, topic, partition)
==============================  ==================================================================

Sources (Kafka 4.3): clients ``org.apache.kafka.common.utils.Utils.abs``; group-coordinator
``GroupCoordinatorService.partitionFor``; transaction-coordinator
``TransactionStateManager.partitionFor``; ``group-coordinator/src/main/resources/common/message/``
``*Key.json`` and ``*Value.json`` (record types of ``__consumer_offsets``); KIP-98
("Transaction Coordinator"), KIP-848 (consumer groups keep the mapping); Java
``String.hashCode`` (JDK API documentation).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from typing import TYPE_CHECKING

from .errors import KafkalabError
from .protocol import read_uvarint

if TYPE_CHECKING:
    from . import cluster

#: The internal topic that holds transaction state.
TRANSACTION_STATE = "__transaction_state"

_INT32_MIN = -(1 << 31)


# ----------------------------------------------------------------------------- partitionFor


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: ``s[0]*31^(n-1) + ... + s[n-1]`` over the UTF-16 code
    units of ``s`` (a character outside the BMP counts as its two surrogates), as a signed
    32-bit int. ``java_string_hash("hello") == 99162322``."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs`` of an int32: ``Math.abs``, except ``Integer.MIN_VALUE`` -> 0 (where
    ``Math.abs`` would stay negative). Not ``Utils.toPositive`` (``n & 0x7fffffff``, the
    producer partitioner's), which gives another value for every other negative ``n``."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` that holds group ``key``'s offsets, or of
    ``__transaction_state`` that holds transactional id ``key``'s state:
    ``Utils.abs(key.hashCode()) % partitions``. Its leader is the coordinator.

    Args:
        key: a ``group.id`` or a ``transactional.id``.
        partitions: partitions of the internal topic (``offsets.topic.num.partitions``,
            default 50; ``transaction.state.log.num.partitions``, default 50).

    Raises:
        ValueError: ``partitions`` < 1.

    Source: ``GroupCoordinatorService.partitionFor``, ``TransactionStateManager.partitionFor``.
    """
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return java_abs(java_string_hash(key)) % partitions


# ----------------------------------------------------------------------------- coordinator lookup


def partition_leaders(topic: str, timeout_s: float = 10.0) -> dict[int, int]:
    """Partition -> leader broker id of ``topic``, from the cluster metadata (-1: no leader);
    empty while the broker asked does not know the topic (not created, or not yet in its
    metadata: a wait can poll this).

    Raises:
        KafkaException: no broker answered within ``timeout_s``.
    """
    from . import workloads

    tm = workloads.admin().list_topics(topic, timeout=timeout_s).topics.get(topic)
    return {p: m.leader for p, m in sorted(tm.partitions.items())} if tm is not None else {}


def leader_log_files(topic: str, partitions: int, status: "cluster.ClusterStatus | None" = None) -> list[str]:
    """The ``.log`` segment files of each partition of ``topic`` on its leader broker.

    Raises:
        KafkalabError: the cluster runs in containers (no data folder on this machine), or a
            partition folder is missing.
        WaitTimeout: the metadata named no leader for some partition within 10 s.
    """
    from pathlib import Path

    from . import cluster

    from .waiting import wait_until

    status = status or cluster.status()

    def known() -> dict[int, int] | None:
        leaders = partition_leaders(topic)
        return leaders if all(leaders.get(p, -1) >= 0 for p in range(partitions)) else None

    leaders = wait_until(known, timeout_s=10, interval_s=0.1, what=f"a leader for each of {partitions} partitions of {topic}")
    files: list[str] = []
    for p in range(partitions):
        leader = leaders[p]
        data_dir = Path(status.brokers[leader].data_dir)
        folder = data_dir / f"{topic}-{p}"
        if not folder.is_dir():
            raise KafkalabError(f"no folder {folder}: kafka-dump-log needs the brokers' data folders on this "
                                f"machine (local backend; the compose backend keeps them in volumes)")
        files.extend(str(f) for f in sorted(folder.glob("*.log")))
    return files


def partition_leader(topic: str, partition: int, timeout_s: float = 5.0) -> int | None:
    """The leader broker id of ``topic``-``partition``, or None if no broker answered within
    ``timeout_s``.

    Raises:
        KafkalabError: the cluster answered but has no such topic or partition.
    """
    from confluent_kafka import KafkaException

    try:
        leaders = partition_leaders(topic, timeout_s)
    except KafkaException:
        return None
    if partition not in leaders:
        raise KafkalabError(f"no partition {topic}-{partition} in the cluster metadata")
    return leaders[partition]


def group_coordinator(group_id: str, timeout_s: float = 10.0) -> int:
    """Broker id of ``group_id``'s coordinator, as DescribeGroups reports it.

    Raises:
        TimeoutError: no answer within ``timeout_s``; KafkaException: the broker's error.
    """
    from . import workloads

    return workloads.describe_group(group_id, timeout_s).coordinator.id


def transaction_state_leaders(timeout_s: float = 60.0) -> dict[int, int]:
    """Partition -> leader broker id of ``__transaction_state``, every partition led; the topic
    is created first if no transactional producer has run on this cluster yet. The broker
    creates it when a producer first looks for a transaction coordinator (FindCoordinator,
    key type TRANSACTION), so a producer with a transactional id of its own, used for nothing
    else (``kafkalab-transaction-state``), calls ``init_transactions`` and closes.

    Raises:
        WaitTimeout: the topic, or a leader for each of its partitions, not there within
            ``timeout_s``; KafkaException: ``init_transactions`` failed.
    """
    from confluent_kafka import Producer

    from . import config
    from .waiting import wait_until

    def every_partition_led() -> dict[int, int] | None:
        leaders = partition_leaders(TRANSACTION_STATE)
        return leaders if leaders and min(leaders.values()) >= 0 else None

    if not partition_leaders(TRANSACTION_STATE):
        Producer({"bootstrap.servers": config.bootstrap_servers(), "log_level": 3,
                  "transactional.id": "kafkalab-transaction-state"}).init_transactions(timeout_s)
    return wait_until(every_partition_led, timeout_s=timeout_s,
                      what=f"a leader for every partition of {TRANSACTION_STATE}")


def transaction_coordinator(transactional_id: str, leaders: dict[int, int] | None = None) -> tuple[int, int]:
    """``(partition of __transaction_state, broker id of its leader)`` for ``transactional_id``,
    computed as the broker does (``partition_for``).

    Args:
        leaders: ``partition_leaders("__transaction_state")`` if already read; else
            ``transaction_state_leaders()`` reads them, creating the topic on a cluster where
            no transaction has run yet.

    Raises:
        WaitTimeout: as ``transaction_state_leaders``.
    """
    leaders = leaders or transaction_state_leaders()
    p = partition_for(transactional_id, len(leaders))
    return p, leaders[p]


# ----------------------------------------------------------------------------- committed offsets


def committed_offsets(group_id: str, topic: str | None = None, timeout_s: float = 10.0) -> dict[int, int]:
    """partition -> committed offset of ``group_id`` (partitions with no commit left out), from
    the group coordinator (AdminClient ``list_consumer_group_offsets``, OffsetFetch). With
    ``topic``, that topic's partitions only.

    Raises:
        TimeoutError: no answer within ``timeout_s``; KafkaException: the broker's error.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions

    from . import workloads

    request = [ConsumerGroupTopicPartitions(group_id)]
    result = workloads.group_request(lambda o: workloads.admin().list_consumer_group_offsets(request, **o),
                                     timeout_s, group_id)
    return {tp.partition: tp.offset for tp in result.topic_partitions
            if tp.offset >= 0 and (topic is None or tp.topic == topic)}


def commit_offset(group_id: str, topic: str, partition: int, offset: int, timeout_s: float = 10.0) -> None:
    """Commit ``offset`` for ``group_id`` on ``topic``-``partition`` without joining the group
    (what a consumer that read that far and stopped would have left).

    Raises:
        KafkaException: the commit failed.
    """
    from confluent_kafka import Consumer, TopicPartition

    from . import config

    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": group_id, "log_level": 3})
    try:
        c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        c.close()


@dataclass
class CommitHome:
    """Where a group's commits live: ``__consumer_offsets`` partition ``partition`` (of
    ``partitions``, replication ``replicas``, ``cleanup.policy`` ``cleanup_policy``), whose
    leader is broker ``leader``; ``coordinator`` is the broker the group's coordinator runs on."""

    group_id: str
    partition: int
    partitions: int
    replicas: int
    cleanup_policy: str
    leader: int
    coordinator: int


def commit_home(group_id: str, timeout_s: float = 10.0) -> CommitHome:
    """Look up ``CommitHome`` with the AdminClient (metadata, DescribeConfigs of the topic,
    DescribeGroups); the partition is ``partition_for(group_id, partitions)``.

    Raises:
        KafkalabError: ``__consumer_offsets`` does not exist yet (no group ever committed).
    """
    from . import admin, workloads

    topic = "__consumer_offsets"
    md = workloads.admin().list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise KafkalabError(f"{topic} does not exist yet: no consumer group has committed on this cluster")
    n = len(md.partitions)
    p = partition_for(group_id, n)
    policy = admin.describe_config("topic", topic, ["cleanup.policy"], timeout_s)["cleanup.policy"].value
    return CommitHome(group_id, p, n, len(md.partitions[p].replicas), policy, md.partitions[p].leader,
                      group_coordinator(group_id, timeout_s))


@dataclass
class GroupDescribe:
    """``kafka-consumer-groups --describe --group G`` (Kafka's own CLI, kafka-tools 4.4.0):
    the raw ``text`` and its table as ``rows`` of dicts keyed by the header (``TOPIC``,
    ``PARTITION``, ``CURRENT-OFFSET``, ``LOG-END-OFFSET``, ``LAG``, ``CONSUMER-ID``...)."""

    group_id: str
    text: str
    rows: list[dict[str, str]]

    def column(self, name: str) -> dict[int, int | None]:
        """partition -> the integer in column ``name`` (None for ``-``)."""
        return {int(r["PARTITION"]): (None if r[name] == "-" else int(r[name])) for r in self.rows}


def describe_group_offsets(group_id: str) -> GroupDescribe:
    """Run ``kafka-consumer-groups --describe --group GROUP`` (a JVM: a few seconds) and parse it.

    Raises:
        KafkalabError: the tool failed (from ``kafkalab.cluster.tool``).
    """
    from . import cluster

    cp = cluster.tool("kafka-consumer-groups", "--describe", "--group", group_id, timeout_s=60)
    return GroupDescribe(group_id, cp.stdout, cluster.parse_group_table(cp.stdout))


# ----------------------------------------------------------------------------- __consumer_offsets records


@dataclass(frozen=True)
class GroupRecord:
    """One group record of ``__consumer_offsets``: ``kind`` ``classic`` (GroupMetadata,
    record type 2) or ``consumer`` (ConsumerGroupMetadata, type 3, KIP-848); ``generation``
    the classic generation id or the KIP-848 group epoch, None for a tombstone."""

    group_id: str
    kind: str
    generation: int | None


def decode_group_record(key: bytes | None, value: bytes | None) -> GroupRecord | None:
    """Decode the key and (start of the) value of a ``__consumer_offsets`` record.

    Key: int16 record type, then the group id as int16-length string. Types 2
    (``GroupMetadataKey``/``Value``: value versions 0-3 start with an int16-length
    ``protocolType`` string, version 4+ is flexible with a compact string, then int32
    ``generation``) and 3 (``ConsumerGroupMetadataKey``/``Value`` version 0: int32 ``Epoch``)
    are decoded; every other type (offset commits, member and assignment records) returns None.
    Source: Kafka 4.3 ``group-coordinator/src/main/resources/common/message/*.json``.

    Raises:
        ValueError: a type 2 or 3 record too short for its schema.
    """
    if key is None or len(key) < 4:
        return None
    rtype = struct.unpack_from(">h", key, 0)[0]
    if rtype not in (2, 3):
        return None
    try:
        (glen,) = struct.unpack_from(">h", key, 2)
        group = key[4:4 + glen].decode("utf-8")
        kind = "classic" if rtype == 2 else "consumer"
        if value is None:
            return GroupRecord(group, kind, None)
        (version,) = struct.unpack_from(">h", value, 0)
        if rtype == 3:
            return GroupRecord(group, kind, struct.unpack_from(">i", value, 2)[0])
        if version >= 4:
            n, pos = read_uvarint(value, 2)
            pos += max(n - 1, 0)
        else:
            (slen,) = struct.unpack_from(">h", value, 2)
            pos = 4 + max(slen, 0)
        return GroupRecord(group, kind, struct.unpack_from(">i", value, pos)[0])
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed group record of type {rtype}: {e}") from None


def read_generations(group_id: str, since_ms: int, timeout_s: float = 15.0) -> list[dict]:
    """Every generation (classic) or group epoch (KIP-848) the coordinator wrote for
    ``group_id`` at or after ``since_ms`` (ms since the epoch), oldest first, as
    ``{"ts_ms", "generation", "kind", "offset"}`` (``ts_ms``: the record's timestamp, set by
    the coordinator). Tombstones are skipped.

    Reads the one ``__consumer_offsets`` partition of the group (``partition_for``) from
    the offset of ``since_ms`` to its end, with an assign()-only consumer (no group).

    Raises:
        WaitTimeout: the end of the partition was not reached within ``timeout_s``.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from . import config
    from .waiting import wait_until

    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": "kafkalab-generations-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3})
    try:
        md = c.list_topics("__consumer_offsets", timeout=timeout_s)
        n = len(md.topics["__consumer_offsets"].partitions)
        p = partition_for(group_id, n)
        (tp,) = c.offsets_for_times([TopicPartition("__consumer_offsets", p, since_ms)], timeout=timeout_s)
        if tp.offset < 0:  # nothing written since
            return []
        c.assign([tp])
        out: list[dict] = []
        done = {"eof": False}

        def drained() -> bool:
            m = c.poll(0.2)
            if m is None:
                return False
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done["eof"] = True
                    return True
                raise KafkalabError(f"reading __consumer_offsets-{p}: {m.error().str()}")
            rec = decode_group_record(m.key(), m.value())
            if rec is not None and rec.group_id == group_id and rec.generation is not None:
                out.append({"ts_ms": m.timestamp()[1], "generation": rec.generation, "kind": rec.kind,
                            "offset": m.offset()})
            return False

        wait_until(drained, timeout_s=timeout_s, interval_s=0, what=f"the end of __consumer_offsets-{p}")
        return out
    finally:
        c.close()


@dataclass(frozen=True)
class OffsetCommitKey:
    """The key of an offset commit record of ``__consumer_offsets`` (``OffsetCommitKey``,
    record types 0 and 1): which group committed for which topic partition."""

    group_id: str
    topic: str
    partition: int


def decode_offset_commit_key(key: bytes | None) -> OffsetCommitKey | None:
    """Decode an offset commit key: int16 record type (0 or 1), the group id and the topic as
    int16-length strings, int32 partition. Another record type (or a short key) -> None.
    Source: Kafka 4.3 ``group-coordinator/src/main/resources/common/message/OffsetCommitKey.json``."""
    if key is None or len(key) < 2 or struct.unpack_from(">h", key, 0)[0] not in (0, 1):
        return None
    try:
        (glen,) = struct.unpack_from(">h", key, 2)
        group = key[4:4 + glen].decode("utf-8")
        pos = 4 + glen
        (tlen,) = struct.unpack_from(">h", key, pos)
        topic = key[pos + 2:pos + 2 + tlen].decode("utf-8")
        (partition,) = struct.unpack_from(">i", key, pos + 2 + tlen)
    except (struct.error, UnicodeDecodeError):
        return None
    return OffsetCommitKey(group, topic, partition)
