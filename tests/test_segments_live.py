"""kafkalab.segments against Kafka's own ``kafka-dump-log`` (org.apache.kafka.tools.DumpLogSegments,
Kafka 4.3.1) on logs the live cluster wrote: plain (librdkafka defaults), idempotent, transactional
(committed and aborted, so with control batches), compressed with every codec, tombstones, null
keys, headers, a rolled segment and an active one, on every replica; and a compacted log whose
batches carry a delete horizon. The record contents are random per run (the seed is printed on
failure), so the parser meets data no test fixed in advance. Also ``kafkalab segments --json``
and ``kafkalab run segments_demo``.
"""

from __future__ import annotations

import json
import random
import string
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from kafkalab import admin, config, coordinators, dumplog, segments
from kafkalab.cli import segments_command
from kafkalab.experiments import segments_demo as demo
from kafkalab.runscope import RunScope

pytestmark = pytest.mark.cluster

ALPHABET = string.ascii_letters + string.digits + " .,:;!?-_/=+()[]{}" + "üé한글数据"


def consume_partition(topic: str, partition: int = 0, timeout_s: float = 15.0) -> list[tuple[int, bytes | None, bytes | None]]:
    """``(offset, key, value)`` of every record a consumer reads from ``topic``-``partition``,
    from the beginning to librdkafka's partition EOF event (a compacted partition has gaps)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from kafkalab.waiting import wait_until

    c = Consumer({"bootstrap.servers": config.bootstrap_servers(), "group.id": "kafkalab-segtest",
                  "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3})
    got: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])

        def at_end() -> bool:
            for msg in c.consume(num_messages=500, timeout=0.2):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return True
                    raise AssertionError(f"consumer error on {topic}-{partition}: {msg.error()}")
                got.append((msg.offset(), msg.key(), msg.value()))
            return False

        wait_until(at_end, timeout_s=timeout_s, interval_s=0.0, what=f"the end of {topic}-{partition}")
    finally:
        c.close()
    return got


def _text(rng: random.Random, n: int) -> bytes:
    return "".join(rng.choice(ALPHABET) for _ in range(n)).encode()


def _records(rng: random.Random, n: int, ts: int) -> list[tuple[bytes | None, bytes | None, list, int]]:
    out = []
    for _ in range(n):
        key = None if rng.random() < 0.1 else _text(rng, rng.randrange(0, 40))
        value = None if rng.random() < 0.1 else _text(rng, rng.choice([0, 5, 50, 300, 1500]))
        headers = [("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randrange(1, 8))),
                    None if rng.random() < 0.2 else _text(rng, rng.randrange(0, 20)))
                   for _ in range(rng.choice([0, 0, 1, 3]))]
        out.append((key, value, headers, ts + rng.randrange(0, 1000)))
    return out


def _produce(topic: str, conf: dict, records: list, transaction: str | None = None) -> None:
    p = Producer({"bootstrap.servers": config.bootstrap_servers(), "log_level": 3, **conf})
    if transaction:
        p.init_transactions(30)
        p.begin_transaction()
    for key, value, headers, ts in records:
        p.produce(topic, key=key, value=value, headers=headers or None, timestamp=ts, partition=0)
        p.poll(0)
    assert p.flush(30) == 0
    if transaction == "commit":
        p.commit_transaction(30)
    elif transaction == "abort":
        p.abort_transaction(30)


@pytest.fixture(scope="module")
def mixed():
    """A 1-partition topic (RF 3, ``index.interval.bytes=512``, ``segment.ms=60000``) written by
    every kind of producer, half with timestamps 10 minutes old so the segment rolls."""
    seed = time.time_ns()
    rng = random.Random(seed)
    with RunScope("segtest") as run:
        topic = run.topic("mixed")
        admin.create_topics({topic: 1}, topic_config={"index.interval.bytes": "512", "segment.ms": "60000"})
        old = int(time.time() * 1000) - 600_000
        _produce(topic, {"linger.ms": 5, "batch.num.messages": rng.randrange(2, 30)}, _records(rng, 150, old))
        _produce(topic, {"enable.idempotence": True, "linger.ms": 2}, _records(rng, 120, old + 1000))
        now = int(time.time() * 1000)
        _produce(topic, {"transactional.id": f"{topic}-tx"}, _records(rng, 40, now), transaction="commit")
        _produce(topic, {"transactional.id": f"{topic}-tx"}, _records(rng, 30, now), transaction="abort")
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            # repeated values: librdkafka sends a batch uncompressed when the codec does not
            # make it smaller, and random text does not always shrink under snappy
            compressible = [(k, None if v is None else (v + b"|") * 4, h, ts) for k, v, h, ts in _records(rng, 60, now)]
            _produce(topic, {"compression.type": codec, "linger.ms": 5}, compressible)
        _produce(topic, {"linger.ms": 0}, _records(rng, 30, now))
        end = admin.list_offsets([(topic, 0)])[(topic, 0)]
        yield {"topic": topic, "seed": seed, "end": end}


def _wait_replicas_complete(topic: str, end: int) -> dict[int, list[segments.Segment]]:
    """Every broker's replica read from disk once it holds batches up to ``end``."""
    out: dict[int, list[segments.Segment]] = {}

    def complete() -> bool:
        for b in config.BROKER_IDS:
            _, folder = segments.replica_dir(topic, 0, b)
            segs = segments.read_partition(folder)
            if not segs or segs[-1].next_offset < end:
                return False
            out[b] = segs
        return True

    from kafkalab.waiting import wait_until

    wait_until(complete, timeout_s=30, interval_s=0.3, what=f"every replica of {topic}-0 to reach offset {end}")
    # read again: a follower appends a batch to the .log a moment before its .index entry, so
    # the read that first saw the last batch may have missed that entry
    return {b: segments.read_partition(segments.replica_dir(topic, 0, b)[1]) for b in config.BROKER_IDS}


def test_reader_agrees_with_kafka_dump_log_on_every_replica_of_a_mixed_log(mixed) -> None:
    replicas = _wait_replicas_complete(mixed["topic"], mixed["end"])
    files = [str(s.log.with_suffix(suffix)) for segs in replicas.values() for s in segs for suffix in segments.SEGMENT_SUFFIXES]
    dumped = dumplog.run(files, print_data=True)
    for broker, segs in replicas.items():
        for s in segs:
            assert dumplog.diff_against_dump(s, dumped) == [], f"broker {broker} {s.log.name}, seed {mixed['seed']}"
    leader = replicas[coordinators.partition_leader(mixed["topic"], 0)]
    batches = [b for s in leader for b in s.batches]
    # the log holds what this test is about
    assert any(b.producer_id == -1 for b in batches), "plain librdkafka batches"
    assert any(b.producer_id >= 0 and b.base_sequence >= 0 and not b.is_transactional for b in batches), "idempotent batches"
    assert any(b.is_transactional and not b.is_control for b in batches), "transactional batches"
    assert {b.control.type for b in batches if b.is_control} == {"COMMIT", "ABORT"}, "both end transaction markers"
    assert {b.compression for b in batches} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert len(leader) >= 2 and any(s.index for s in leader[:-1]), "a rolled segment with index entries and an active one"
    assert all(b.crc_valid for b in batches)
    records = [r for b in batches if not b.is_control for r in b.records]
    assert any(r.key is None for r in records) and any(r.value is None for r in records) and any(r.headers for r in records)


def test_cli_json_agrees_field_by_field_with_kafka_dump_log(mixed) -> None:
    _wait_replicas_complete(mixed["topic"], mixed["end"])
    result = CliRunner().invoke(segments_command, ["--topic", mixed["topic"], "--partition", "0", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["broker"] == coordinators.partition_leader(mixed["topic"], 0), "by default the leader's replica"
    files = [s["file"][: -len(".log")] + suffix for s in out["segments"] for suffix in segments.SEGMENT_SUFFIXES]
    dumped = dumplog.run(files).files
    for s in out["segments"]:
        d = dumped[s["file"]]
        assert s["base_offset"] == int(s["file"].rsplit("/", 1)[1].split(".")[0])
        assert len(s["batches"]) == len(d.batches)
        for b, db in zip(s["batches"], d.batches):
            assert b == {
                "base_offset": db.base_offset, "last_offset": db.last_offset, "record_count": db.count,
                "producer_id": db.producer_id, "producer_epoch": db.producer_epoch, "base_sequence": db.base_sequence,
                "is_transactional": db.is_transactional, "is_control": db.is_control, "position": db.position,
                "size": db.size, "max_timestamp": db.max_timestamp, "compression": db.compresscodec,
            }, f"seed {mixed['seed']}"
        base = s["base_offset"]
        index = dumped[s["file"][:-4] + ".index"].index
        timeindex = dumped[s["file"][:-4] + ".timeindex"].timeindex
        assert [(e["offset"], e["position"]) for e in s["index"]] == ([] if index == [(base, 0)] else index)
        assert [(e["timestamp"], e["offset"]) for e in s["timeindex"]] == ([] if timeindex == [(0, base)] else timeindex)


def test_lookups_by_offset_and_time_land_where_a_consumer_does(mixed) -> None:
    topic = mixed["topic"]
    _, segs = demo.replica_segments(topic)
    rng = random.Random(mixed["seed"])
    data_offsets = [r.offset for s in segs for b in s.batches if not b.is_control for r in b.records]
    for target in rng.sample(data_offsets[:150], 3):  # the plain records: visible to any consumer
        seg = next(s for s in reversed(segs) if s.base_offset <= target)
        scan = segments.scan_for_offset(seg.log, target, segments.lookup_offset(seg.index, target).position)
        assert scan.batch.base_offset <= target <= scan.batch.last_offset
        assert demo.first_offset_from(topic, 0, target) == target
    stamps = sorted({r.timestamp for s in segs for r in s.records})
    for ts in [stamps[0] - 1, rng.choice(stamps) + 1, stamps[-1] + 1]:
        mine = segments.offset_for_timestamp(segs, ts).offset
        assert (-1 if mine is None else mine) == demo.offsets_for_times(topic, 0, ts), f"timestamp {ts}, seed {mixed['seed']}"


def test_reader_agrees_with_kafka_dump_log_on_a_compacted_log_with_delete_horizons() -> None:
    with RunScope("segtest") as run:
        topic = run.topic("compacted")
        admin.create_topics({topic: 1}, topic_config={**demo.COMPACTION_CONFIG, "delete.retention.ms": "3600000"})
        t0 = int(time.time() * 1000) - 600_000
        keys = [f"key-{i}".encode() for i in range(30)]
        demo.produce_records(topic, [(k, b"v1" * 20, t0) for k in keys] + [(k, None, t0) for k in keys[:10]])
        demo.produce_records(topic, [(k, b"v2", t0 + demo.ROUND_GAP_MS) for k in keys[10:20]])  # rolls the first segment
        segs, _ = demo.wait_cleaned(topic, 0, 30, timeout_s=60)  # 20 values + 10 tombstones left below the active segment
        horizons = [b for s in segs for b in s.batches if b.delete_horizon_ms is not None]
        assert horizons, "the cleaner stamped a delete horizon on the batch that keeps the tombstones"
        files = [str(s.log.with_suffix(x)) for s in segs for x in segments.SEGMENT_SUFFIXES]
        dumped = dumplog.run(files, print_data=True)
        for s in segs:
            assert dumplog.diff_against_dump(s, dumped) == []


def test_kafkalab_run_segments_demo_confirms_the_notebooks_claims() -> None:
    result = CliRunner().invoke(demo.cli_command, ["--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.output)
    assert r["segment_bytes_below_minimum_rejected"] and r["roll_rule_holds"] and len(r["rolled_segments"]) >= 4
    assert r["index_matches_rule"] and 0 < r["index_entries"] < r["batches"]
    assert r["lookup_batch"][0] <= r["lookup_target"] <= r["lookup_batch"][1] == r["lookup_batch"][0] + 9
    assert r["consumer_first_offset"] == r["lookup_target"] and r["offsets_for_times_agrees"]
    assert r["size_retention_deleted"] and r["log_start_offset"] > 100 and r["other_partition_log_start"] == 0
    assert r["lagging_group_resumed_at"] == r["log_start_offset"] and r["records_never_seen"] == r["log_start_offset"] - 100
    assert r["produce"]["mb_per_s"] > 0 and r["raw_write"]["mb_per_s"] > 0
    assert demo.cli_command.name == "segments_demo"


def test_editing_the_shown_producer_to_compress_cuts_the_index_entries() -> None:
    """Notebook 06's ``batch_producer`` as shown, then edited to ``compression.type=lz4`` (exercise 6):
    the same 2000 records in the same batches of 10, several times fewer bytes on disk, and so
    several times fewer ``.index`` entries, each still where the rule puts it."""
    from kafkalab import programs

    shown = programs.from_notebook("06_segments_retention", "batch_producer")
    edited = shown.replace('"compression.type": "none"', '"compression.type": "lz4"', name="lz4_producer")
    written = {}
    with RunScope("segedit") as run:
        for program in (shown, edited):
            topic = run.topic(program.name.replace("_", "-"))
            admin.create_topics({topic: 1})
            demo.write_with(program, topic, demo.Records(2000, 200))
            written[program.name] = demo.replica_segments(topic)[1][0]
    plain, packed = written["batch_producer"], written["lz4_producer"]
    assert {b.compression for b in plain.batches} == {"none"} and {b.compression for b in packed.batches} == {"lz4"}
    assert [b.records_count for b in plain.batches] == [b.records_count for b in packed.batches] == [10] * 200
    for s in (plain, packed):
        assert s.index == segments.expected_offset_index(s.batches, demo.INDEX_INTERVAL_BYTES)
    assert len(plain.index) >= 90, "as shown: batches of about 2.2 KB, an entry every second batch"
    assert len(packed.index) < len(plain.index) / 3, "edited: the compressed batches get several times fewer entries"


def test_the_shown_compaction_producer_writes_the_same_keys_and_tombstones_to_both_topics() -> None:
    """Notebook 06's ``compaction_producer`` as saved, run by ``start_compaction`` (small
    scenario): both topics hold the records written, at the same offsets, tombstones included
    (value None), and each round starts a segment of the control topic (flushed per round,
    stamped ``ROUND_GAP_MS`` apart, ``segment.ms`` 60 s)."""
    from kafkalab import programs

    shown = programs.from_notebook("06_segments_retention", "compaction_producer")
    with RunScope("segcomp") as run:
        scn = demo.start_compaction(run, shown, keys=10, updates=2, deletes=3)
        written = scn.written
        assert [o for o, _, _ in written] == list(range(len(written))) == list(range(10 * 2 + 3 + 3 + 3))
        assert scn.round_starts == [0, 20, 26]
        assert sum(v is None for _, _, v in written) == 3, "round 2's deletes are tombstones"
        assert consume_partition(scn.control) == written, "the control topic keeps every record, at its offset"
        _, segs = demo.replica_segments(scn.control)
        assert [s.base_offset for s in segs] == scn.round_starts, "each round started a segment"
        assert scn.runs[0].lab_conf.keys() == {"bootstrap.servers", "client.id"}
