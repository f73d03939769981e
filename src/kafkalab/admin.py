"""Topic and group administration: create topics (placed on given brokers or not), delete topics,
delete groups (consumer and share groups), describe and alter configs, list offsets, describe a
share group; the leader and ISR each broker reports, and waits until they agree.

One of each, used by every experiment, notebook and test. They go through the shared
AdminClient ``kafkalab.workloads.admin()`` (kept alive on purpose: the futures of an
AdminClient that was garbage-collected never complete).

Sources: Kafka protocol CreateTopics, DeleteTopics, DeleteGroups, DescribeConfigs and ListOffsets
(Kafka documentation 4.3, "The Protocol", and Configuration); KIP-464 (``replication_factor=-1``: the broker's
``default.replication.factor``); confluent-kafka ``AdminClient``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, OffsetSpec, ResourceType

from . import cluster, config, protocol
from .errors import KafkalabError, WaitTimeout
from .waiting import wait_until
from .workloads import admin, group_request


def broker_topics(host: str, port: int, topics: list[str], timeout_s: float = 5.0) -> dict[str, protocol.TopicMetadata]:
    """What one broker's own metadata cache says about ``topics`` (``broker_metadata``'s topics)."""
    return broker_metadata(host, port, topics, timeout_s).topics


#: One broker's own Metadata answer (``cluster.broker_metadata``; it lives with the nodes, since the
#: compose backend's readiness asks it too).
broker_metadata = cluster.broker_metadata


#: How long ``_every_broker`` waits for one broker's Metadata answer, seconds.
BROKER_METADATA_TIMEOUT_S = 2.0


def _every_broker(check) -> bool:
    """``check(host, port)`` holds on every broker the cluster lists (a killed broker drops
    out of the list once fenced) that answers within ``BROKER_METADATA_TIMEOUT_S``: a broker
    that cannot answer (paused, or dying) cannot hand a client stale metadata either. False
    when no broker answered."""
    md = admin().list_topics(timeout=5)
    answered = 0
    for b in md.brokers.values():
        try:
            ok = check(b.host, b.port)
        except OSError:
            continue
        if not ok:
            return False
        answered += 1
    return answered > 0


def create_topics(
    topics: dict[str, int],
    replication_factor: int = 3,
    topic_config: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create ``topics`` (name -> partition count) and wait until every partition has a leader
    in the metadata of every live broker, each asked on its own (``broker_topics``): a client
    created next learns the topic from whichever broker it asks.

    Args:
        replication_factor: replicas per partition; -1 lets the controller apply the cluster's
            ``default.replication.factor`` (KIP-464; 3 in this lab).
        topic_config: topic-level configs, e.g. ``{"segment.bytes": "1048576"}``.
        timeout_s: bound of the CreateTopics request and of the wait for leaders, seconds.

    Raises:
        KafkalabError: a topic could not be created (e.g. it exists: names must be unique per
            run, see ``kafkalab.runscope``), with the broker's message.
        WaitTimeout: leaders not visible within ``timeout_s``.
    """
    _create(admin(), [NewTopic(t, num_partitions=n, replication_factor=replication_factor, config=topic_config or {})
                      for t, n in topics.items()], timeout_s)

    def known(host: str, port: int) -> bool:
        seen = broker_topics(host, port, list(topics), timeout_s=BROKER_METADATA_TIMEOUT_S)
        return all(t in seen and seen[t].error_code == 0 and len(seen[t].leaders) == n
                   and min(seen[t].leaders.values()) >= 0 for t, n in topics.items())

    wait_until(lambda: _every_broker(known), timeout_s=timeout_s,
               what=f"leaders for every partition of {sorted(topics)} on every broker")


def create_placed_topics(topics: Mapping[str, Mapping[str, str]], replicas: Sequence[int], partitions: int = 1,
                         timeout_s: float = 30.0, brokers: Iterable[int] | None = None) -> None:
    """Create ``topics`` (name -> its topic-level configs, ``{}`` for none) with ``partitions``
    partitions each, every partition placed on the broker ids ``replicas`` in this order: the
    first is the preferred leader (an explicit replica assignment, CreateTopics). It returns
    once the controller created them; unlike ``create_topics`` it does not wait for the
    brokers' metadata, since the caller waits for the leader and ISR it placed (a placement
    on a broker that is down or paused leaves a partition without a leader or a full ISR).

    Args:
        replicas: broker ids (int), leader first.
        timeout_s: bound of the CreateTopics request, seconds.
        brokers: send the request through these broker ids only (``client_for``: others may
            be paused or down); None: the shared AdminClient.

    Raises:
        KafkalabError: a topic could not be created (it exists, a config or a broker id is
            refused, no answer within ``timeout_s``), with the broker's message.

    Source: Kafka protocol CreateTopics (``Assignments``: "the manual partition assignment");
    confluent-kafka ``NewTopic(replica_assignment=...)``.
    """
    _create(admin() if brokers is None else client_for(brokers),
            [NewTopic(t, partitions, replica_assignment=[list(replicas)] * partitions, config=dict(conf))
             for t, conf in topics.items()], timeout_s)


def _create(client: AdminClient, new_topics: list[NewTopic], timeout_s: float) -> None:
    """CreateTopics through ``client``; a topic refused raises KafkalabError with the broker's message."""
    for name, fut in client.create_topics(new_topics, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as e:
            raise KafkalabError(f"could not create topic {name!r}: {e.args[0].str()}") from None


def bootstrap_of(brokers: Iterable[int]) -> str:
    """``bootstrap.servers`` naming the CLIENT listeners of ``brokers`` (ids) only."""
    return ",".join(config.Topology().node(b).listeners()["CLIENT"] for b in brokers)


def client_for(brokers: Iterable[int]) -> AdminClient:
    """A fresh AdminClient bootstrapped on the CLIENT listeners of ``brokers`` (ids) only: for
    when other brokers are paused (a paused broker accepts connections and never answers, so a
    client that knows it may wait on it) or down."""
    return AdminClient({"log_level": 0, "socket.connection.setup.timeout.ms": 2000,
                        "bootstrap.servers": bootstrap_of(brokers)})


def partition_states(brokers: Iterable[int], topics: Iterable[str],
                     timeout_s: float = 3.0) -> dict[tuple[str, int], tuple[int, list[int]]]:
    """``(topic, partition) -> (leader, ISR)`` of ``topics`` as ``brokers`` (ids) alone report
    them (``client_for``); leader -1: none. A topic they do not know is left out.

    Raises:
        KafkaException: no answer within ``timeout_s`` (seconds).
    """
    md = client_for(brokers).list_topics(timeout=timeout_s)
    return {(t, p.id): (p.leader, sorted(p.isrs)) for t in topics
            if (tm := md.topics.get(t)) is not None and tm.error is None for p in tm.partitions.values()}


def wait_partitions(topics: list[str], partitions: int, brokers: list[int], condition: Callable[[tuple], bool],
                    what: str, timeout_s: float) -> dict[tuple[str, int], tuple[int, list[int]]]:
    """Until ``brokers`` (ids) list all ``partitions`` partitions of each of ``topics`` and
    ``condition((leader, isr))`` holds for each (``partition_states``); returns those states.

    Raises:
        WaitTimeout: not within ``timeout_s`` (seconds); the message names ``what`` and the last
            states seen.
    """
    last: dict = {}

    def check():
        nonlocal last
        try:
            last = partition_states(brokers, topics, timeout_s=2.0)
        except KafkaException:
            return None
        ok = len(last) == len(topics) * partitions and all(condition(v) for v in last.values())
        return last if ok else None

    return wait_until(check, timeout_s=timeout_s, interval_s=0.2, what=what,
                      on_timeout=lambda: f"last seen (leader, isr): {last}")


def wait_brokers_agree(topics: list[str], partitions: int, condition: Callable[[tuple], bool] = lambda v: True,
                       what: str = "", timeout_s: float = 60.0) -> None:
    """Until every broker, asked one by one, lists every partition of ``topics`` and ``condition``
    holds for each (leader, ISR): a broker learns a new topic, or a new leader, a moment after the
    controller decided it (KRaft metadata propagation), and a client that asked a broker still
    behind would act on the old state (DescribeConfigs: UNKNOWN_TOPIC_OR_PARTITION; a fresh
    consumer: the old leader, NOT_LEADER_OR_FOLLOWER).

    Raises:
        WaitTimeout: some broker did not show it within ``timeout_s`` (seconds).
    """
    for b in config.BROKER_IDS:
        wait_partitions(topics, partitions, [b], condition, f"broker {b} showing {what or 'the topics'}", timeout_s)


def wait_leaders_serving(partitions: list[tuple[str, int]], timeout_s: float = 60.0) -> None:
    """Until the leader of every partition answers ListOffsets as its leader. A broker names
    itself leader in its metadata a moment before its partition applies the change (KRaft
    ``BrokerMetadataPublisher``), and answers NOT_LEADER_OR_FOLLOWER meanwhile; a fresh client
    that asks then would see the error (librdkafka's ``get_watermark_offsets`` does not retry it).

    Raises:
        WaitTimeout: some leader did not answer within ``timeout_s`` (seconds).
    """
    def serving() -> bool:
        try:
            list_offsets(partitions, brokers=config.BROKER_IDS, timeout_s=5.0)
            return True
        except KafkaException:
            return False

    wait_until(serving, timeout_s=timeout_s, interval_s=0.2, what=f"the leaders of {partitions} serving ListOffsets")


def delete_topics(names: Iterable[str], timeout_s: float = 30.0, wait_gone: bool = True) -> None:
    """Delete topics, ignoring ones that do not exist, and (``wait_gone``) wait until no live
    broker's metadata lists them (each asked on its own, ``broker_topics``), so a check right
    after sees them gone whichever broker it asks.

    Raises:
        WaitTimeout: a topic is still listed after ``timeout_s``.
    """
    names = sorted(set(names))
    if not names:
        return
    a = admin()
    for fut in a.delete_topics(names, operation_timeout=timeout_s).values():
        try:
            fut.result()
        except KafkaException:
            pass  # UNKNOWN_TOPIC_OR_PART: never created, or already gone
    if wait_gone:
        def gone(host: str, port: int) -> bool:
            seen = broker_topics(host, port, names, timeout_s=BROKER_METADATA_TIMEOUT_S)
            return all(m.error_code == protocol.UNKNOWN_TOPIC_OR_PARTITION for m in seen.values())

        wait_until(lambda: _every_broker(gone), timeout_s=timeout_s,
                   what=f"topics {names} gone from the metadata of every broker")


def delete_groups(group_ids: Iterable[str], timeout_s: float = 15.0) -> list[str]:
    """Delete consumer groups, retrying while the coordinator answers NON_EMPTY_GROUP (a
    member's LeaveGroup still in flight, or a static member that stays until its
    ``session.timeout.ms`` runs out), up to ``timeout_s``. A group that does not exist
    (GROUP_ID_NOT_FOUND) counts as deleted. Kafka keeps the group's group configs
    (``delete_group_configs`` removes them). Best effort, for cleanup: never raises.

    A group whose members all left is EMPTY but stays listed (classic and KIP-848 alike):
    deleting it leaves the cluster as it was found.

    Returns:
        The groups still there after ``timeout_s`` (empty list: all gone), sorted.
    """
    pending = set(group_ids)

    def attempt() -> bool:
        for g in sorted(pending):  # one group per request (workloads.group_request)
            try:
                group_request(lambda o: admin().delete_consumer_groups([g], **o), 5, g)
                pending.discard(g)
            except KafkaException as e:
                if e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                    pending.discard(g)
            except (TimeoutError, WaitTimeout):
                pass  # ask again
        return not pending

    if pending:
        try:
            wait_until(attempt, timeout_s=timeout_s, interval_s=0.3, what=f"consumer groups {sorted(pending)} deleted")
        except (WaitTimeout, KafkaException):
            pass
    return sorted(pending)


def metadata_barrier(timeout_s: float = 30.0) -> None:
    """Return once every live broker has applied every metadata change the controller committed
    before this call (a config change, a topic deletion...). Brokers replay the metadata log in
    order, so a topic created now and seen by each broker (``create_topics`` asks each one) is
    behind every earlier change; the topic (1 partition, 1 replica) is deleted again.

    Raises:
        WaitTimeout: a broker did not show the barrier topic within ``timeout_s`` (s).
        KafkalabError: the topic could not be created.
    """
    name = f"kafkalab-barrier-{uuid.uuid4().hex[:12]}"
    try:
        create_topics({name: 1}, replication_factor=1, timeout_s=timeout_s)
    finally:
        delete_topics([name], timeout_s=timeout_s, wait_gone=False)


def delete_group_configs(group_ids: list[str], timeout_s: float = 15.0) -> None:
    """Remove every group config set on ``group_ids`` (IncrementalAlterConfigs DELETE of each
    entry whose source is GROUP_CONFIG). A group's configs outlive the group: DeleteGroups
    leaves them (measured on Kafka 4.3.1: ``consumer.heartbeat.interval.ms`` still 6000,
    GROUP_CONFIG, after the group was deleted), and a group of the same id would inherit them.
    It returns once every broker has applied the change (``metadata_barrier``: DescribeConfigs
    goes to any one broker, so one broker that no longer shows them says nothing of the others;
    seen in CI), or after ``timeout_s`` (s). Best effort, for cleanup: never raises."""
    try:
        changed = False
        for g in group_ids:  # a group's own entries: source GROUP_CONFIG (describe_config)
            own = [k for k, v in describe_config("group", g, None, timeout_s).items() if v.source == "GROUP_CONFIG"]
            if own:
                alter_group_config(g, dict.fromkeys(own), timeout_s)  # None: DELETE
                changed = True
        if changed:
            metadata_barrier(timeout_s)
    except (KafkaException, KafkalabError, TimeoutError):  # WaitTimeout is a KafkalabError
        pass


@dataclass
class ConfigValue:
    """A config entry as DescribeConfigs returns it: value, where it comes from
    (``source``: DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG (cluster-wide),
    STATIC_BROKER_CONFIG (server.properties), DEFAULT_CONFIG...), whether it is Kafka's default,
    and Kafka's own default (``kafka_default``: the entry's DEFAULT_CONFIG synonym, None when
    it has none), so a value this lab overrides can be compared with the one Kafka ships."""

    name: str
    value: str | None
    source: str
    is_default: bool
    kafka_default: str | None = None


#: Resource kinds of ``describe_config``.
CONFIG_RESOURCES = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER, "group": ResourceType.GROUP}


def describe_config(kind: str, name: str | int | None, keys: Iterable[str] | None,
                    timeout_s: float = 10.0) -> dict[str, ConfigValue]:
    """DescribeConfigs of a ``kind`` ("topic", "broker" or "group") resource ``name`` (a topic
    name, a broker id or a group id; a broker None: the live broker with the lowest id, as the
    brokers here share one configuration), restricted to ``keys`` (None: every entry). A group's
    entries are its group configs (KIP-848, KIP-932: e.g. ``share.record.lock.duration.ms``); one
    not set on the group shows the broker's value as DEFAULT_CONFIG. ``timeout_s``: seconds.

    Raises:
        KafkalabError: unknown kind, or a key the resource does not have.
        KafkaException: no answer within ``timeout_s``.
    """
    types = CONFIG_RESOURCES
    if kind not in types:
        raise KafkalabError(f"kind must be one of {', '.join(types)}, not {kind!r}")
    if name is None and kind == "broker":
        name = min(admin().list_topics(timeout=timeout_s).brokers)
    res = ConfigResource(types[kind], str(name))
    entries = admin().describe_configs([res], request_timeout=timeout_s)[res].result(timeout=timeout_s + 5)
    out: dict[str, ConfigValue] = {}
    for key in sorted(entries) if keys is None else keys:
        if key not in entries:
            raise KafkalabError(f"{kind} {name} has no config {key!r}")
        e = entries[key]
        default = next((syn.value for syn in (e.synonyms or {}).values()
                        if ConfigSource(syn.source) == ConfigSource.DEFAULT_CONFIG), None)
        out[key] = ConfigValue(key, e.value, ConfigSource(e.source).name, bool(e.is_default), default)
    return out


#: ListOffsets specs of ``list_offsets``.
OFFSET_SPECS = {"earliest": OffsetSpec.earliest, "latest": OffsetSpec.latest}
#: Isolation levels of ``list_offsets``.
ISOLATION_LEVELS = {"read_uncommitted": IsolationLevel.READ_UNCOMMITTED, "read_committed": IsolationLevel.READ_COMMITTED}


def list_offsets(partitions: Iterable[tuple[str, int]], spec: str = "latest", isolation_level: str = "read_uncommitted",
                 brokers: Iterable[int] | None = None, timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> offset`` from ListOffsets (AdminClient): ``spec`` "earliest" (the
    log start offset) or "latest": the high watermark (one past the last replicated record) for
    ``isolation_level`` "read_uncommitted", the last stable offset for "read_committed" (KIP-98).
    ``brokers``: ask through these broker ids only (a fresh client bootstrapped on their CLIENT
    listeners, ``client_for``); None: the shared AdminClient.
    ``timeout_s``: seconds. A consumer's own query of one partition is ``consumers.watermarks``.

    Raises:
        KafkaException: no such topic or partition, a leader that does not answer as leader
            (NOT_LEADER_OR_FOLLOWER), or no answer within ``timeout_s``.
    """
    a = admin() if brokers is None else client_for(brokers)
    futs = a.list_offsets({TopicPartition(t, p): OFFSET_SPECS[spec]() for t, p in partitions},
                          isolation_level=ISOLATION_LEVELS[isolation_level], request_timeout=timeout_s)
    return {(tp.topic, tp.partition): f.result(timeout=timeout_s + 5).offset for tp, f in futs.items()}


def alter_group_config(group_id: str, configs: dict[str, str | int | None], timeout_s: float = 10.0) -> None:
    """Set group configs on ``group_id`` (IncrementalAlterConfigs on a GROUP resource, SET per
    key; a value None: DELETE, back to the broker's default), e.g.
    ``{"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": 5000}``.
    The group need not exist yet: the configs apply when it forms. Kafka keeps them after the
    group is deleted: ``delete_group_configs`` removes them.

    The controller answers once it has written the configs to the metadata log; each broker
    applies them when it replays that log, a moment later (seconds on a loaded machine). So
    this returns only once DescribeConfigs shows every value set. A broker that knows a topic
    created afterwards has applied them too (brokers replay the log in order): create the
    topic the group reads after this call, and ``create_topics`` waits for every broker.

    Raises:
        KafkalabError: the broker refused (an unknown key, or a value outside the broker's
            bounds such as ``group.share.min.record.lock.duration.ms``), with its message.
        WaitTimeout: DescribeConfigs did not show the values within ``timeout_s``.

    Source: KIP-848 and KIP-932 (group configs); Kafka documentation 4.3, "Group Configs".
    """
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    res = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) if v is None
        else ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    try:
        admin().incremental_alter_configs([res], request_timeout=timeout_s)[res].result(timeout=timeout_s + 5)
    except KafkaException as e:
        raise KafkalabError(f"group {group_id}: could not set {configs}: {e.args[0].str()}") from None
    wanted = {k: str(v) for k, v in configs.items() if v is not None}
    if wanted:
        wait_until(lambda: {k: v.value for k, v in describe_config("group", group_id, list(wanted)).items()} == wanted,
                   timeout_s=timeout_s, interval_s=0.1, what=f"the brokers to show group {group_id}'s configs {wanted}")


@dataclass
class ShareMember:
    """One member of a share group, as ``kafka-share-groups --describe --members`` shows it.

    Attributes:
        member_id: the member id the coordinator gave it (KIP-932, like KIP-848).
        client_id: its ``client.id``.
        member_epoch: its epoch.
        partitions: ``(topic, partition)`` pairs assigned to it; in a share group one
            partition can be assigned to several members.
    """

    member_id: str
    client_id: str
    member_epoch: int
    partitions: list[tuple[str, int]]


def _assignment(text: str) -> list[tuple[str, int]]:
    """``"t:0,1;u:2"`` (the tool's ASSIGNMENT column) as ``[("t", 0), ("t", 1), ("u", 2)]``."""
    out: list[tuple[str, int]] = []
    for part in text.split(";"):
        topic, _, numbers = part.rpartition(":")
        if topic and numbers:
            out.extend((topic, int(n)) for n in numbers.split(","))
    return out


def share_group_members(group_id: str, timeout_s: float = 60.0) -> list[ShareMember]:
    """The members of share group ``group_id`` and their assignments, from Kafka's own tool
    (``kafka-share-groups --describe --members --verbose``; confluent-kafka 2.16's
    AdminClient has no share-group calls). A JVM starts each time: about 2-3 s.

    Returns:
        Members sorted by ``client_id``; empty when the group has none or does not exist.

    Raises:
        KafkalabError: the tool failed.
    """
    cp = cluster.tool("kafka-share-groups", "--describe", "--group", group_id, "--members", "--verbose",
                      timeout_s=timeout_s, check=False)
    if cp.returncode != 0 and "does not exist" not in (cp.stderr + cp.stdout):
        raise KafkalabError(f"kafka-share-groups --describe --members exited {cp.returncode}: {cp.stderr.strip()}")
    rows = cluster.parse_group_table(cp.stdout)
    return sorted((ShareMember(r["CONSUMER-ID"], r["CLIENT-ID"], int(r["MEMBER-EPOCH"]), _assignment(r["ASSIGNMENT"]))
                   for r in rows if "CONSUMER-ID" in r), key=lambda m: m.client_id)


def share_group_offsets(group_id: str, timeout_s: float = 60.0) -> dict[tuple[str, int], dict[str, int | None]]:
    """Per share-partition of ``group_id``: the share-partition start offset (SPSO, KIP-932:
    below it every record is acknowledged or archived) and the lag, from
    ``kafka-share-groups --describe --offsets``. The SPSO is the state the share coordinator
    has persisted, which can trail the broker's in-memory state by a batch.

    Returns:
        ``{(topic, partition): {"start_offset": int | None, "lag": int | None}}`` ("-" as None).

    Raises:
        KafkalabError: the tool failed.
    """
    cp = cluster.tool("kafka-share-groups", "--describe", "--group", group_id, "--offsets", "--verbose",
                      timeout_s=timeout_s)

    def num(v: str) -> int | None:
        return int(v) if v.lstrip("-").isdigit() else None

    return {(r["TOPIC"], int(r["PARTITION"])): {"start_offset": num(r["START-OFFSET"]), "lag": num(r["LAG"])}
            for r in cluster.parse_group_table(cp.stdout) if "START-OFFSET" in r}
