"""A measuring producer program's instruments (``from kafkalab.instruments import lab``, role
``measuring``).

Notebook 10 times producers. What a measuring producer program calls that is not Kafka code:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers`` and ``client.id``. Every knob (``acks``, ``linger.ms``, ``batch.size``,
  ``compression.type``, ``enable.idempotence``) is written in the program.
- ``lab.topic``: where the records go (partition 0).
- ``lab.values()``: the values to send, ``count`` values of ``value_bytes`` bytes.
- ``lab.until_turn(i)``: seconds until value ``i``'s turn when the run is paced at ``rate``
  records/s (counted from the first call), 0 or less when it is due; a burst (``rate`` None)
  is always due. The program waits in ``poll``, so delivery reports are served on time.
- ``lab.now()``: the stopwatch (``time.perf_counter``), taken just before ``produce``.
- ``lab.acked(sent, err, msg)``: a delivery report, with the stopwatch reading of its send:
  its time, offset (-1 with ``acks=0``: the producer is never told) and error are kept in
  memory and written, when the program ends, to ``<ledger>.times.json`` for the harness.
- ``lab.committed(started)``: a transactional producer's ``commit_transaction()`` returned; its
  duration from the stopwatch reading ``started`` is written to ``<ledger>.commits.json``.

A run may send given values instead of ``value_bytes`` of ``x`` (``MeasureOptions.values_path``:
a JSON list of strings, e.g. the flights as JSON for the compression run).

Notebook 10 also times consumers (role ``timed_reader``, ``MeasuringConsumerLab``). What
a measuring consumer program calls that is not Kafka code:

- ``lab.conf``: ``bootstrap.servers``, ``client.id`` and ``group.id`` (the program assigns its
  partition itself: the group id only names it). Every knob (``fetch.min.bytes``,
  ``fetch.wait.max.ms``, ``max.partition.fetch.bytes``) is written in the program.
- ``lab.topic``: the topic to read, partition 0 from offset 0.
- ``lab.start()``: the consumer is connected: says so to the harness (``<ledger>.ready``) and
  starts the stopwatch.
- ``lab.wanted()``: True until ``count`` records arrived (or the harness sent SIGTERM).
- ``lab.arrived(msg)``: a record arrived: its end-to-end latency (now minus its CreateTime,
  same machine, ms) and its value's bytes are kept.
- ``lab.statistics``: the ``stats_cb`` that keeps librdkafka's statistics report (with
  ``statistics.interval.ms``), which counts the Fetch requests (``brokers[].req.Fetch``);
  ``lab.counted()``: a report has seen every record arrive, so its count is complete.

At the end, ``<ledger>.times.json`` holds the latencies, bytes, seconds from ``start`` to the
last record, and the Fetch requests.

Nothing here sets a Kafka configuration, sends or reads a record: the program does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterator

from . import ProgramLab


@dataclass
class MeasureOptions:
    """What one measuring run sends (``ProgramSpec.options``).

    Attributes:
        count: values to send, >= 1.
        value_bytes: bytes per value, >= 1.
        rate: records/s when paced; None: a burst, as fast as the producer goes.
        values_path: a JSON file holding a list of ``count`` strings, sent (UTF-8) instead of
            ``value_bytes`` of ``x``; None: those.

    Raises:
        ValueError: a count, size or rate below 1 (rate: above 0).
    """

    count: int
    value_bytes: int
    rate: float | None = None
    values_path: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1 or self.value_bytes < 1 or (self.rate is not None and self.rate <= 0):
            raise ValueError(f"count and value_bytes must be >= 1 and rate > 0, not {self.count}, "
                             f"{self.value_bytes}, {self.rate}")


def times_path(ledger: str) -> str:
    """Where a measuring program's times go: ``<ledger>.times.json``."""
    return f"{ledger}.times.json"


def commits_path(ledger: str) -> str:
    """Where a transactional measuring program's commit durations go: ``<ledger>.commits.json``."""
    return f"{ledger}.commits.json"


def read_times(ledger: str | os.PathLike[str]) -> Any:
    """What a measuring program wrote to ``<ledger>.times.json`` when it ended: a producer's
    delivery reports as ``[sent, acked, offset, error]`` lists (stopwatch seconds, offset -1 if
    not told, error name or None), in report order; a consumer's dict (``latencies_ms``,
    ``value_bytes``, ``seconds``, ``fetch_requests``; ``MeasuringConsumerLab.close``).

    Raises:
        FileNotFoundError: the program did not end through ``close`` (it crashed or was killed).
        ValueError: the file is not JSON.
    """
    return json.loads(Path(times_path(str(ledger))).read_text())


def read_commits(ledger: str | os.PathLike[str]) -> list[float]:
    """The ``commit_transaction()`` durations (ms, in order) a transactional measuring program
    wrote to ``<ledger>.commits.json``; [] if it timed none (the file is written only then).

    Raises:
        ValueError: the file is not JSON.
    """
    path = Path(commits_path(str(ledger)))
    return json.loads(path.read_text()) if path.exists() else []


def ready_path(ledger: str) -> str:
    """The marker a measuring consumer writes at ``lab.start()``: ``<ledger>.ready``."""
    return f"{ledger}.ready"


def fetch_requests(report: str, received: int) -> int | None:
    """Fetch requests sent, from one librdkafka statistics report (JSON: ``brokers[].req.Fetch``)
    if it has seen ``received`` records arrive (partitions' ``rxmsgs``); else None."""
    s = json.loads(report)
    rx = sum(p.get("rxmsgs", 0) for t in s.get("topics", {}).values() for p in t.get("partitions", {}).values()
             if p.get("partition", 0) >= 0)
    if rx < received:
        return None
    return sum(b.get("req", {}).get("Fetch", 0) for b in s.get("brokers", {}).values())


class MeasuringLab(ProgramLab):
    """The instruments of one measuring producer process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``ledger``, ``options``: a
    ``MeasureOptions``'s fields). The program sends its values and ends; SIGTERM ends it."""

    stops_on_sigterm = False

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = MeasureOptions(**spec.options)
        self._path = times_path(spec.ledger)
        self._ledger = spec.ledger
        self._start: float | None = None
        self.acks: list[tuple[float, float, int, str | None]] = []
        self.commits: list[float] = []

    def values(self) -> Iterator[bytes]:
        """The values to send, in order."""
        if self.options.values_path:
            with open(self.options.values_path) as fh:
                given = json.load(fh)
            yield from (v.encode() for v in given[:self.options.count])
            return
        value = b"x" * self.options.value_bytes
        for _ in range(self.options.count):
            yield value

    def until_turn(self, i: int) -> float:
        """Seconds until value ``i`` is due (paced runs; <= 0: due now). The first call starts
        the pacing clock."""
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        if self.options.rate is None:
            return 0.0
        return self._start + i / self.options.rate - now

    @staticmethod
    def now() -> float:
        """The stopwatch: ``time.perf_counter()``, s."""
        return time.perf_counter()

    def acked(self, sent: float, err, msg) -> None:
        """Keep a delivery report: the send's stopwatch reading, the report's, the offset (-1 if
        unknown) and the error's name (None: delivered)."""
        offset = msg.offset() if err is None else None
        self.acks.append((sent, time.perf_counter(), -1 if offset is None or offset < 0 else offset,
                          err.name() if err is not None else None))

    def committed(self, started: float) -> None:
        """Keep one ``commit_transaction()``'s duration, ms, from the stopwatch reading ``started``."""
        self.commits.append((time.perf_counter() - started) * 1000)

    def close(self) -> None:
        """Write the reports to ``<ledger>.times.json`` (``[sent, acked, offset, error]`` each,
        in report order) and any commit durations to ``<ledger>.commits.json``, then close the
        ledger."""
        with open(self._path, "w") as fh:
            json.dump(self.acks, fh)
        if self.commits:
            with open(commits_path(self._ledger), "w") as fh:
                json.dump(self.commits, fh)
        super().close()


class MeasuringConsumerLab(ProgramLab):
    """The instruments of one measuring consumer process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``options``: a ``MeasureOptions``'s fields; ``count``: records to
    wait for). The program reads until ``lab.wanted()`` is False and ends."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = MeasureOptions(**spec.options)
        self._ledger_path = spec.ledger
        self._start: float | None = None
        self._last: float | None = None
        self._report: str | None = None
        self._fetches: int | None = None
        self.latencies_ms: list[float] = []
        self.value_bytes = 0

    def start(self) -> None:
        """The consumer is connected: write ``<ledger>.ready`` and start the stopwatch."""
        open(ready_path(self._ledger_path), "w").close()
        self._start = time.perf_counter()

    def wanted(self) -> bool:
        """True while fewer than ``count`` records arrived and the harness has not asked to stop."""
        return len(self.latencies_ms) < self.options.count and self.running()

    def arrived(self, msg) -> None:
        """A record arrived: keep now minus its CreateTime (ms) and its value's bytes."""
        self._last = time.perf_counter()
        self.latencies_ms.append(time.time() * 1000 - msg.timestamp()[1])
        self.value_bytes += len(msg.value() or b"")

    def statistics(self, report: str) -> None:
        """``stats_cb``: keep librdkafka's newest statistics report (JSON text)."""
        self._report = report

    def counted(self) -> bool:
        """A statistics report has seen every record that arrived (its Fetch count is complete,
        and kept: ``close`` writes it), or the harness asked to stop."""
        if not self.running():
            return True
        if self._report is not None:
            self._fetches = fetch_requests(self._report, len(self.latencies_ms))
        return self._fetches is not None

    def close(self) -> None:
        """Write ``<ledger>.times.json``: ``latencies_ms``, ``value_bytes``, ``seconds`` (from
        ``start`` to the last record) and ``fetch_requests`` (None without a complete report)."""
        fetches = self._fetches  # as counted: a report during close() may no longer list the partition
        if fetches is None and self._report is not None:
            fetches = fetch_requests(self._report, len(self.latencies_ms))
        seconds = (self._last - self._start) if self._start is not None and self._last is not None else 0.0
        with open(times_path(self._ledger_path), "w") as fh:
            json.dump({"latencies_ms": self.latencies_ms, "value_bytes": self.value_bytes, "seconds": seconds,
                       "fetch_requests": fetches}, fh)
        super().close()
