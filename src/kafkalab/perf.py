"""Performance measurements: one home for timed producer bursts, Kafka's own perf tools,
end-to-end latency, and the broker-side counters that explain them.

- ``ProducerSettings``: the knobs (acks, linger.ms, batch.size, compression, idempotence,
  transactions) as librdkafka settings and as Java producer properties, so both clients run
  the same configuration.
- ``java_burst`` (``kafka-producer-perf-test``, from the brokers' own jars): records/s and MB/s
  of one burst (the Python side is a notebook's program, ``producers.send_with``);
  ``parse_perf_summary`` reads the Java tool's last line.
- ``java_consume`` (``kafka-consumer-perf-test``): records/s, MB/s and records per Fetch request
  of one consumer reading records already in a partition; ``parse_consumer_perf_summary`` reads
  the Java tool's summary line and fetch metrics.
- ``Latency`` and ``percentiles``: end-to-end latency (a record's CreateTime to its arrival),
  summarized; ``java_e2e_latency`` runs ``kafka-e2e-latency`` (one record at a time,
  acknowledged and consumed before the next).
- ``log_bytes`` and ``records_per_batch``: what a burst left on the leaders' disks (the
  project's segment reader, ``kafkalab.segments``).
- ``broker_io`` and ``SyscallCounter``: a broker JVM's ``/proc/<pid>/io`` counters and the
  system calls it makes while it serves (``strace``).

Numbers move with the machine's load; compare measurements taken in the same run, never an
absolute figure. Sources: librdkafka CONFIGURATION.md (``linger.ms`` 5, ``batch.size``
1000000, ``compression.codec``, ``acks``); Kafka documentation 4.3, Producer Configs
(``linger.ms`` 5 since 4.0, KIP-1030; ``batch.size`` 16384), Consumer Configs
(``max.partition.fetch.bytes`` 1048576, ``fetch.max.bytes`` 52428800; KIP-74: a fetch returns at
least one whole batch), and "Design: Efficiency" (batching, the page cache, zero-copy ``sendfile``).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import admin, cluster, config, coordinators, segments
from .waiting import wait_until
from .errors import KafkalabError

#: Codecs both clients accept (librdkafka ``compression.codec``, Java ``compression.type``).
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("0", "1", "all")


@dataclass(frozen=True)
class ProducerSettings:
    """One producer configuration, for either client. None: the client's own default.

    Attributes:
        acks: "0", "1" or "all".
        linger_ms: how long a batch waits for more records, ms.
        batch_size: the most bytes in one batch.
        compression: one of ``CODECS``.
        idempotence: ``enable.idempotence``.
        transactional_batch: K > 0: records are sent in transactions of K records (the Python
            client only; ``kafka-producer-perf-test`` commits by time).
    """

    acks: str = "all"
    linger_ms: int | None = None
    batch_size: int | None = None
    compression: str = "none"
    idempotence: bool | None = None
    transactional_batch: int = 0

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise KafkalabError(f"acks must be one of {', '.join(ACKS)}, not {self.acks!r}")
        if self.compression not in CODECS:
            raise KafkalabError(f"compression must be one of {', '.join(CODECS)}, not {self.compression!r}")
        if self.transactional_batch < 0:
            raise KafkalabError(f"transactional_batch must be >= 0, not {self.transactional_batch}")
        if self.transactional_batch and (self.acks != "all" or self.idempotence is False):
            raise KafkalabError("transactions need acks=all and idempotence (KIP-98)")

    def props(self) -> dict[str, str]:
        """The settings both clients name alike (``acks``, ``linger.ms``, ``batch.size``,
        ``enable.idempotence``), as strings; the codec is in ``librdkafka_conf`` and ``java_props``."""
        out = {"acks": self.acks}
        if self.linger_ms is not None:
            out["linger.ms"] = str(self.linger_ms)
        if self.batch_size is not None:
            out["batch.size"] = str(self.batch_size)
        if self.idempotence is not None or self.transactional_batch:
            out["enable.idempotence"] = "true" if (self.idempotence or self.transactional_batch) else "false"
        return out

    def librdkafka_conf(self) -> dict:
        """confluent-kafka settings (``compression.codec``)."""
        return {**self.props(), "compression.codec": self.compression}

    def java_props(self) -> list[str]:
        """``key=value`` items for ``kafka-producer-perf-test --producer-props``
        (``compression.type``). Java's ``acks=all`` with idempotence unset is idempotent
        (Kafka 3.0+, KIP-679); an explicit ``acks`` other than all turns idempotence off,
        so it is set to false then."""
        props = self.props()
        if self.acks != "all" and "enable.idempotence" not in props:
            props["enable.idempotence"] = "false"
        return [f"{k}={v}" for k, v in {**props, "compression.type": self.compression}.items()]


@dataclass
class Burst:
    """One timed burst of one client.

    Attributes:
        client: ``confluent-kafka`` or ``kafka-producer-perf-test``.
        settings: the ``ProducerSettings`` used (as a dict).
        records, record_size: what was sent (bytes per value).
        seconds: from the first send to the last acknowledgement.
        avg_latency_ms, p99_latency_ms: the Java tool's per-record send-to-ack latency; None
            for confluent-kafka.
        commit_ms: with transactions, each ``commit_transaction()`` call's duration, ms.
    """

    client: str
    settings: dict
    records: int
    record_size: int
    seconds: float
    avg_latency_ms: float | None = None
    p99_latency_ms: float | None = None
    commit_ms: list[float] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        """Payload megabytes (10^6 bytes of values) per second."""
        return self.records * self.record_size / self.seconds / 1e6

    def to_json(self) -> dict:
        return {**asdict(self), "records_per_s": round(self.records_per_s, 1), "mb_per_s": round(self.mb_per_s, 3)}


_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th")


def parse_perf_summary(text: str) -> dict[str, float]:
    """The last summary line of ``kafka-producer-perf-test``'s output
    (``N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, ...``).

    Returns:
        ``{"records", "records_per_s", "mb_per_s", "avg_latency_ms", "max_latency_ms",
        "p50_ms", "p95_ms", "p99_ms", "p999_ms"}``.

    Raises:
        KafkalabError: no summary line (the tool's output is quoted).
    """
    found = list(_SUMMARY.finditer(text))
    if not found:
        raise KafkalabError(f"no summary line in kafka-producer-perf-test's output:\n{text[-1500:]}")
    m = found[-1]
    return {"records": int(m["records"]), "records_per_s": float(m["rps"]), "mb_per_s": float(m["mbps"]),
            "avg_latency_ms": float(m["avg"]), "max_latency_ms": float(m["max"]), "p50_ms": float(m["p50"]),
            "p95_ms": float(m["p95"]), "p99_ms": float(m["p99"]), "p999_ms": float(m["p999"])}


def java_burst(topic: str, records: int, record_size: int, settings: ProducerSettings,
               timeout_s: float = 300.0) -> Burst:
    """The same burst with Kafka's Java producer: ``kafka-producer-perf-test --throughput -1``
    (as fast as it can), in a JVM with its full JIT compiler (``cluster.TOOL_JVM_MEASURE``).
    Its records/s counts from its first send to its last callback, as ``producers.send_with`` does;
    its JVM start is not counted, its JIT warm-up is.

    Raises:
        KafkalabError: ``transactional_batch`` set (the tool commits by time, not by count), or
            the tool failed (its output is quoted).
    """
    if settings.transactional_batch:
        raise KafkalabError("kafka-producer-perf-test commits transactions by time (--transaction-duration-ms), "
                            "not every K records: compare transactions with the Python client only")
    cp = cluster.tool("kafka-producer-perf-test", "--topic", topic, "--num-records", str(records),
                      "--record-size", str(record_size), "--throughput", "-1",
                      "--producer-props", *settings.java_props(), timeout_s=timeout_s, measure=True)
    s = parse_perf_summary(cp.stdout)
    return Burst("kafka-producer-perf-test", asdict(settings), int(s["records"]), record_size,
                 s["records"] / s["records_per_s"], s["avg_latency_ms"], s["p99_ms"])


# ----------------------------------------------------------------------------- consumer throughput


@dataclass
class ConsumeBurst:
    """One consumer reading records already in a partition, timed.

    Attributes:
        client: ``confluent-kafka`` or ``kafka-consumer-perf-test``.
        conf: the consumer settings beyond the client's defaults (e.g.
            ``{"max.partition.fetch.bytes": 1000}``).
        records: records received.
        value_bytes: bytes of values received (confluent-kafka); the Java tool's
            ``data.consumed.in.MB`` × 2^20 (it counts keys and values).
        seconds: confluent-kafka: from ``assign`` to the last record (connections and metadata
            are set up before, untimed); the Java tool: its ``fetch.time.ms`` (after the group
            join, which it reports apart as ``rebalance.time.ms``).
        fetch_requests: Fetch requests the client sent (librdkafka statistics ``brokers[].req.Fetch``;
            Java metric ``fetch-total``), the empty long-poll ones at the end included.
    """

    client: str
    conf: dict
    records: int
    value_bytes: int
    seconds: float
    fetch_requests: int | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        """Megabytes (10^6 bytes) of values per second."""
        return self.value_bytes / self.seconds / 1e6

    @property
    def records_per_fetch(self) -> float | None:
        return self.records / self.fetch_requests if self.fetch_requests else None

    def to_json(self) -> dict:
        rpf = self.records_per_fetch
        return {**asdict(self), "records_per_s": round(self.records_per_s, 1), "mb_per_s": round(self.mb_per_s, 3),
                "records_per_fetch": round(rpf, 2) if rpf is not None else None}


_CONSUMER_METRIC = re.compile(r"^consumer-fetch-manager-metrics:(?P<name>[\w-]+):\{client-id=[^,}]*\}\s*:\s*(?P<value>[\d.]+)\s*$",
                              re.M)


def parse_consumer_perf_summary(text: str) -> dict[str, float]:
    """``kafka-consumer-perf-test``'s summary (a header line ``start.time, end.time,
    data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
    fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec`` and the values line after it), plus, with
    ``--print-metrics``, the client-wide ``consumer-fetch-manager-metrics`` (``fetch-total``,
    ``records-per-request-avg``, ...), named with underscores.

    Returns:
        ``{"data.consumed.in.MB": ..., "fetch.nMsg.sec": ..., ..., "fetch_total": ...}``: every
        numeric column (the two times left out) and every client-wide fetch metric.

    Raises:
        KafkalabError: no summary (the tool's output is quoted).
    """
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("start.time,")]
    if not heads or heads[-1] + 1 >= len(lines):
        raise KafkalabError(f"no summary in kafka-consumer-perf-test's output:\n{text[-1500:]}")
    names = [x.strip() for x in lines[heads[-1]].split(",")]
    values = [x.strip() for x in lines[heads[-1] + 1].split(",")]
    if len(names) != len(values):
        raise KafkalabError(f"kafka-consumer-perf-test's summary has {len(values)} values for {len(names)} columns:\n"
                            f"{lines[heads[-1]]}\n{lines[heads[-1] + 1]}")
    out = {k: float(v) for k, v in zip(names, values) if k not in ("start.time", "end.time")}
    out.update({m["name"].replace("-", "_"): float(m["value"]) for m in _CONSUMER_METRIC.finditer(text)})
    return out


def java_consume(topic: str, records: int, max_partition_fetch_bytes: int | None = None,
                 fetch_max_bytes: int | None = None, timeout_s: float = 300.0) -> ConsumeBurst:
    """The same read with Kafka's Java consumer: ``kafka-consumer-perf-test`` (a new group, from
    the earliest offset, ``--fetch-size`` is ``max.partition.fetch.bytes``) in a JVM set up for
    measuring (``cluster.TOOL_JVM_MEASURE``), with ``--print-metrics`` for its Fetch count.
    The group is deleted afterwards, also when the tool fails.

    Args:
        max_partition_fetch_bytes, fetch_max_bytes: bytes; None: Java's defaults (1048576 and
            52428800, Kafka Consumer Configs).

    Raises:
        KafkalabError: the tool failed or received fewer than ``records`` (its output is quoted).
    """
    group = f"{topic}-perf-{time.time_ns()}"
    args = ["--topic", topic, "--num-records", str(records), "--group", group,
            "--timeout", "30000", "--print-metrics"]
    conf: dict = {}
    if max_partition_fetch_bytes is not None:
        args += ["--fetch-size", str(max_partition_fetch_bytes)]
        conf["max.partition.fetch.bytes"] = max_partition_fetch_bytes
    if fetch_max_bytes is not None:
        args += ["--command-property", f"fetch.max.bytes={fetch_max_bytes}"]
        conf["fetch.max.bytes"] = fetch_max_bytes
    try:
        cp = cluster.tool("kafka-consumer-perf-test", *args, timeout_s=timeout_s, measure=True)
    finally:  # the tool's group (its members left when it ended) goes: the cluster as it was found
        admin.delete_groups([group])
    s = parse_consumer_perf_summary(cp.stdout)
    got = int(s["data.consumed.in.nMsg"])
    if got < records:
        raise KafkalabError(f"kafka-consumer-perf-test read {got} of {records} records from {topic}:\n{cp.stdout[-1500:]}")
    return ConsumeBurst("kafka-consumer-perf-test", conf, got, round(s["data.consumed.in.MB"] * 2**20),
                        max(s["fetch.time.ms"], 1.0) / 1000, int(s["fetch_total"]) if "fetch_total" in s else None)


# ----------------------------------------------------------------------------- on disk


def log_bytes(topic: str, partitions: int) -> int:
    """Bytes of ``topic``'s ``.log`` segment files on each partition's leader (one replica),
    batch headers and record framing included: what the records cost on disk."""
    return sum(Path(f).stat().st_size for f in coordinators.leader_log_files(topic, partitions))


def data_batches(topic: str, partitions: int) -> list[segments.RecordBatch]:
    """The data batches of ``topic`` on the leaders' disks, partition by partition in file order
    (control batches left out), read with the project's segment reader (headers only): their
    record counts, producer ids and sequence numbers."""
    return [b for f in coordinators.leader_log_files(topic, partitions)
            for b in segments.read_log(f, records=False, check_crc=False).batches if not b.is_control]


def records_per_batch(topic: str, partitions: int) -> list[int]:
    """Records in each data batch of ``topic`` on the leaders' disks, in file order
    (``data_batches``)."""
    return [b.records_count for b in data_batches(topic, partitions)]


# ----------------------------------------------------------------------------- latency


@dataclass
class Latency:
    """End-to-end latency of one run: record CreateTime to its arrival in ``poll``, ms.

    Attributes:
        label: what was measured.
        records: records received.
        p50_ms, p99_ms, max_ms: percentiles of the latencies (ms, 1 ms resolution).
        rate: the producer's target rate, records/s.
        consumer_conf: consumer settings beyond the defaults.
        first_half_p50_ms, second_half_p50_ms: p50 of the first and of the second half of the
            records (send order): a second half much later than the first is a backlog, a
            pipeline that does not keep up with ``rate`` (None: not measured).
    """

    label: str
    records: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    rate: float
    consumer_conf: dict = field(default_factory=dict)
    first_half_p50_ms: float | None = None
    second_half_p50_ms: float | None = None

    @classmethod
    def of(cls, label: str, latencies_ms: list[float], rate: float, consumer_conf: dict | None = None) -> "Latency":
        """The summary of ``latencies_ms`` (ms, in send order), rounded to 0.1 ms (the halves
        None with one latency).

        Raises:
            KafkalabError: no latencies.
        """
        half = len(latencies_ms) // 2
        p50, p99, mx = percentiles(latencies_ms)
        halves = [round(percentiles(x)[0], 1) for x in (latencies_ms[:half], latencies_ms[half:])] if half else [None, None]
        return cls(label, len(latencies_ms), round(p50, 1), round(p99, 1), round(mx, 1), rate, dict(consumer_conf or {}),
                   *halves)

    def to_json(self) -> dict:
        return asdict(self)


def percentiles(values: list[float]) -> tuple[float, float, float]:
    """(p50, p99, max) of ``values`` (nearest-rank percentiles).

    Raises:
        KafkalabError: no values.
    """
    if not values:
        raise KafkalabError("no latencies to summarise: nothing was received")
    s = sorted(values)

    def rank(q: float) -> float:
        return s[min(len(s) - 1, max(0, int(-(-q * len(s) // 1)) - 1))]

    return rank(0.50), rank(0.99), s[-1]


_E2E = re.compile(r"Avg latency: (?P<avg>[\d.]+) ms")
_E2E_P = re.compile(r"Percentiles: 50th = (?P<p50>[\d.]+), 99th = (?P<p99>[\d.]+), 99.9th = (?P<p999>[\d.]+)")


def java_e2e_latency(topic: str, records: int, record_size: int = 100, acks: str = "1",
                     timeout_s: float = 300.0) -> dict[str, float]:
    """``kafka-e2e-latency``: the Java clients send one record at a time, each acknowledged
    and consumed before the next; the tool prints the average and percentiles (ms).

    Returns:
        ``{"avg_ms", "p50_ms", "p99_ms", "p999_ms"}``.

    Raises:
        KafkalabError: the tool failed, or printed no latency line.
    """
    cp = cluster.tool("kafka-e2e-latency", "--bootstrap-server", config.bootstrap_servers(), "--topic", topic,
                      "--num-records", str(records), "--producer-acks", acks, "--record-size", str(record_size),
                      timeout_s=timeout_s, measure=True)
    avg, pct = _E2E.search(cp.stdout), _E2E_P.search(cp.stdout)
    if not avg or not pct:
        raise KafkalabError(f"no latency in kafka-e2e-latency's output:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")
    return {"avg_ms": float(avg["avg"]), "p50_ms": float(pct["p50"]), "p99_ms": float(pct["p99"]),
            "p999_ms": float(pct["p999"])}


# ----------------------------------------------------------------------------- broker counters


def broker_io(node_id: int) -> dict[str, int]:
    """``/proc/<pid>/io`` of broker ``node_id``'s JVM: ``rchar``/``wchar`` (bytes through
    read/write calls, page cache hits included), ``read_bytes``/``write_bytes`` (bytes the
    storage layer actually fetched from or sent to the disk).

    Raises:
        KafkalabError: the broker is not running here, or the file cannot be read (another
            user's process without root).
    """
    node = cluster.status().brokers.get(node_id)
    if node is None or not node.alive or not node.pid:
        raise KafkalabError(f"broker {node_id} is not running on this machine (kafkalab status)")
    try:
        text = Path(f"/proc/{node.pid}/io").read_text()
    except OSError as e:
        raise KafkalabError(f"cannot read /proc/{node.pid}/io: {e}") from None
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def resident_bytes(path: str | Path) -> int:
    """Bytes of file ``path`` whose pages are in the page cache now (``mincore(2)`` on a
    read-only shared mapping, as ``fincore`` from util-linux does; pages of 4096 bytes, the
    last one counted whole only up to the file's end). Mapping a file reads nothing from disk.

    Raises:
        KafkalabError: the file cannot be opened or mapped.
    """
    import ctypes
    import mmap
    import os

    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)  # this process's symbols, libc's among them (find_library runs ldconfig)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise KafkalabError(f"cannot map {path}: {os.strerror(ctypes.get_errno())}")
        try:
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                raise KafkalabError(f"mincore failed on {path}: {os.strerror(ctypes.get_errno())}")
            flags = vec.raw
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    resident = sum(page for i in range(pages - 1) if flags[i] & 1)
    return resident + (size - (pages - 1) * page if flags[pages - 1] & 1 else 0)


class SyscallCounter:
    """``strace -f -c -e trace=CALLS -p PID`` attached to a running process until ``stop()``:
    how many times each system call ran meanwhile (strace's summary table). A context
    manager. Attaching needs root or ``ptrace`` rights over the process.

    ``strace -p`` attaches to the process's threads one after the other; entering returns only
    once every thread of the process shows strace as its tracer (``/proc/PID/task/*/status``
    ``TracerPid``), among them at least one whose name (``/proc/PID/task/*/comm``, 15
    characters) starts with ``thread_prefix``: for a broker, ``data-plane-kafk``, its network
    threads (``data-plane-kafka-network-thread-*``, which write responses to the sockets) and
    request handlers. Threads started later are followed (``-f``).

    Raises (on enter):
        KafkalabError: no ``strace`` on PATH (Debian: ``apt install strace``), or it could not
            attach (its message is quoted).
        WaitTimeout: not every thread traced within ``attach_timeout_s`` (the untraced ones named).
    """

    #: Thread names (``comm``, cut to 15 characters) of a Kafka broker's data-plane network
    #: threads and request handlers (``SocketServer``: ``data-plane-kafka-network-thread-*``).
    BROKER_THREADS = "data-plane-kafk"

    def __init__(self, pid: int, calls: tuple[str, ...], thread_prefix: str = BROKER_THREADS,
                 attach_timeout_s: float = 30.0):
        self.pid, self.calls = pid, calls
        self.thread_prefix, self.attach_timeout_s = thread_prefix, attach_timeout_s
        self.counts: dict[str, int] = {}
        self.threads_traced = 0
        self._proc: subprocess.Popen | None = None
        self._out = config.state_dir() / "tools" / f"strace-{pid}-{time.time_ns()}.txt"

    def __enter__(self) -> "SyscallCounter":
        import shutil

        if not shutil.which("strace"):
            raise KafkalabError("strace is missing: the zero-copy check traces the broker's system calls "
                                "(Debian: apt install strace)")
        self._out.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(["strace", "-f", "-c", "-e", f"trace={','.join(self.calls)}", "-o",
                                       str(self._out), "-p", str(self.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        untraced: list[str] = []

        def attached() -> bool:
            nonlocal untraced
            if self._proc.poll() is not None:
                raise KafkalabError(f"strace could not attach to {self.pid}: {self._proc.stderr.read()[-800:]}")
            threads = thread_tracers(self.pid)
            untraced = sorted(name for name, tracer in threads if tracer != self._proc.pid)
            named = [name for name, _ in threads if name.startswith(self.thread_prefix)]
            self.threads_traced = len(threads) - len(untraced)
            return bool(threads) and not untraced and bool(named)

        try:
            wait_until(attached, timeout_s=self.attach_timeout_s, interval_s=0.05,
                       what=f"strace attached to every thread of {self.pid}, its {self.thread_prefix}* threads included",
                       on_timeout=lambda: f"not traced yet: {untraced[:10]}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> dict[str, int]:
        """Detach (SIGINT) and return ``{call: count}`` for the calls seen."""
        import signal

        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self.counts = parse_strace_summary(self._out.read_text() if self._out.exists() else "")
        return self.counts

    def __exit__(self, *exc) -> None:
        self.stop()


def thread_tracers(pid: int) -> list[tuple[str, int]]:
    """``(name, tracer pid)`` of each thread of ``pid`` (``/proc/PID/task/*/comm`` and the
    ``TracerPid:`` line of its ``status``; 0: not traced). Threads that end while they are read
    are left out."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            tracer = int((task / "status").read_text().split("TracerPid:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            continue
        out.append((name, tracer))
    return out


def parse_strace_summary(text: str) -> dict[str, int]:
    """``{syscall: calls}`` from ``strace -c``'s table (columns ``% time seconds usecs/call
    calls errors syscall``; the ``total`` row left out)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[-1] != "total" and cells[0].replace(".", "", 1).isdigit():
            calls = [c for c in cells[3:-1] if c.isdigit()]
            if calls:
                out[cells[-1]] = int(calls[0])
    return out

