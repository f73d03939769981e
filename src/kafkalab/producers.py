"""Producer helpers shared by the experiments: teaching settings, construction, sending one
record per Produce request, and the records a workload sends.

``workloads.produce`` sends a list of records and waits for every ack; this module has what
an experiment needs when *how* records travel matters (notebooks 04, 07 and 10): librdkafka
settings at teaching values, a refused configuration turned into one readable error, timed
bursts, the measuring producer programs run as they are (``send_with``: notebooks 04, 07, 10),
the records a workload sends, and the cost tables of notebooks 04 and 07
(``run_bursts``: a notebook's timed producer program and its edited copies, each run as it is
in a worker process, role ``measuring``, timed inside the run).

Sources: librdkafka CONFIGURATION.md v2.16 (``socket.timeout.ms``, ``message.timeout.ms``,
``enable.idempotence``, ``retries``, ``linger.ms``); KIP-98 (idempotent producer).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from .errors import KafkalabError

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from .programs import Program

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


@dataclass
class ProgramTimes:
    """One run of a measuring producer program (``send_with``): what the harness added
    (``lab_conf``), and per delivery report, in report order, ``(offset, ack_ms)``: the offset
    (-1: not told, ``acks=0``) and the ms from ``produce`` to the report; ``seconds`` from the
    first send to the last report; ``errors``: the reports' error names; ``commit_ms``: each
    ``commit_transaction()``'s duration (a transactional program, ``lab.committed``)."""

    program: str
    lab_conf: dict
    acks: list[tuple[int, float]]
    seconds: float
    errors: list[str] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)


def send_with(program: "Program", topic: str, count: int, value_bytes: int, rate: float | None = None,
              timeout_s: float = 120.0, values_path: str | None = None) -> ProgramTimes:
    """Run the measuring producer ``program`` (a notebook's ``%%program`` cell, role
    ``measuring``) as it is, in a worker process: ``count`` values of ``value_bytes`` to
    partition 0 of ``topic`` (or the ``count`` strings of the JSON list in ``values_path``),
    paced at ``rate`` records/s (None: a burst); wait for it to end and read its delivery
    reports' times (``instruments.measuring``). The harness adds only ``bootstrap.servers`` and
    ``client.id``.

    Raises:
        KafkalabError: the program failed, or a report was missing or an error.
        WaitTimeout: it ran longer than ``timeout_s``.
    """
    from . import runscope, workloads
    from .instruments.measuring import MeasureOptions, read_commits, read_times
    from .worker import ProgramSpec, lab_conf

    run_id = runscope.run_id()
    client_id = f"{run_id}-{program.name}"
    conf = lab_conf(client_id)
    ledger = workloads.run_dir(run_id) / f"{client_id}.jsonl"
    child = workloads.spawn(ProgramSpec(client_id, run_id, str(ledger), "measuring", program.name, program.source,
                                        conf=conf, topics=[topic],
                                        options=asdict(MeasureOptions(count, value_bytes, rate, values_path))))
    if child.wait(timeout_s) != 0:
        raise KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")
    reports = read_times(ledger)
    errors = [e for *_, e in reports if e is not None]
    if len(reports) != count or errors:
        raise KafkalabError(f"program {program.name}: {len(reports)} of {count} delivery reports; errors {errors[:3]}")
    return ProgramTimes(program.name, conf, [(off, round((acked - sent) * 1000, 3)) for sent, acked, off, _ in reports],
                        max(a for _, a, _, _ in reports) - min(s for s, _, _, _ in reports), errors,
                        read_commits(ledger))


@dataclass(frozen=True)
class ProgramBurst:
    """One run of a timed producer program (``send_with``, in ``run_bursts``): its name, the settings its text
    writes (``programs.program_settings``), what the harness added (``lab_conf``: addresses and
    names), and ``records`` values of ``value_bytes`` each sent in ``seconds``, from the
    program's first timed ``produce`` to its last delivery report (its own stopwatch,
    ``lab.now()``: the worker's start and the warm-up record are not in it). For showing, never
    for asserting."""

    program: str
    settings: dict
    lab_conf: dict
    records: int
    value_bytes: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        """Records per second."""
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        """Value bytes per second, MB (10^6 bytes)."""
        return self.records * self.value_bytes / self.seconds / 1e6


def run_bursts(programs: Sequence["Program"], records: int, value_bytes: int, rounds: int = 1,
               scope: str = "bursts", timeout_s: float = 120.0) -> list[ProgramBurst]:
    """Each timed producer program of ``programs`` sends ``records`` values of ``value_bytes``
    to one fresh one-partition topic on the CLIENT listeners (no fault proxy), one program after
    the other, ``rounds`` times (alternating, so every program sees the same machine), each
    run by ``send_with``; the topic is deleted at the end. ``scope``: the run's name
    (``RunScope``). Returns every burst, in the order they ran; the numbers are for showing,
    never for asserting (notebooks 04 and 07).

    Raises:
        KafkalabError: a program failed or a record was not delivered.
        WaitTimeout: a program ran longer than ``timeout_s``.
    """
    from . import admin
    from .programs import program_settings
    from .runscope import RunScope

    out: list[ProgramBurst] = []
    with RunScope(scope) as run:
        topic = run.topic("t")
        admin.create_topics({topic: 1})
        for _ in range(rounds):
            for program in programs:
                t = send_with(program, topic, records, value_bytes, timeout_s=timeout_s)
                out.append(ProgramBurst(program.name, program_settings(program.source), t.lab_conf, records,
                                        value_bytes, t.seconds))
        return out


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
