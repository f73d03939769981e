"""Producer helpers shared by the experiments: teaching settings, construction, sending one
record per Produce request, and the records a workload sends.

``workloads.produce`` sends a list of records and waits for every ack; this module has what
an experiment needs when *how* records travel matters (notebooks 04, 07 and 10): librdkafka
settings at teaching values, a refused configuration turned into one readable error, timed
bursts, and the records a workload sends.

Sources: librdkafka CONFIGURATION.md v2.16 (``socket.timeout.ms``, ``message.timeout.ms``,
``enable.idempotence``, ``retries``, ``linger.ms``); KIP-98 (idempotent producer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import KafkalabError

if TYPE_CHECKING:
    from confluent_kafka import Producer

#: Teaching value of librdkafka's ``socket.timeout.ms``: how long the client waits for a
#: Produce response before it gives the request up and retries (librdkafka 2.16 default
#: 60000 ms). In librdkafka it is this setting, not ``request.timeout.ms``, that times a
#: request out on the client (CONFIGURATION.md). librdkafka checks for timed-out requests
#: once a second, so a lost ack costs 2-3 s here. 2 s stays far above the broker's answer
#: time on a loaded 2-core machine (median about 1 ms, slowest seen 0.4 s), so only the
#: acks the proxy drops ever time out.
TEACHING_SOCKET_TIMEOUT_MS = 2000
#: Teaching value of ``message.timeout.ms`` (alias ``delivery.timeout.ms``): the most time a
#: record may take to be delivered, retries included (librdkafka default 300000 ms; Java
#: ``delivery.timeout.ms`` default 120000 ms).
TEACHING_MESSAGE_TIMEOUT_MS = 30000


def producer_conf(client_id: str, bootstrap: str, idempotence: bool | None,
                  socket_timeout_ms: int | None = TEACHING_SOCKET_TIMEOUT_MS,
                  message_timeout_ms: int | None = TEACHING_MESSAGE_TIMEOUT_MS,
                  retries: int | None = None, extra: dict | None = None) -> dict:
    """librdkafka producer settings of the experiments: ``enable.idempotence`` as given
    (None: librdkafka's default, false), ``socket.timeout.ms`` (the client-side request
    timeout, ms) and ``message.timeout.ms`` (ms) at teaching values unless None, ``retries``
    if given, ``linger.ms=0``, logs at warning level (notice level when ``extra`` has a
    ``logger``, which receives them instead of stderr), then ``extra``."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 0, "log_level": 4}
    if extra and "logger" in extra:
        conf["log_level"] = 5  # notices too (e.g. "Timed out ProduceRequest in flight"): they go to the logger
    if idempotence is not None:
        conf["enable.idempotence"] = idempotence
    if socket_timeout_ms is not None:
        conf["socket.timeout.ms"] = socket_timeout_ms
    if message_timeout_ms is not None:
        conf["message.timeout.ms"] = message_timeout_ms
    if retries is not None:
        conf["retries"] = retries
    conf.update(extra or {})
    return conf


def make_producer(conf: dict) -> "Producer":
    """``confluent_kafka.Producer(conf)``.

    Raises:
        KafkalabError: librdkafka refused the configuration (e.g. ``acks=1`` with idempotence),
            with librdkafka's message.
    """
    from confluent_kafka import KafkaException, Producer

    try:
        return Producer(conf)
    except KafkaException as e:
        raise KafkalabError(e.args[0].str()) from None


@dataclass(frozen=True)
class Delivery:
    """A delivery report: ``offset`` None and ``error`` (librdkafka's error name) set when
    delivery failed."""

    key: str
    value: str
    partition: int
    offset: int | None
    error: str | None
    client_id: str


def produce_when_room(producer: "Producer", topic: str, value: bytes, partition: int | None = None) -> None:
    """``producer.produce(topic, value, partition)``, serving delivery reports (``poll``,
    10 ms at a time) while librdkafka's queue is full (``BufferError``: more than
    ``queue.buffering.max.messages`` records waiting)."""
    kw = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value=value, **kw)
            return
        except BufferError:
            producer.poll(0.01)


def timed_burst(conf: dict, topic: str, records: int, value: bytes, partitions: int = 1, poll_every: int = 1,
                timeout_s: float = 120.0) -> float:
    """Seconds one new producer (``conf``) takes to send ``records`` copies of ``value``,
    round-robin over ``partitions``, from the first ``produce`` to the last delivery report.
    One warm-up record first is not timed (connections, metadata, an idempotent producer's
    ``InitProducerId``). ``poll_every``: serve delivery reports after every N-th record.
    For showing, never for asserting.

    Raises:
        KafkalabError: librdkafka refused ``conf``, or the burst was not delivered within ``timeout_s``.
    """
    import time

    p = make_producer(conf)
    try:
        p.produce(topic, value=value, partition=0)
        p.flush(30)
        t0 = time.perf_counter()
        for i in range(records):
            produce_when_room(p, topic, value, i % partitions)
            if i % poll_every == 0:
                p.poll(0)
        if p.flush(timeout_s):
            raise KafkalabError(f"burst of {records} records not delivered within {timeout_s:.0f} s")
        return time.perf_counter() - t0
    finally:
        p.close()


def records_for(messages: int, partitions: int, start: int = 0) -> list[tuple[str, str, int]]:
    """``(key, value, partition)`` of workload records ``start .. start+messages-1``
    (``kafkalab.data.workload_record``: values are unique flight record ids, keys their
    aircraft), partitions round-robin ``i % partitions``."""
    from .data import workload_record

    out = []
    for i in range(start, start + messages):
        f, rid = workload_record(i)
        out.append((f.key, rid, i % partitions))
    return out
