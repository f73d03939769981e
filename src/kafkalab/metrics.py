"""The one home of metrics, read as an operator's dashboard reads them (notebook 13).

Three sources, each read by a real client and parsed here once:

- **The broker's JMX metrics**, read by Kafka's own ``JmxTool`` (``org.apache.kafka.tools.JmxTool``,
  kafka-tools 4.4.0; ``kafkalab tool kafka-jmx``) from the broker JVM's JMX port
  (``config.Node.jmx_port``, opened by the local backend: ``cluster.common.jmx_flags``).
  ``JmxWatch`` runs it for the length of an experiment (``--reporting-interval``, ``--report-format
  tsv``) and ``parse_jmx`` reads its output: one block per sample, a ``time`` line (ms since the
  epoch) then one ``<mbean>:<attribute>\\t<value>`` line per attribute. Metric names: Kafka
  documentation, Operations > Monitoring; ``LastStableOffsetLag`` (the high watermark minus the
  last stable offset of a partition the broker leads, KIP-98), ``UnderMinIsrPartitionCount``,
  and ``PartitionsWithLateTransactionsCount`` (KIP-664: partitions with a transaction open longer
  than ``transaction.max.timeout.ms``).
- **librdkafka's statistics** (``statistics.interval.ms`` and a ``stats_cb``; librdkafka
  STATISTICS.md, "partitions"): per partition ``hi_offset`` (high watermark), ``ls_offset``
  (last stable offset), ``committed_offset``, ``app_offset`` and ``consumer_lag``.
  ``parse_statistics`` reads one report, ``read_statistics`` a file of them (one JSON report a
  line, as ``instruments.consumer.ConsumerLab.statistics`` writes them).
- **Consumer lag as the group tools compute it** (``group_lag``): the group's committed offsets
  (AdminClient ``list_consumer_group_offsets``) against the partitions' log end offsets
  (``list_offsets`` latest, read_uncommitted), as ``kafka-consumer-groups --describe`` shows
  ``LAG`` (its ``ConsumerGroupCommand`` asks ``OffsetSpec.latest()``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

from . import admin, config
from .errors import KafkalabError
from .waiting import wait_until

#: The Kafka tool name of ``JmxTool`` (``cluster.common.TOOLS``).
JMX_TOOL = "kafka-jmx"


def jmx_url(broker_id: int) -> str:
    """The JMX service URL of broker ``broker_id``'s JVM (``Node.jmx_port``), as ``JmxTool``'s
    ``--jmx-url`` takes it."""
    return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{config.Topology().node(broker_id).jmx_port}/jmxrmi"


def lso_lag_mbean(topic: str, partition: int) -> str:
    """The MBean of a partition's ``LastStableOffsetLag`` gauge (Kafka documentation, Operations >
    Monitoring: ``kafka.cluster:type=Partition,name=LastStableOffsetLag,topic=..,partition=..``).
    The broker that leads the partition reports it."""
    return f"kafka.cluster:type=Partition,name=LastStableOffsetLag,topic={topic},partition={partition}"


#: Broker-wide gauges (``kafka.server:type=ReplicaManager``): partitions under min ISR, and
#: partitions with a transaction open past ``transaction.max.timeout.ms`` (KIP-664).
UNDER_MIN_ISR = "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount"
#: Partitions the broker leads whose ISR is smaller than their replica set (Operations > Monitoring).
UNDER_REPLICATED = "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions"
LATE_TRANSACTIONS = "kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount"


@dataclass(frozen=True)
class JmxSample:
    """One sample of ``JmxTool``: ``t_ms`` (its ``time`` line, ms since the epoch) and
    ``values`` (``"<mbean>:<attribute>"`` -> number; a value that is no number is skipped)."""

    t_ms: int
    values: dict[str, float]

    def value(self, mbean: str, attribute: str = "Value") -> float | None:
        """The value of ``mbean``'s ``attribute`` in this sample, or None."""
        return self.values.get(f"{mbean}:{attribute}")


def parse_jmx(text: str) -> list[JmxSample]:
    """The samples in ``JmxTool --report-format tsv`` output: a line ``time<TAB>ms`` starts a
    sample, each ``name<TAB>value`` line after it adds a value. Lines without a tab (``Trying to
    connect to JMX url...``) and a last sample that has no value yet are skipped."""
    samples: list[JmxSample] = []
    t: int | None = None
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, tab, raw = line.partition("\t")
        if not tab:
            continue
        if name == "time":
            if t is not None and values:
                samples.append(JmxSample(t, values))
            t, values = int(raw), {}
            continue
        try:
            values[name] = float(raw)
        except ValueError:
            continue
    if t is not None and values:
        samples.append(JmxSample(t, values))
    return samples


class JmxWatch:
    """Kafka's ``JmxTool`` reading ``mbeans`` (exact names) from broker ``broker_id`` every
    ``interval_ms``, in a worker process of its own (``workloads.spawn``: it dies with its
    parent), its output to ``folder/jmx-<broker>.tsv`` (default: this run's folder,
    ``workloads.run_dir``). A context manager: ``stop()`` (or the
    end of the ``with``) kills it. ``samples()`` parses what it wrote so far.

    ``--wait`` makes ``JmxTool`` wait until every MBean exists (a partition's gauge appears once
    the broker hosts the partition).
    """

    def __init__(self, broker_id: int, mbeans: Iterable[str], folder: Path | None = None, run_id: str | None = None,
                 interval_ms: int = 500):
        from . import runscope, workloads
        from .cluster.common import tool_command
        from .worker import ExecSpec

        run_id = run_id or runscope.run_id()
        folder = folder or workloads.run_dir(run_id)

        self.broker_id = broker_id
        self.mbeans = list(mbeans)
        self.interval_ms = interval_ms
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"jmx-{broker_id}.tsv"
        args = ["--jmx-url", jmx_url(broker_id), "--report-format", "tsv", "--reporting-interval", str(interval_ms),
                "--wait", *[a for m in self.mbeans for a in ("--object-name", m)]]
        argv = tool_command(JMX_TOOL, args)
        self.worker = workloads.spawn(ExecSpec(f"jmx-{broker_id}", run_id, str(folder / f"jmx-{broker_id}.jsonl"),
                                               argv, stdout=str(self.path)))

    def samples(self) -> list[JmxSample]:
        """Every complete sample written so far (the last block may still be being written: a
        sample counts once the next one started, or ``stop()`` ended the tool)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out = parse_jmx(text)
        if self.worker.alive and out:
            out = out[:-1]  # its last lines may not be written yet
        return [s for s in out if all(s.value(m) is not None for m in self.mbeans)]

    def wait_samples(self, after_ms: int = 0, count: int = 1, timeout_s: float = 60.0) -> list[JmxSample]:
        """Wait until ``count`` samples taken after ``after_ms`` (ms since the epoch) are written;
        returns them.

        Raises:
            KafkalabError: ``JmxTool`` exited (its log).
            WaitTimeout: not within ``timeout_s``.
        """
        def enough() -> list[JmxSample] | None:
            if not self.worker.alive:
                raise KafkalabError(f"JmxTool on broker {self.broker_id} exited:\n{self.worker.log_tail()}")
            later = [s for s in self.samples() if s.t_ms > after_ms]
            return later if len(later) >= count else None

        return wait_until(enough, timeout_s=timeout_s, interval_s=0.1,
                          what=f"{count} JmxTool samples of broker {self.broker_id} after {after_ms}")

    def stop(self) -> None:
        """Kill the tool (its own process only); the samples stay readable."""
        if self.worker.alive:
            self.worker.kill()

    def __enter__(self) -> "JmxWatch":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def read_jmx_once(broker_id: int, mbeans: Iterable[str], timeout_s: float = 60.0) -> JmxSample:
    """One sample of ``mbeans`` from broker ``broker_id`` (``JmxTool --one-time true``).

    Raises:
        KafkalabError: the tool failed, or printed no sample.
    """
    from .cluster.common import tool

    args = ["--jmx-url", jmx_url(broker_id), "--report-format", "tsv", "--one-time", "true",
            *[a for m in mbeans for a in ("--object-name", m)]]
    out = parse_jmx(tool(JMX_TOOL, *args, timeout_s=timeout_s).stdout)
    if not out:
        raise KafkalabError(f"JmxTool printed no sample of {list(mbeans)} on broker {broker_id}")
    return out[-1]


# ----------------------------------------------------------------------------- librdkafka statistics


@dataclass(frozen=True)
class PartitionStats:
    """One partition in one librdkafka statistics report (STATISTICS.md, "partitions"); offsets
    are -1001 (librdkafka's ``RD_KAFKA_OFFSET_INVALID``) until known.

    Attributes:
        t_ms: the report's wall clock (top-level ``time``, seconds, as ms).
        client_id: the client's ``client.id``.
        topic, partition: the partition.
        hi_offset: the high watermark the client last heard of.
        ls_offset: the last stable offset it last heard of.
        app_offset: the offset of the last record handed to the application, + 1.
        committed_offset: the last offset the client committed.
        consumer_lag: librdkafka's own lag (``consumer_lag``).
        fetch_state: ``active`` while the client fetches the partition.
    """

    t_ms: int
    client_id: str
    topic: str
    partition: int
    hi_offset: int
    ls_offset: int
    app_offset: int
    committed_offset: int
    consumer_lag: int
    fetch_state: str

    def to_json(self) -> dict:
        return asdict(self)


def parse_statistics(report: str | dict) -> list[PartitionStats]:
    """The partitions of one librdkafka statistics report (JSON text or its dict), internal
    partition -1 (UA) left out, in topic and partition order."""
    s = json.loads(report) if isinstance(report, str) else report
    t_ms = int(s.get("time", 0)) * 1000
    out = []
    for topic, t in sorted(s.get("topics", {}).items()):
        for p in sorted(t.get("partitions", {}).values(), key=lambda p: p.get("partition", -1)):
            if p.get("partition", -1) < 0:
                continue
            out.append(PartitionStats(t_ms, s.get("client_id", ""), topic, p["partition"], p.get("hi_offset", -1001),
                                      p.get("ls_offset", p.get("hi_offset", -1001)), p.get("app_offset", -1001),
                                      p.get("committed_offset", -1001), p.get("consumer_lag", -1),
                                      p.get("fetch_state", "none")))
    return out


def read_statistics(path: str | Path) -> list[PartitionStats]:
    """Every partition of every report in a statistics file (one JSON report a line, as
    ``ConsumerLab.statistics`` appends them); a last line still being written is skipped.
    A missing file: no report yet, []."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    out: list[PartitionStats] = []
    for line in lines:
        try:
            out += parse_statistics(line)
        except ValueError:
            continue
    return out


# ----------------------------------------------------------------------------- lag as the tools see it


def group_lag(group_id: str, topic: str, partitions: int, timeout_s: float = 10.0) -> dict[int, dict[str, int]]:
    """Per partition of ``topic``: the group's committed offset (-1: none yet), the log end offset
    (LEO), the last stable offset (LSO) and ``lag`` = LEO - committed (as
    ``kafka-consumer-groups --describe`` computes LAG; 0 if nothing is committed), from the
    AdminClient (``coordinators.committed_offsets``, ``admin.list_offsets``).

    Raises:
        TimeoutError, KafkaException: no answer within ``timeout_s``, or the broker's error.
    """
    from .coordinators import committed_offsets

    parts = [(topic, p) for p in range(partitions)]
    leo = admin.list_offsets(parts, isolation_level="read_uncommitted", timeout_s=timeout_s)
    lso = admin.list_offsets(parts, isolation_level="read_committed", timeout_s=timeout_s)
    committed = committed_offsets(group_id, topic, timeout_s=timeout_s)
    out = {}
    for p in range(partitions):
        c = committed.get(p, -1)
        end = leo[(topic, p)]
        out[p] = {"committed": c, "log_end_offset": end, "last_stable_offset": lso[(topic, p)],
                  "lag": end - c if c >= 0 else 0}
    return out
