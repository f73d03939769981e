"""The ledger: what every producer and consumer of an experiment says happened.

Each process appends one JSON object per line to its own file (``Ledger``): a record
was *produced* (handed to the client), *acked* (delivery report without error, so its
partition and offset are known), *consumed* (returned by ``poll``), *processed* (the
application's side effect ran) or *committed* (an offset commit succeeded). The
audit (``kafkalab.audit``) joins these lines to find lost writes, duplicates and the
other anomalies Jepsen's Kafka checker names.

One file per process (a glob joins them): lines from several processes appending to
one file can interleave mid-line. Threads of one process share one ``Ledger``; it is
thread-safe.

Ordering: ``seq`` counts the events of one ``Ledger`` (0, 1, 2, ...) and is assigned
under the same lock as the write, so within one ledger it is the exact order of
``record`` calls; ``ts_ms`` is the wall clock (ms since the Unix epoch) and orders
events across ledgers. The audit orders by ``(ts_ms, seq)``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import TracebackType
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Event kinds, in the life of one record, then the group membership events a consumer
#: records per partition from its rebalance callbacks (``assigned``, ``revoked``: with
#: ``partition`` set, ``offset`` and ``value`` None), then a share consumer's per-record
#: acknowledgement (``acknowledged``, KIP-932: ``ack`` says ACCEPT, RELEASE or REJECT).
KINDS: tuple[str, ...] = ("produced", "acked", "consumed", "processed", "committed", "assigned", "revoked",
                          "acknowledged")


@dataclass(frozen=True)
class Event:
    """One line of a ledger.

    Attributes:
        run_id: the experiment run; a run's producers and consumers share it.
        kind: one of ``KINDS``.
        ts_ms: wall clock when recorded, ms since the Unix epoch.
        seq: position in the ``Ledger`` that wrote it (0, 1, ...): exact order within
            one writer.
        topic: topic name.
        partition: partition, or None when unknown (a ``produced`` event before the
            partitioner ran, a failed send).
        offset: offset in the partition, or None when unknown. For ``committed`` it is
            the committed position (next offset to read).
        key: record key as text, or None.
        value: the record's unique id (``"flight-123"``), or None (``committed``).
        member_id: consumer group member id (``consumer.memberid()``), or None.
        group_instance_id: static membership id (KIP-345), or None.
        generation: consumer group generation, or None.
        client_id: ``client.id`` of the producer or consumer, or None.
        error: error text, or None. An ``acked`` event with an error is a failed
            delivery report (not an acknowledgement); a ``committed`` one, a failed commit.
        delivery_count: share groups (KIP-932): how many times the broker has delivered this
            record, this delivery included (``Message.delivery_count()``; 1 the first time),
            on ``consumed``, ``processed`` and ``acknowledged`` events of a share consumer;
            None elsewhere.
        ack: share groups: the acknowledgement type of an ``acknowledged`` event (``ACCEPT``,
            ``RELEASE`` or ``REJECT``); None elsewhere.

    Raises:
        ValueError: ``kind`` is not one of ``KINDS``.
    """

    run_id: str
    kind: str
    ts_ms: int
    seq: int
    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    value: str | None = None
    member_id: str | None = None
    group_instance_id: str | None = None
    generation: int | None = None
    client_id: str | None = None
    error: str | None = None
    delivery_count: int | None = None
    ack: str | None = None

    def __post_init__(self) -> None:
        check_kind(self.kind)

    def to_json(self) -> str:
        """The event as one line of compact JSON (no newline), fields in schema order."""
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Event:
        """Parse one ledger line. Raises ``ValueError`` (bad JSON or kind), ``TypeError`` (fields)."""
        return cls(**json.loads(line))


#: Field names in ledger order (``Event`` and ``ledger_schema()`` agree).
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Event))


def check_kind(kind: str) -> str:
    """Return ``kind`` if it is one of ``KINDS``; raise ``ValueError`` naming them otherwise."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def now_ms() -> int:
    """Wall clock, ms since the Unix epoch."""
    return time.time_ns() // 1_000_000


class Ledger:
    """Append ``Event`` lines (JSON lines) to a file; thread-safe; a context manager.

    ``Ledger(path, run_id)`` opens ``path`` for appending (parent folders are created).
    ``record(kind, topic=..., ...)`` writes one line; ``flush()`` makes every line so far
    durable. ``seq`` restarts at 0 for every ``Ledger`` object, so give each process (and
    each restart of it) its own file.

    Example::

        with Ledger(run_dir / f"producer-{os.getpid()}.jsonl", run_id) as ledger:
            ledger.record("produced", topic="flights", key="JFK", value="flight-1")
    """

    def __init__(self, path: str | os.PathLike[str], run_id: str, write_through: bool = False) -> None:
        """``write_through=True`` hands every line to the kernel as it is written (a file
        flush, no fsync): a process killed from outside (``SIGKILL``) loses nothing, at the
        cost of one system call per event. Worker processes that are killed on purpose use it."""
        self.path = Path(path)
        self.run_id = run_id
        self.write_through = write_through
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._seq = 0

    def record(self, kind: str, **fields_: Any) -> Event:
        """Write one event and return it.

        Args:
            kind: one of ``KINDS``.
            **fields_: ``Event`` fields; ``topic`` is required. ``run_id`` defaults to
                the ledger's, ``ts_ms`` to now (ms); ``seq`` is always assigned here.

        Returns:
            The ``Event`` written.

        Raises:
            ValueError: unknown ``kind``, ``seq`` given, or the ledger is closed.
            TypeError: a field name ``Event`` does not have, or ``topic`` missing.
        """
        check_kind(kind)
        if "seq" in fields_:
            raise ValueError("seq is assigned by the Ledger, do not pass it")
        fields_.setdefault("run_id", self.run_id)
        with self._lock:
            if self._file is None:
                raise ValueError(f"ledger {self.path} is closed")
            fields_.setdefault("ts_ms", now_ms())
            event = Event(kind=kind, seq=self._seq, **fields_)
            self._file.write(event.to_json() + "\n")
            if self.write_through:
                self._file.flush()
            self._seq += 1
        return event

    def flush(self) -> None:
        """Push every line written so far to the disk (file flush, then ``os.fsync``).

        Call it before any deliberate kill or crash of this process (``SIGKILL``, a fault
        injection): after it returns, nothing recorded so far is lost, even if the process
        dies the next instant. No-op on a closed ledger.
        """
        with self._lock:
            if self._file is None:
                return
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Flush (with fsync) and close; later ``record`` calls raise ``ValueError``."""
        self.flush()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r}, run_id={self.run_id!r}, events={self._seq})"


def read_events(path: str | os.PathLike[str], growing: bool = False, kinds: str | Sequence[str] | None = None,
                missing_ok: bool = False) -> list[Event]:
    """The events of a ledger (for small, local use; Spark: ``load``): the one reader of the
    format the ``Ledger`` writes (JSON lines, one ``Event`` each, fields ``FIELDS``).

    Args:
        path: one ledger file, or a folder: then every ``*.jsonl`` file in it, by name (one
            file per process: a run's consumers, say).
        growing: the files are read while their writers append, so a last line without its
            newline (caught mid-write) is left for the next read instead of failing it.
        kinds: keep only events of this kind (or these kinds, ``KINDS``); None: every event.
        missing_ok: a ``path`` that does not exist (yet: a worker before its first event) gives
            no events instead of raising.

    Returns:
        The ``Event`` objects in file order (a folder: file after file). Blank lines are skipped.

    Raises:
        FileNotFoundError: no such file or folder (unless ``missing_ok``).
        ValueError: a line is not valid JSON or has an unknown kind (message names the file
            and line number; a torn last line means the writer died without ``flush()``), or
            ``kinds`` names an unknown kind.
        TypeError: a line has fields ``Event`` does not.
    """
    wanted = None if kinds is None else {check_kind(k) for k in ([kinds] if isinstance(kinds, str) else kinds)}
    p = Path(path)
    if missing_ok and not p.exists():
        return []
    events: list[Event] = []
    for file in sorted(p.glob("*.jsonl")) if p.is_dir() else [p]:
        with file.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip() or (growing and not line.endswith("\n")):
                    continue
                try:
                    event = Event.from_json(line)
                except ValueError as e:
                    raise ValueError(f"{file}:{number}: {e}") from e
                if wanted is None or event.kind in wanted:
                    events.append(event)
    return events


def ledger_schema() -> StructType:
    """The Spark schema of a ledger line, field for field with ``Event``.

    Strings for text; ``ts_ms``, ``seq``, ``offset`` LongType; ``partition``,
    ``generation``, ``delivery_count`` IntegerType. All nullable (Spark's JSON source makes them so anyway).
    """
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {
        "ts_ms": LongType(),
        "seq": LongType(),
        "offset": LongType(),
        "partition": IntegerType(),
        "generation": IntegerType(),
        "delivery_count": IntegerType(),
    }
    return StructType([StructField(name, types.get(name, StringType()), True) for name in FIELDS])


def load(
    spark: SparkSession,
    path_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    mode: str = "FAILFAST",
) -> DataFrame:
    """Ledger lines as a lazy Spark DataFrame with ``ledger_schema()``.

    Args:
        spark: the session (``kafkalab.spark.session()``).
        path_or_glob: a file, a folder of files, or a Hadoop glob
            (``"runs/r1/*.jsonl"``); a list of paths also works.
        mode: Spark JSON parse mode. ``"FAILFAST"`` (default) fails the first action on a
            malformed line; ``"DROPMALFORMED"`` skips it (the torn last line of a writer
            killed without ``flush()``).

    Returns:
        ``pyspark.sql.DataFrame`` with the columns of ``Event``.

    Raises:
        pyspark.errors.AnalysisException: the path matches no file.
    """
    paths = [str(p) for p in path_or_glob] if isinstance(path_or_glob, (list, tuple)) else str(path_or_glob)
    return spark.read.schema(ledger_schema()).option("mode", mode).json(paths)


def events_frame(spark: SparkSession, events: list[Event]) -> DataFrame:
    """A small DataFrame from ``Event`` objects (tests, notebooks), with ``ledger_schema()``."""
    rows = [tuple(getattr(e, name) for name in FIELDS) for e in events]
    return spark.createDataFrame(rows, schema=ledger_schema())


def crash(ledger: Ledger) -> NoReturn:
    """An intentional crash at an exact point: flush ``ledger`` (nothing recorded is lost),
    then SIGKILL this process (no ``close``, no commit, no LeaveGroup: to the broker it is a
    dead client)."""
    ledger.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(-signal.SIGKILL)  # not reached
