"""Notebook 04: the lost ack, the duplicate it causes, and the idempotent producer.

The broker appends a batch, the acknowledgement never reaches the producer, the producer
retries, and the log holds the record twice. With ``enable.idempotence=true`` the producer
gets a producer id (PID) and numbers the records of each partition (sequence numbers from
0); the broker recognises the retry as a duplicate of what it already appended and answers
it with the offset of the first copy. A new producer instance gets a new PID, so a record
the *application* sends again after a crash is a new record to the broker (idempotence
works within one producer session).

The producers are the notebook's ``%%program`` cells (``kafkalab.programs``), run as they are
in worker processes (``worker.ProgramSpec``, role ``producer``: ``kafkalab.instruments.producer``).
Their ``lab.conf`` points ``bootstrap.servers`` at ``kafkalab.faults.FaultProxy``, the lab's
instrument that makes each of these happen on every run, not by luck: it forwards exactly the
chosen Produce requests and drops their responses. The notebook's programs send one record per
Produce request and wait for its delivery report, and the proxy loses the ack of one request in
two (``Rule(every=2)``), so each lost ack is followed by a retry that gets through, and K lost
acks touch K different records.

Experiments (each one function, returning a result object that is also JSON):

==========================  ==============================================================
``run_lost_ack``            ``kafkalab run lost-ack``: a producer program sends N records
                            while K acks are lost, optionally crashed and run again; counts
                            the log
``run_retry_timeline``      a blackholed broker: each Produce attempt as the proxy saw it,
                            and the delivery report's error, per producer program
``run_in_flight``           how many Produce requests each producer program keeps in flight
                            while the proxy holds the first response
``run_client_defaults``     each client at its defaults: producer ids on disk, Java's settings
``run_java_settings``       what the Java producer's configuration makes of conflicting settings
``run_throughput``          records/s of the timed producer programs, idempotence off and
                            on (shown, never asserted)
==========================  ==============================================================

Sources: KIP-98 (idempotent producer: PID, epoch, per-partition sequence numbers);
Kafka protocol guide (Produce API) and documentation, Implementation > Message Format
(record batch v2: producerId, producerEpoch, baseSequence); librdkafka CONFIGURATION.md
(v2.16: ``enable.idempotence`` default false, ``socket.timeout.ms``, ``request.timeout.ms``,
``message.timeout.ms``/``delivery.timeout.ms``, ``retries``, ``retry.backoff.ms``,
``socket.max.fails``); Java ``ProducerConfig`` (``enable.idempotence`` true since 3.0,
KIP-679; ``delivery.timeout.ms`` 120000, ``request.timeout.ms`` 30000).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import click

from .. import admin, cluster, config, coordinators, dumplog, programs, workloads
from ..dumplog import DumpedBatch, DumpedRecord
from ..errors import KafkalabError
from ..faults import FaultProxy, ProxyEvent, Rule
from ..ledger import read_events
from ..programs import Program, from_notebook
from ..producers import Delivery, ProgramBurst, records_for, run_bursts
from ..runscope import RunScope
from ..waiting import wait_until
from ..worker import ProgramSpec, lab_conf
from ..workloads import Copy, read_topic

if TYPE_CHECKING:
    import pandas as pd

#: librdkafka 2.16 producer defaults of the settings article 003 discusses, under the Java
#: client's names where librdkafka has an equivalent (librdkafka CONFIGURATION.md, v2.16).
LIBRDKAFKA_DEFAULTS: dict[str, str] = {
    "enable.idempotence": "false",
    "acks": "all (-1)",
    "retries": "2147483647",
    "retry.backoff.ms": "100",
    "retry.backoff.max.ms": "1000",
    "request.timeout.ms": "30000 (only sent to the broker)",
    "delivery.timeout.ms": "300000 (alias of message.timeout.ms)",
    "max.in.flight.requests.per.connection": "1000000 (5 when idempotent)",
    "linger.ms": "5",
    "socket.timeout.ms": "60000 (the client's wait for a response)",
    "socket.max.fails": "1 (a timed-out request closes the connection)",
}
#: The Java client's defaults of the same settings, as kafka-clients 4.4.0 logs them at
#: start-up (``ProducerConfig values:``); ``run_client_defaults`` reads them live. Kafka
#: documentation, Producer Configs; KIP-679 (idempotence and acks=all by default, 3.0);
#: KIP-91 (delivery.timeout.ms, 2.1); KIP-580 (retry.backoff.max.ms); KIP-1030 (linger.ms 5, 4.0).
JAVA_DEFAULTS: dict[str, str] = {
    "enable.idempotence": "true",
    "acks": "-1",
    "retries": "2147483647",
    "retry.backoff.ms": "100",
    "retry.backoff.max.ms": "1000",
    "request.timeout.ms": "30000",
    "delivery.timeout.ms": "120000",
    "max.in.flight.requests.per.connection": "5",
    "linger.ms": "5",
}


def defaults_table(java_config: dict[str, str] | None = None) -> "pd.DataFrame":
    """Producer defaults side by side: librdkafka 2.16 (``LIBRDKAFKA_DEFAULTS``) and the Java
    client, live from ``java_config`` (``DefaultsCheck.java_config``) or else ``JAVA_DEFAULTS``;
    ``(no such setting)`` where a client lacks one."""
    import pandas as pd

    java = java_config if java_config is not None else JAVA_DEFAULTS
    rows = {k: {"librdkafka 2.16 (CONFIGURATION.md)": v,
                f"Java client {config.KAFKA_VERSION}" + (" (its start-up log)" if java_config is not None else ""):
                    java.get(k, "(no such setting)")}
            for k, v in LIBRDKAFKA_DEFAULTS.items()}
    return pd.DataFrame(rows).T


# ----------------------------------------------------------------------------- the lost-ack experiment


#: Batch fields in ``LostAckResult.to_json``.
BATCH_JSON_FIELDS = ("partition", "base_offset", "last_offset", "count", "producer_id", "producer_epoch",
                     "base_sequence", "last_sequence", "is_transactional", "is_control", "size")


@dataclass
class LostAckResult:
    """What ``run_lost_ack`` saw. Counts are records.

    Attributes:
        program: the name of the program that ran (``kafkalab.programs.Program``).
        lab_conf: what the harness added to the program's settings (``lab.conf`` of its first
            run): ``bootstrap.servers`` (the fault proxy's ports) and ``client.id``.
        ack_loss: how the proxy lost the acks (``ACK_LOSS``: ``timeout`` or ``disconnect``).
        sent: records the application sent (each once, unless a restart resent some).
        acked: records with a successful delivery report (any producer instance).
        failed: delivery reports with an error (e.g. ``_MSG_TIMED_OUT`` with ``retries=0``).
        records_in_log: records in the topic (sum over partitions of high watermark - start).
        unique_in_log: distinct values in the topic.
        duplicates: extra copies, ``records_in_log - unique_in_log``.
        duplicated_values: values held at more than one offset (Jepsen: duplicate).
        producer_ids: distinct producer ids in the topic's batches (-1: not idempotent).
        producer_epochs: distinct producer epochs in the topic's batches.
        dropped_responses: Produce responses the proxy dropped.
        lost_ack_records: records the broker appended whose response the proxy dropped.
        retry_offsets: per dropped response, ``[offset in the dropped answer, offset in the
            answer to the retry]`` (equal when the broker recognised the retry as a duplicate).
        resent: records a new producer instance sent again (``restart_producer``).
        batches: the topic's record batches as ``kafka-dump-log`` shows them.
        librdkafka_log: librdkafka's log lines of the program's first run (its stderr).
    """

    topic: str
    partitions: int
    program: str
    lab_conf: dict[str, str]
    drop_acks: int
    restart_producer: bool
    ack_loss: str
    sent: int
    acked: int
    failed: int
    records_in_log: int
    unique_in_log: int
    duplicates: int
    duplicated_values: int
    producer_ids: list[int]
    producer_epochs: list[int]
    dropped_responses: int
    lost_ack_records: int
    retry_offsets: list[list[int]]
    resent: int
    produce_requests: int
    acks_on_the_wire: list[int]
    elapsed_ms: int
    run_id: str
    ledger_glob: str
    client_ids: list[str]
    batches: list[DumpedBatch] = field(default_factory=list)
    log: list[Copy] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    librdkafka_log: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The result as JSON: every count, the batches (without their records); not the
        per-record log, deliveries or librdkafka log lines."""
        d = {k: v for k, v in asdict(self).items() if k not in ("batches", "log", "deliveries", "librdkafka_log")}
        d["batches"] = [{k: getattr(b, k) for k in BATCH_JSON_FIELDS} for b in self.batches]
        return d

    @property
    def records(self) -> list[DumpedRecord]:
        """Every record of the topic with its producer id and sequence (from the batches)."""
        return [r for b in self.batches for r in b.records]

    def copies_table(self) -> "pd.DataFrame":
        """One row per value: copies in the log, their offsets, and the offset(s) the
        producer was told in delivery reports."""
        import pandas as pd

        where: dict[str, list[str]] = defaultdict(list)
        for c in self.log:
            where[c.value].append(f"{c.partition}:{c.offset}")
        told: dict[str, list[str]] = defaultdict(list)
        for d in self.deliveries:
            told[d.value].append(f"{d.partition}:{d.offset}" if d.error is None else d.error)
        rows = [{"value": v, "copies": len(o), "log offsets": o, "delivery reports": told.get(v, [])}
                for v, o in where.items()]
        return pd.DataFrame(rows).set_index("value").sort_values("copies", ascending=False, kind="stable")


def _retry_offsets(proxy: FaultProxy, client_id: str) -> list[list[int]]:
    """For each Produce response of ``client_id`` the proxy dropped: ``[base offset in it,
    base offset in the next answer for the same partition]``. The producer sends one record
    per request and the proxy lets each retry through, so the next answer is the retry's."""
    answers = [(e.results[0]["partition"], e.results[0]["base_offset"], e.action in ("dropped", "cut"))
               for e in proxy.events(api="Produce", kind="response", client_id=client_id) if e.results]
    out = []
    for i, (partition, offset, lost) in enumerate(answers):
        if lost:
            nxt = next((o for p, o, x in answers[i + 1:] if p == partition and not x), -1)
            out.append([offset, nxt])
    return out


#: How the proxy loses an ack: ``timeout`` drops the response and the client waits
#: ``socket.timeout.ms`` for it; ``disconnect`` drops it and closes the connection, so the
#: client retries at once (``kafkalab.faults`` actions drop_response and cut_at_response).
ACK_LOSS = {"timeout": "drop_response", "disconnect": "cut_at_response"}


def spawn_program(program: Program, proxy: FaultProxy | None, topic: str, records: list[tuple[str, str, int]],
                  client_id: str, run_id: str, ledger: Path, together: int = 0) -> workloads.Worker:
    """Start ``program`` (role ``producer``) in a worker process, bootstrapped on the proxy
    (``proxy`` None: on the CLIENT listeners), with ``records`` to send and the last
    ``together`` of them to send in one batch."""
    conf = lab_conf(client_id, bootstrap_servers=proxy.bootstrap_servers if proxy is not None else None)
    return workloads.spawn(ProgramSpec(client_id, run_id, str(ledger), "producer", program.name, program.source,
                                       conf=conf, topics=[topic],
                                       options={"records": [list(r) for r in records], "together": together}))


def run_to_end(child: workloads.Worker, timeout_s: float) -> list[Delivery]:
    """Wait for a producer program to end; its delivery reports, from its ledger.

    Raises:
        KafkalabError: the program failed (its log's tail in the message).
        WaitTimeout: it ran longer than ``timeout_s``.
    """
    if child.wait(timeout_s) != 0:
        raise KafkalabError(f"program {child.spec.program_name} exited {child.returncode}:\n{child.log_tail()}")
    return deliveries_of(child.ledger)


def deliveries_of(ledger: Path) -> list[Delivery]:
    """The delivery reports a producer program recorded (``lab.delivered``)."""
    return [Delivery(e.key, e.value, e.partition, e.offset, e.error, e.client_id)
            for e in read_events(ledger, kinds="acked")]


def librdkafka_lines(log: Path) -> list[str]:
    """librdkafka's log lines (``%LEVEL|time|FAC|name| ...``) in a worker's log."""
    return [line for line in log.read_text(errors="replace").splitlines() if line.startswith("%")] if log.exists() else []


def run_lost_ack(program: Program, messages: int, drop_acks: int, restart_producer: bool = False,
                 partitions: int = 1, ack_loss: str = "timeout", every: int = 2, proxy: FaultProxy | None = None,
                 keep_topic: bool = False, dump: bool = True, timeout_s: float = 90.0) -> LostAckResult:
    """Run the producer ``program`` (a notebook's ``%%program`` cell, role ``producer``) in a
    worker process bootstrapped on the fault proxy, sending ``messages`` records while the
    proxy loses ``drop_acks`` acks; then count what the log holds.

    Without ``restart_producer``: the proxy drops the responses of the 1st, 3rd, 5th...
    Produce request of the program (``drop_acks`` of them). The notebook's programs send each
    record in its own request and wait for its report, so each lost ack is retried once,
    successfully: without idempotence every lost ack leaves one extra copy in the log; with
    it, none.

    With ``restart_producer``: the program sends its last ``drop_acks`` records together
    (``lab.together``); the proxy drops the responses of those last requests; once the broker
    has appended them (the proxy saw its answer, error NONE) the process is killed with
    SIGKILL, and the same program runs again with the records the first run got no delivery
    report for (``lab.records()``, read from its ledger). With idempotence the new run has a
    new producer id, so the broker cannot tell: ``drop_acks`` duplicates either way.

    Args:
        program: the producer program (``kafkalab.programs.Program``), run as it is.
        messages: records to send, >= 1.
        drop_acks: records whose ack is lost, 0 <= drop_acks <= messages (>= 1 with a restart).
        restart_producer: crash the producer after unacknowledged appends, and run it again.
        partitions: partitions of the fresh topic (records go round-robin).
        ack_loss: ``"timeout"`` (the client waits its ``socket.timeout.ms``) or ``"disconnect"``
            (the connection closes at the lost response); see ``ACK_LOSS``.
        every: the proxy loses the ack of one Produce request in ``every`` (default 2: each
            lost ack's retry gets through; 1: a record can lose several acks in a row).
        proxy: a running ``FaultProxy`` to use (the notebook's); default: one started here.
        keep_topic: leave the topic in place (the notebook reads it with Spark, then deletes it).
        dump: read the batches with ``kafka-dump-log`` (about 1 s); without it ``batches``,
            ``producer_ids`` and ``producer_epochs`` are empty.
        timeout_s: for each wait (a program run may take ``timeout_s`` per lost ack).

    Returns:
        LostAckResult.

    Raises:
        KafkalabError: bad arguments, or the program failed (e.g. librdkafka refused its
            configuration; the message has its traceback).
        WaitTimeout: the program did not end, or the crashed producer's batch was not appended,
            within the time allowed.
    """
    if messages < 1 or not 0 <= drop_acks <= messages:
        raise KafkalabError(f"need messages >= 1 and 0 <= drop-acks <= messages, got {messages} and {drop_acks}")
    if restart_producer and drop_acks < 1:
        raise KafkalabError("--restart-producer needs --drop-acks >= 1: the crash happens after an unacknowledged append")
    if partitions < 1:
        raise KafkalabError(f"partitions must be >= 1, not {partitions}")
    if ack_loss not in ACK_LOSS:
        raise KafkalabError(f"ack_loss must be one of {', '.join(ACK_LOSS)}, not {ack_loss!r}")
    t_start = time.monotonic()
    own_proxy = proxy is None
    if own_proxy:
        proxy = FaultProxy().start()
    run = RunScope("lostack")
    try:
        topic = run.topic("flights")
        admin.create_topics({topic: partitions})
        rdir = workloads.run_dir(run.run_id)
        recs = records_for(messages, partitions)
        resent = 0
        if not restart_producer:
            cid = f"{run.run_id}-producer"
            client_ids = [cid]
            rule = proxy.add_rule(Rule(ACK_LOSS[ack_loss], "Produce", client_id=cid, every=every, times=drop_acks))
            try:
                child = spawn_program(program, proxy, topic, recs, cid, run.run_id, rdir / f"{cid}.jsonl")
                deliveries = run_to_end(child, timeout_s * (1 + drop_acks))
            finally:
                proxy.remove_rule(rule)
        else:
            deliveries, resent, client_ids = _run_with_restart(program, proxy, topic, recs, drop_acks, run.run_id,
                                                               rdir, timeout_s)
        produce_events = [e for e in proxy.events(api="Produce") if e.client_id in set(client_ids)]
        # acks=0: the program may end before the leader appended its last requests; wait for them
        unanswered = sum(e.records for e in produce_events if e.kind == "request" and e.acks == 0)
        log = read_topic(topic, partitions, timeout_s=timeout_s, at_least=unanswered)
        batches = dumplog.run(coordinators.leader_log_files(topic, partitions), print_data=True).batches if dump else []
        counts = Counter(c.value for c in log)
        dropped = [e for e in produce_events if e.kind == "response" and e.action in ("dropped", "cut")]
        return LostAckResult(
            topic=topic, partitions=partitions, program=program.name, lab_conf=lab_conf(client_ids[0], bootstrap_servers=proxy.bootstrap_servers),
            drop_acks=drop_acks, restart_producer=restart_producer, ack_loss=ack_loss, sent=messages,
            acked=sum(1 for d in deliveries if d.error is None), failed=sum(1 for d in deliveries if d.error),
            records_in_log=len(log), unique_in_log=len(counts), duplicates=len(log) - len(counts),
            duplicated_values=sum(1 for n in counts.values() if n > 1),
            producer_ids=sorted({b.producer_id for b in batches if not b.is_control}),
            producer_epochs=sorted({b.producer_epoch for b in batches if not b.is_control}),
            dropped_responses=len(dropped), lost_ack_records=sum(_lost_ack_records(proxy, c) for c in client_ids),
            retry_offsets=[] if restart_producer else _retry_offsets(proxy, client_ids[0]),
            resent=resent,
            produce_requests=sum(1 for e in produce_events if e.kind == "request"),
            acks_on_the_wire=sorted({e.acks for e in produce_events if e.kind == "request" and e.acks is not None}),
            elapsed_ms=int((time.monotonic() - t_start) * 1000), run_id=run.run_id,
            ledger_glob=str(rdir / "*.jsonl"), client_ids=client_ids, batches=batches, log=log,
            deliveries=deliveries, librdkafka_log=librdkafka_lines(rdir / f"{client_ids[0]}.log"),
        )
    finally:
        if not keep_topic:
            run.cleanup()
        if own_proxy:
            proxy.stop()


def _run_with_restart(program: Program, proxy: FaultProxy, topic: str, recs: list[tuple[str, str, int]],
                      drop_acks: int, run_id: str, rdir: Path, timeout_s: float) -> tuple[list[Delivery], int, list[str]]:
    """The crash-and-resend part of ``run_lost_ack``: returns deliveries, records resent and
    the client ids of both runs of the program."""
    first, second = f"{run_id}-producer-1", f"{run_id}-producer-2"
    rule = proxy.add_rule(Rule("drop_response", "Produce", client_id=first, skip=len(recs) - drop_acks))
    child = spawn_program(program, proxy, topic, recs, first, run_id, rdir / f"{first}.jsonl", together=drop_acks)
    try:
        def appended_unacked() -> bool:
            if not child.alive:
                raise KafkalabError(f"producer process exited early ({child.returncode}): {child.log_tail()}")
            return _lost_ack_records(proxy, first) >= drop_acks

        wait_until(appended_unacked, timeout_s=timeout_s, interval_s=0.02,
                   what=f"the broker appending the last {drop_acks} records of {first} (ack dropped by the proxy)")
    finally:
        child.kill()  # SIGKILL: a crash, nothing flushed, no retry
        proxy.remove_rule(rule)
    deliveries = deliveries_of(child.ledger)
    acked = {d.value for d in deliveries if d.error is None}
    unacked = [(e.key, e.value, e.partition) for e in read_events(child.ledger, kinds="produced")
               if e.value not in acked]
    again = spawn_program(program, proxy, topic, unacked, second, run_id, rdir / f"{second}.jsonl",
                          together=min(drop_acks, len(unacked)))
    return deliveries + run_to_end(again, timeout_s), len(unacked), [first, second]


def _lost_ack_records(proxy: FaultProxy, client_id: str) -> int:
    """Records of ``client_id``'s Produce requests whose answer (error NONE) the proxy dropped."""
    evs = proxy.events(api="Produce", client_id=client_id)
    requests = {(e.conn, e.correlation_id): e for e in evs if e.kind == "request"}
    return sum(requests[(e.conn, e.correlation_id)].records for e in evs
               if e.kind == "response" and e.action in ("dropped", "cut") and (e.conn, e.correlation_id) in requests
               and e.results and all(r["error_code"] == 0 for r in e.results))


def exchanges(proxy: FaultProxy, client_id: str, first: int | None = None) -> "pd.DataFrame":
    """The Produce requests and responses of ``client_id`` as the proxy saw them, oldest first
    (the first ``first`` rows): time (ms since the proxy started), connection, correlation id,
    what the proxy did, and per request the partition, producer id, base sequence and record
    count; per response the broker's error and base offset."""
    import pandas as pd

    rows = []
    for e in proxy.events(api="Produce", client_id=client_id):
        row = {"t_ms": round(e.t_ms), "conn": e.conn, "corr": e.correlation_id, "kind": e.kind, "proxy": e.action}
        if e.batches:
            b = e.batches[0]
            row.update(partition=b["partition"], producer_id=b["producer_id"], base_sequence=b["base_sequence"],
                       records=e.records)
        if e.results:
            r = e.results[0]
            row.update(partition=r["partition"], broker_says=r["error"], base_offset=r["base_offset"])
        rows.append(row)
    cols = ["t_ms", "conn", "corr", "kind", "proxy", "partition", "producer_id", "base_sequence", "records",
            "broker_says", "base_offset"]
    df = pd.DataFrame(rows, columns=cols)
    for c in ("partition", "producer_id", "base_sequence", "records", "base_offset"):
        df[c] = df[c].astype("Int64")
    return (df.head(first) if first is not None else df).fillna({"broker_says": ""})


# ----------------------------------------------------------------------------- retries against a blackhole


@dataclass
class Attempt:
    """One Produce request the proxy received from a producer (and swallowed)."""

    t_ms: float
    connection: int


@dataclass
class ProducerTimeline:
    """What one producer program did while the broker was blackholed: the settings it writes
    (``conf``, ``written_settings``), its attempts (Produce requests the proxy swallowed), when
    its delivery report came (ms) with which error, librdkafka's request-timeout log lines, and
    ``broker_timeout_ms``: the ``timeout_ms`` its Produce requests carried (the time the leader
    may wait for replicas)."""

    name: str
    conf: dict
    attempts: list[Attempt]
    report_ms: float | None
    error: str | None
    timeouts_logged: list[tuple[float, str]]
    broker_timeout_ms: list[int] = field(default_factory=list)

    @property
    def connections(self) -> int:
        return len({a.connection for a in self.attempts})


@dataclass
class RetryTimeline:
    """``run_retry_timeline``'s result: the blackholed ``broker`` (leader of the topic's only
    partition) and one ``ProducerTimeline`` per configuration, times in ms since the records
    were produced."""

    topic: str
    broker: int
    producers: dict[str, ProducerTimeline]

    def table(self) -> "pd.DataFrame":
        """One row per configuration: its settings, attempt times, connections and the report."""
        import pandas as pd

        rows = [{"producer": p.name, "settings": ", ".join(f"{k}={v}" for k, v in p.conf.items()),
                 "attempts at (ms)": [round(a.t_ms) for a in p.attempts], "connections": p.connections,
                 "timeout_ms sent to the broker": p.broker_timeout_ms,
                 "report at (ms)": round(p.report_ms) if p.report_ms is not None else None, "error": p.error}
                for p in self.producers.values()]
        return pd.DataFrame(rows).set_index("producer")

    def to_json(self) -> dict:
        return asdict(self)


def written_settings(source: str) -> dict[str, Any]:
    """The Kafka settings a program gives its producer (``programs.program_settings``, read with
    ast): Python values where they are literals (``True``, ``1000``, ``"all"``), else the
    expression's text."""
    return programs.program_settings(source)


def _librdkafka_log_ms(line: str) -> float | None:
    """The time (ms since the Unix epoch) of a librdkafka log line ``%LEVEL|SECONDS|...``."""
    parts = line.split("|")
    try:
        return float(parts[1]) * 1000
    except (IndexError, ValueError):
        return None


def run_retry_timeline(programs: dict[str, Program], proxy: FaultProxy | None = None, timeout_s: float = 30.0
                       ) -> RetryTimeline:
    """Blackhole the Produce requests to the leader of a fresh one-partition topic (the proxy
    swallows them; the broker itself runs on, and replication is untouched) and run each
    producer program of ``programs`` (name -> ``Program``, role ``producer``; notebook 04's
    ``one_record_producer`` and its edits) at the same time, each sending one record; return
    when each got its delivery report.

    Each attempt is a Produce request the proxy received; with ``socket.max.fails=1``
    (default) a timed-out request also closes the connection, so each attempt comes on a new
    one. Times are ms since the program handed its record to ``produce`` (its ledger's
    ``produced`` line, wall clock, as the proxy's events).

    Raises:
        KafkalabError: a program failed, or got no delivery report.
        WaitTimeout: a program ran longer than ``timeout_s``.
    """
    own = proxy is None
    if own:
        proxy = FaultProxy().start()
    run = RunScope("retries")
    rule = None
    try:
        topic = run.topic("t")
        admin.create_topics({topic: 1})
        leader = workloads.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        rule = proxy.add_rule(Rule("drop_request", "Produce", brokers=(leader,)))
        rdir = workloads.run_dir(run.run_id)
        children = {name: spawn_program(p, proxy, topic, [(name, name, 0)], f"{run.run_id}-{i}", run.run_id,
                                        rdir / f"{run.run_id}-{i}.jsonl")
                    for i, (name, p) in enumerate(programs.items())}
        out: dict[str, ProducerTimeline] = {}
        for name, child in children.items():
            if child.wait(timeout_s) != 0:
                raise KafkalabError(f"program {name} exited {child.returncode}:\n{child.log_tail()}")
            events = read_events(child.ledger)
            sent = next((e for e in events if e.kind == "produced"), None)
            report = next((e for e in events if e.kind == "acked"), None)
            if sent is None or report is None:
                raise KafkalabError(f"program {name} wrote no send and delivery report to its ledger")
            requests = proxy.events(api="Produce", kind="request", client_id=child.name)
            attempts = [Attempt(round(e.wall_ms - sent.ts_ms, 1), e.conn) for e in requests]
            timeouts = [(round(t - sent.ts_ms, 1), line) for line in librdkafka_lines(child.log_path)
                        if "Timed out ProduceRequest" in line and (t := _librdkafka_log_ms(line)) is not None]
            out[name] = ProducerTimeline(name, written_settings(programs[name].source), attempts,
                                         float(report.ts_ms - sent.ts_ms), report.error, timeouts, sorted({e.timeout_ms for e in requests if e.timeout_ms is not None}))
        return RetryTimeline(topic, leader, out)
    finally:
        if rule is not None:
            proxy.remove_rule(rule)
        run.cleanup()
        if own:
            proxy.stop()


# ----------------------------------------------------------------------------- client defaults


@dataclass
class DefaultsCheck:
    """Two producers left at their defaults: librdkafka (through confluent-kafka) and Kafka's
    Java client (``kafka-producer-perf-test`` from the broker's own jars).

    Attributes:
        librdkafka_producer_ids / java_producer_ids: producer ids in each topic's batches on
            disk (-1: the producer was not idempotent).
        java_producer_epochs: producer epochs of the Java client's batches.
        java_config: the Java client's effective settings, as it logs them at start-up
            (``ProducerConfig values:``), for the keys of ``JAVA_CONFIG_KEYS``.
        java_logged_producer_id: the producer id the Java client logged (``ProducerId set to
            N with epoch E``), or None.
    """

    librdkafka_version: str
    java_client_version: str
    librdkafka_producer_ids: list[int]
    java_producer_ids: list[int]
    java_producer_epochs: list[int]
    java_config: dict[str, str] = field(default_factory=dict)
    java_logged_producer_id: int | None = None

    def to_json(self) -> dict:
        return asdict(self)


#: Settings read from the Java client's start-up log: the rows of ``JAVA_DEFAULTS``.
JAVA_CONFIG_KEYS = tuple(JAVA_DEFAULTS)

_CONFIG_LINE = re.compile(r"^\s+([a-z0-9.]+) = (.*)$")
_PID_LINE = re.compile(r"ProducerId set to (-?\d+) with epoch (-?\d+)")

#: log4j2 settings for a Java tool whose INFO lines we read (the lab's default shows warnings only).
TOOLS_INFO_LOG4J2 = config.log4j2_stderr(
    "Written by kafkalab.experiments.idempotence: Kafka tool logging at INFO on stderr, message only.", "info", "%m%n")


def parse_producer_config_log(text: str) -> tuple[dict[str, str], int | None]:
    """The ``key = value`` lines after ``ProducerConfig values:`` in a Java client's INFO log,
    and the producer id of its ``ProducerId set to N with epoch E`` line (None if absent).

    Raises:
        ValueError: the text has no ``ProducerConfig values:`` block.
    """
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if "ProducerConfig values:" in line)
    except StopIteration:
        raise ValueError("no 'ProducerConfig values:' block in the Java client's log") from None
    values: dict[str, str] = {}
    for line in lines[start + 1:]:
        m = _CONFIG_LINE.match(line)
        if not m:
            break
        values[m.group(1)] = m.group(2).strip()
    pid = _PID_LINE.search(text)
    return values, int(pid.group(1)) if pid else None


def run_client_defaults(program: Program, records: int = 5, timeout_s: float = 60.0) -> DefaultsCheck:
    """Send ``records`` records with each client at its defaults to its own fresh topic, read
    the producer ids from the segments (one ``kafka-dump-log`` run for both), and the Java
    client's effective settings from its start-up log. The librdkafka producer is ``program``
    (role ``producer``, notebook 04's ``default_producer``) on the CLIENT listeners; the Java
    one is Kafka's own ``kafka-producer-perf-test``.

    Raises:
        KafkalabError: a tool or the program failed (with its output).

    Sources: librdkafka CONFIGURATION.md (``enable.idempotence`` false); Kafka Producer
    Configs and KIP-679 (Java ``enable.idempotence`` true since 3.0).
    """
    import confluent_kafka

    run = RunScope("defaults")
    try:
        t_c, t_java = run.topic("librdkafka"), run.topic("java")
        admin.create_topics({t_c: 1, t_java: 1})
        cid = f"{run.run_id}-librdkafka"
        child = spawn_program(program, None, t_c, records_for(records, 1), cid, run.run_id,
                              workloads.run_dir(run.run_id) / f"{cid}.jsonl")
        if child.wait(timeout_s) != 0:
            raise KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")
        log4j = config.write_state_file("tools/log4j2-info.properties", TOOLS_INFO_LOG4J2)
        cmd = [f"-Dlog4j2.configurationFile={log4j}" if a.startswith("-Dlog4j2.configurationFile=") else a
               for a in cluster.tool_command("kafka-producer-perf-test", ["--topic", t_java, "--num-records", str(records),
                                                                          "--record-size", "20", "--throughput", "-1"])]
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if cp.returncode != 0:
            raise KafkalabError(f"kafka-producer-perf-test exited {cp.returncode}:\n{cp.stderr[-2000:]}")
        java_config, logged_pid = parse_producer_config_log(cp.stderr)
        files = coordinators.leader_log_files(t_c, 1) + coordinators.leader_log_files(t_java, 1)
        batches = dumplog.run(files).batches
        c_batches = [b for b in batches if Path(b.file).parent.name.startswith(t_c)]
        j_batches = [b for b in batches if Path(b.file).parent.name.startswith(t_java)]
        return DefaultsCheck(confluent_kafka.libversion()[0], config.KAFKA_VERSION,
                             sorted({b.producer_id for b in c_batches}), sorted({b.producer_id for b in j_batches}),
                             sorted({b.producer_epoch for b in j_batches}),
                             {k: java_config[k] for k in JAVA_CONFIG_KEYS if k in java_config}, logged_pid)
    finally:
        run.cleanup()


# ----------------------------------------------------------------------------- Java: settings in conflict


#: The Java program that builds a producer configuration per set of settings (``make jars``).
JAVA_SETTINGS_CLASS = "kafkalab.clients.IdempotenceSettings"
#: Its source, under ``kafka/src/main/java`` (``programs.java_source``).
JAVA_SETTINGS_SOURCE = "kafkalab/clients/IdempotenceSettings.java"
#: The settings section 6 gives it: the defaults, then each setting idempotence needs set against
#: it, once with ``enable.idempotence`` left at its default and once written ``true``.
JAVA_SETTINGS_CASES = ("", "acks=1", "enable.idempotence=true,acks=1", "retries=0", "enable.idempotence=true,retries=0",
                       "max.in.flight.requests.per.connection=6",
                       "enable.idempotence=true,max.in.flight.requests.per.connection=6")


@dataclass
class JavaSettings:
    """What the Java producer's configuration made of each set of settings: ``results`` maps
    the settings (``"k=v,k=v"``, ``""`` for none) to ``enable.idempotence=...,acks=...,...``
    or ``ConfigException: ...``; ``log``: the client's INFO/WARN lines about idempotence
    (``Idempotence will be disabled because ...``)."""

    results: dict[str, str]
    log: list[str]

    def table(self) -> "pd.DataFrame":
        """One row per set of settings: what the Java client did with it."""
        import pandas as pd

        return pd.DataFrame([{"settings": k or "(none: the defaults)", "Java client": v} for k, v in self.results.items()]
                            ).set_index("settings")

    def to_json(self) -> dict:
        return asdict(self)


def parse_java_settings(stdout: str, stderr: str = "") -> JavaSettings:
    """``IdempotenceSettings``' output: one ``SETTINGS<TAB>RESULT`` line per set of settings;
    the lines of ``stderr`` that say idempotence will be disabled."""
    results = {}
    for line in stdout.splitlines():
        k, sep, v = line.partition("\t")
        if sep:
            results[k] = v
    return JavaSettings(results, [line.strip() for line in stderr.splitlines() if "Idempotence will be" in line])


def run_java_settings(cases: Iterable[str] = JAVA_SETTINGS_CASES, timeout_s: float = 60.0) -> JavaSettings:
    """Run ``JAVA_SETTINGS_CLASS`` (kafka-clients of the broker's jars) on ``cases``: what the
    Java producer's ``ProducerConfig`` makes of each. No cluster needed: nothing is sent.

    Raises:
        JarsMissing: ``make jars`` has not built the program.
        KafkalabError: the JVM failed (its stderr in the message).

    Source: ``ProducerConfig.postProcessAndValidateIdempotenceConfigs`` (KIP-679, KAFKA-13598).
    """
    from .. import java_api

    log4j = config.write_state_file("tools/log4j2-info.properties", TOOLS_INFO_LOG4J2)
    argv = java_api.java_command(java_api.program_classpath(JAVA_SETTINGS_CLASS), JAVA_SETTINGS_CLASS, *cases,
                                 heap_mb=64, log4j2_config=log4j)
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if cp.returncode != 0:
        raise KafkalabError(f"{JAVA_SETTINGS_CLASS} exited {cp.returncode}:\n{cp.stderr[-2000:]}")
    return parse_java_settings(cp.stdout, cp.stderr)


# ----------------------------------------------------------------------------- in flight, throughput


@dataclass
class InFlight:
    """Most Produce requests one producer had on a connection without a response, and what
    librdkafka counted to stop there.

    Attributes:
        batch: most records one of its Produce requests carried (its ``batch.num.messages``
            when every request is a full batch).
        records_per_request: the same.
        max_records_in_flight_at_send: most records already awaiting a response (on that
            connection) at the moment one of its Produce requests was sent.
        min_records_per_request: fewest records one of its Produce requests carried (equal to
            ``records_per_request`` when every request was a full batch).
    """

    idempotence: bool
    records: int
    requests: int
    max_in_flight: int
    acks: list[int]
    batch: int = 0
    records_per_request: int = 0
    max_records_in_flight_at_send: int = 0
    min_records_per_request: int = 0


def records_in_flight_at_send(events: Iterable[ProxyEvent]) -> list[tuple[int, int]]:
    """For each Produce request in ``events`` (one client's Produce requests and responses on
    the proxy, in the order seen): ``(records it carried, records of earlier requests still
    awaiting a response when it was sent)``. A response ends the request of the same
    connection and correlation id."""
    pending: dict[tuple[int, int], int] = {}
    out = []
    for e in events:
        if e.kind == "request":
            out.append((e.records, sum(pending.values())))
            pending[(e.conn, e.correlation_id)] = e.records
        elif e.kind == "response":
            pending.pop((e.conn, e.correlation_id), None)
    return out


def _in_flight_once(program: Program, proxy: FaultProxy, topic: str, cid: str, run_id: str, records: int,
                    hold_ms: int, timeout_s: float) -> InFlight:
    rule = proxy.add_rule(Rule("delay_response", "Produce", client_id=cid, times=1, delay_ms=hold_ms))
    try:
        child = spawn_program(program, proxy, topic, records_for(records, 1), cid, run_id,
                              workloads.run_dir(run_id) / f"{cid}.jsonl")
        if child.wait(timeout_s) != 0:
            raise KafkalabError(f"program {program.name} exited {child.returncode}:\n{child.log_tail()}")
    finally:
        proxy.remove_rule(rule)
    reqs = proxy.events(api="Produce", kind="request", client_id=cid)
    sends = records_in_flight_at_send(proxy.events(api="Produce", client_id=cid))
    return InFlight(any(b["producer_id"] >= 0 for e in reqs for b in e.batches), records, len(reqs),
                    max((e.in_flight for e in reqs), default=0),
                    sorted({e.acks for e in reqs if e.acks is not None}), max((n for n, _ in sends), default=0),
                    max((n for n, _ in sends), default=0), max((w for _, w in sends), default=0),
                    min((n for n, _ in sends), default=0))


def run_in_flight(programs: dict[Any, Program], records: int = 200, hold_ms: int = 300,
                  proxy: FaultProxy | None = None, timeout_s: float = 60.0) -> dict[Any, InFlight]:
    """Run each producer program of ``programs`` (label -> ``Program``, role ``producer``), one
    after the other, on one fresh one-partition topic, bootstrapped on the fault proxy, which
    holds the program's *first* Produce response for ``hold_ms``; count the requests it sends
    meanwhile without an answer. The program sends ``records`` records (``lab.records()``)
    without waiting for reports; notebook 04's ``pipelining_producer`` makes each request a
    full batch of ``batch.num.messages`` records (a long ``linger.ms``).

    librdkafka caps the requests in flight at ``max.in.flight.requests.per.connection``:
    1000000 by default, 5 when idempotent (CONFIGURATION.md). But librdkafka 2.16's idempotent
    producer counts *records*, not requests, against that 5: it sends another Produce request
    to a partition only while fewer than 5 of the partition's records await a response
    (``RD_KAFKA_IDEMP_MAX_INFLIGHT - rktp_msgs_inflight`` in ``rd_kafka_toppar_producer_serve``,
    src/rdkafka_broker.c; librdkafka PR #4989 proposes to count requests). So batches of 5
    records or more go one request at a time.

    Returns:
        ``{label: InFlight}``; ``InFlight.idempotence`` is read from the requests (a producer id).

    Raises:
        KafkalabError: a program failed. WaitTimeout: one ran longer than ``timeout_s``.
    """
    if not programs:
        raise KafkalabError("programs is empty: give at least one producer program")
    own = proxy is None
    if own:
        proxy = FaultProxy().start()
    run = RunScope("inflight")
    try:
        topic = run.topic("t")
        admin.create_topics({topic: 1})
        return {label: _in_flight_once(p, proxy, topic, f"{run.run_id}-{i}-{p.name}", run.run_id, records, hold_ms,
                                       timeout_s)
                for i, (label, p) in enumerate(programs.items())}
    finally:
        run.cleanup()
        if own:
            proxy.stop()


#: The value size of the cost table's bursts, bytes (section 10).
THROUGHPUT_VALUE_BYTES = 200


def run_throughput(programs: Sequence[Program], records: int, rounds: int = 2) -> list[ProgramBurst]:
    """The cost of idempotence with the producers on screen: each timed producer program (the
    notebook's ``timed_producer`` and copies edited with ``Program.replace``, e.g.
    ``enable.idempotence`` written ``True``, ``batch.num.messages`` 10) sends ``records`` values
    of 200 bytes to a fresh one-partition topic on the CLIENT listeners (no proxy), in turn,
    ``rounds`` times (alternating, so all see the same machine): ``producers.run_bursts``, each
    run as it is in a worker process and timed by its own stopwatch from the first timed
    ``produce`` to the last delivery report (its warm-up record, which pays for connections,
    metadata and the idempotent producer's ``InitProducerId``, is not timed). Returns every
    burst; the numbers are for showing, never for asserting.

    Raises:
        KafkalabError: a program failed or a record was not delivered.
    """
    return run_bursts(programs, records, THROUGHPUT_VALUE_BYTES, rounds, scope="throughput")


def throughput_table(bursts: Iterable[ProgramBurst]) -> "pd.DataFrame":
    """One row per burst, in the order they ran: the program, the settings it wrote
    (``batch.num.messages``, ``enable.idempotence``, ``max.in.flight.requests.per.connection``;
    None where it wrote none), records/s, MB/s, seconds."""
    import pandas as pd

    return pd.DataFrame([{"program": b.program, "batch.num.messages": b.settings.get("batch.num.messages"),
                          "idempotence": b.settings.get("enable.idempotence"),
                          "max.in.flight": b.settings.get("max.in.flight.requests.per.connection"),
                          "records/s": round(b.records_per_s), "MB/s": round(b.mb_per_s, 1),
                          "seconds": round(b.seconds, 3)} for b in bursts])


# ----------------------------------------------------------------------------- CLI


#: The notebook whose ``%%program`` cells are the producers of ``run_lost_ack``.
NOTEBOOK = "04_idempotent_producer"
#: The notebook's producer programs (``kafkalab run lost-ack --program``).
PROGRAMS = ("plain_producer", "idempotent_producer", "restartable_producer", "at_most_once_producer")


def cli_program(program: str | None, idempotence: str | None, restart: bool, retries: int | None) -> Program:
    """The notebook's program ``kafkalab run lost-ack`` runs: ``program`` by name, or else the
    one the flags pick: with ``--retries N``, ``at_most_once_producer``; with
    ``--restart-producer``, ``restartable_producer``; otherwise ``plain_producer``
    (``idempotent_producer`` with ``--idempotence on``). Where a flag asks for what the
    program does not say (``--idempotence off`` with a restart, ``--retries`` other than 0),
    its ``enable.idempotence`` or ``retries`` line is edited, as a learner would edit the cell.

    Raises:
        KafkalabError: both ``program`` and ``idempotence``, or ``retries`` with idempotence on.
        ProgramError: the notebook lacks the program, or a line to edit.
    """
    if program is not None and idempotence is not None:
        raise KafkalabError("give --program NAME or --idempotence on|off, not both: the program says it")
    if program is not None:
        return from_notebook(NOTEBOOK, program)
    if retries is not None:
        if idempotence == "on":
            raise KafkalabError("--retries needs idempotence off: librdkafka refuses retries=0 with idempotence")
        p = from_notebook(NOTEBOOK, "at_most_once_producer")
        return p if retries == 0 else p.replace('"retries": 0,', f'"retries": {retries},')
    if restart:
        p = from_notebook(NOTEBOOK, "restartable_producer")
        return p.replace('"enable.idempotence": True,', '"enable.idempotence": False,') if idempotence == "off" else p
    return from_notebook(NOTEBOOK, "idempotent_producer" if idempotence == "on" else "plain_producer")


from ..clickutil import show_programs, shows_programs  # noqa: E402  (the CLI's own helpers)


@click.command("lost-ack")
@click.option("--program", type=click.Choice(PROGRAMS), default=None,
              help=f"The producer program of notebook {NOTEBOOK} to run (default: the one the other flags pick).")
@click.option("--idempotence", type=click.Choice(["on", "off"]), default=None,
              help="Instead of --program: plain_producer (off) or idempotent_producer (on); with --restart-producer, "
                   "restartable_producer (its enable.idempotence line edited for off).")
@click.option("--messages", type=click.IntRange(1, 5000), default=20, show_default=True, help="Records to send (N).")
@click.option("--drop-acks", type=click.IntRange(0), default=3, show_default=True,
              help="Records whose ack the proxy drops (K <= N).")
@click.option("--restart-producer", is_flag=True,
              help="Kill the producer after the broker appended records it never acknowledged; it runs again and resends them.")
@click.option("--partitions", type=click.IntRange(1, 50), default=1, show_default=True)
@click.option("--retries", type=click.IntRange(0), default=None,
              help="With --idempotence off: at_most_once_producer, its retries line set to this.")
@click.option("--ack-loss", type=click.Choice(list(ACK_LOSS)), default="timeout", show_default=True,
              help="timeout: the client waits its socket.timeout.ms; disconnect: the connection closes.")
@shows_programs
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def cli_command(program: str | None, idempotence: str | None, messages: int, drop_acks: int, restart_producer: bool,
                partitions: int, retries: int | None, ack_loss: str, as_json: bool) -> None:
    """Lost acks through the fault proxy: does the log hold duplicates? Runs a producer
    program of notebook 04 as the notebook shows it."""
    try:
        prog = cli_program(program, idempotence, restart_producer, retries)
    except KafkalabError as e:
        raise click.UsageError(str(e)) from None
    show_programs(prog)
    r = run_lost_ack(prog, messages, drop_acks, restart_producer=restart_producer, partitions=partitions,
                     ack_loss=ack_loss)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
        return
    click.echo(f"{r.program} with lab.conf {r.lab_conf}")
    click.echo(f"{r.topic}: sent {r.sent}, acked {r.acked}, failed {r.failed}; proxy dropped {r.dropped_responses} "
               f"responses covering {r.lost_ack_records} appended records")
    click.echo(f"log: {r.records_in_log} records, {r.unique_in_log} unique, {r.duplicates} duplicates; "
               f"producer ids {r.producer_ids}" + (f"; resent by the restarted producer: {r.resent}" if r.restart_producer else ""))
