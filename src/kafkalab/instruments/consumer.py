"""A consumer program's instruments (``from kafkalab.instruments import lab``, role ``consumer``).

What a consumer program (notebook 03) calls that is not Kafka code, each named for what it does:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers``, ``group.id``, ``client.id`` and, for a static member (KIP-345),
  ``group.instance.id`` and ``session.timeout.ms``. The program merges its own settings in
  (``lab.conf | {...}``), so every setting that decides what happens is on screen.
- ``lab.topic``: the run's topic. ``lab.sink_path``: the sqlite file of the side effect.
- ``lab.on_assign`` / ``lab.on_revoke`` (for ``subscribe``) and ``lab.on_commit`` (the
  ``on_commit`` setting): record ``assigned``, ``revoked`` and ``committed`` ledger events.
- ``lab.consumed(batch)``: records a ``consumed`` event per record ``consume`` returned (or
  the error a message carries), the whole batch before it is processed.
- ``lab.work(msg)``: the simulated work on one record, ``process_ms`` long (then, with
  ``work_until``, until that file exists).
- ``lab.processed(msg)``: records ``processed`` (call it once the side effect is done).
- ``lab.commit_returned(result)``: records what a synchronous ``commit`` returned (a list of
  ``TopicPartition``) or raised (an exception) as ``committed`` events.
- ``lab.crash_point(point, msg, consumer=None)``: where the lab may kill this process. On the
  ``crash_after``-th processed record, at the run's ``crash_point`` (``"after-process"`` or
  ``"after-commit"``), it flushes the ledger and SIGKILLs the process (``ledger.crash``).
  Passing ``consumer`` at ``"after-commit"`` (a program with no commit call of its own, the
  auto-commit one) first waits until the group coordinator reports as committed the
  consumer's positions (``Consumer.committed`` >= ``Consumer.position``), at most
  ``AUTO_COMMIT_WAIT_S``: the timer's commit of everything handed over, seen, not raced.
- ``lab.running()``: False once the harness asked the program to stop (SIGTERM); a program
  finishes the records in hand, closes its consumer and ends.
- ``lab.group_formed()``: True once the harness saw the whole group STABLE (notebook 07: a
  member holds its partitions paused until then, so the group starts reading all at once).
- ``lab.statistics``: a ``stats_cb`` (with ``statistics.interval.ms``) that appends each
  librdkafka statistics report to ``<ledger>.stats.jsonl``, which ``kafkalab.metrics`` parses
  (notebook 13).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ..ledger import crash, now_ms
from ..waiting import wait_until
from . import ProgramLab

#: Where a consumer program may be killed (``ConsumerOptions.crash_point``).
CRASH_POINTS = ("after-process", "after-commit")
#: Bound (s) of the wait, at an ``after-commit`` crash point given the consumer, for the
#: auto-commit timer's commit of what was handed over (many timer periods on a loaded machine).
AUTO_COMMIT_WAIT_S = 30.0
#: Bound (s) of ``work`` waiting for its ``work_until`` file, after ``process_ms``.
WORK_UNTIL_MAX_S = 180.0


@dataclass
class ConsumerOptions:
    """The instruments' settings for one consumer program process (``ProgramSpec.options``).

    Attributes:
        process_ms: simulated work per record (``lab.work``), ms.
        crash_after: the process dies at its crash point on this processed record (None: never).
        crash_point: one of ``CRASH_POINTS``.
        sink: path of the side effect's sqlite file (``lab.sink_path``), or None.
        work_until: path of a file that ends each record's work once it exists, or None.
        group_formed: path of a file the harness writes once the group is stable
            (``group_formed()``), or None (always formed).

    Raises:
        ValueError: unknown ``crash_point``.
    """

    process_ms: float = 0.0
    crash_after: int | None = None
    crash_point: str = "after-commit"
    sink: str | None = None
    work_until: str | None = None
    group_formed: str | None = None

    def __post_init__(self) -> None:
        if self.crash_point not in CRASH_POINTS:
            raise ValueError(f"crash_point must be one of {', '.join(CRASH_POINTS)}, not {self.crash_point!r}")


def _text(b: bytes | None) -> str | None:
    return b.decode() if b is not None else None


def statistics_path(ledger: str | os.PathLike) -> str:
    """Where ``ConsumerLab.statistics`` appends a program's librdkafka statistics reports:
    ``<ledger>.stats.jsonl``."""
    return f"{ledger}.stats.jsonl"


class ConsumerLab(ProgramLab):
    """The instruments of one consumer program process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``ledger``, ``options``)."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = ConsumerOptions(**spec.options)
        self.sink_path: str | None = self.options.sink
        self.member_id: str | None = None
        self.processed_count = 0

    # -- the ledger
    def _note(self, kind: str, **kw: Any) -> None:
        self.ledger.record(kind, client_id=self.name, member_id=self.member_id,
                           group_instance_id=self.instance_id, **kw)

    def on_assign(self, consumer, partitions) -> None:
        """``subscribe(on_assign=...)``: records ``assigned`` per partition (and the member id)."""
        self.member_id = consumer.memberid()
        for p in partitions:
            self._note("assigned", topic=p.topic, partition=p.partition)

    def on_revoke(self, consumer, partitions) -> None:
        """``subscribe(on_revoke=..., on_lost=...)``: records ``revoked`` per partition."""
        for p in partitions:
            self._note("revoked", topic=p.topic, partition=p.partition)

    def on_commit(self, err, partitions) -> None:
        """The ``on_commit`` setting: records ``committed`` per partition with an offset (or an
        error)."""
        for p in partitions or []:
            if p.offset >= 0 or err or p.error:  # a partition with nothing to commit is no commit
                self._note("committed", topic=p.topic, partition=p.partition, offset=p.offset,
                           error=str(err) if err else (str(p.error) if p.error else None))

    def commit_returned(self, result) -> None:
        """Records what a synchronous ``Consumer.commit`` returned (``list[TopicPartition]``)
        or raised (an exception) as ``committed`` events."""
        if isinstance(result, BaseException):
            self._note("committed", topic=self.topic, error=str(result))
            return
        for tp in result or []:
            self._note("committed", topic=tp.topic, partition=tp.partition, offset=tp.offset,
                       error=str(tp.error) if tp.error else None)

    def consumed(self, messages) -> None:
        """Records what one ``consume``/``poll`` call returned (a list of messages, or one
        message, or None): a ``consumed`` event per record, with its partition, offset, key and
        value, or the error an error message carries (end-of-partition events are not
        recorded). Record a whole batch before processing it: the ledger then shows what the
        consumer held at any moment. Every event of one call carries the same ``ts_ms``: the
        moment the call returned them together."""
        from confluent_kafka import KafkaError

        if messages is None:
            return
        ts_ms = now_ms()
        for msg in messages if isinstance(messages, list) else [messages]:
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    self._note("consumed", topic=msg.topic() or self.topic, error=str(msg.error()), ts_ms=ts_ms)
                continue
            self._note("consumed", topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                       key=_text(msg.key()), value=_text(msg.value()), ts_ms=ts_ms)

    def statistics(self, report: str) -> None:
        """``stats_cb`` (with ``statistics.interval.ms``): append librdkafka's statistics report
        (JSON text) as one line to ``<ledger>.stats.jsonl`` (``statistics_path``), which
        ``kafkalab.metrics.read_statistics`` parses (notebook 13). Writes a file, nothing else."""
        with open(statistics_path(self.ledger.path), "a") as fh:
            fh.write(report.replace("\n", " ") + "\n")

    def group_formed(self) -> bool:
        """True once the harness saw the whole group STABLE (it wrote the file
        ``options.group_formed``); always True without that option. Reads a file, nothing else."""
        return self.options.group_formed is None or os.path.exists(self.options.group_formed)

    def processed(self, msg) -> None:
        """Records ``processed`` for a record whose side effect is done."""
        self._note("processed", topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                   value=_text(msg.value()))
        self.processed_count += 1

    # -- the work and the crash
    def work(self, msg) -> None:
        """The simulated work on one record: ``process_ms`` (then, with ``work_until``, until
        that file exists, at most ``WORK_UNTIL_MAX_S``)."""
        if self.options.process_ms:
            time.sleep(self.options.process_ms / 1000)  # the work itself (simulated), not a wait on Kafka
        if self.options.work_until:
            wait_until(lambda: os.path.exists(self.options.work_until), timeout_s=WORK_UNTIL_MAX_S,
                       interval_s=0.02, what=f"the file {self.options.work_until} that ends the work")

    def crash_point(self, point: str, msg, consumer=None) -> None:
        """Kill this process here if this is the run's crash point and the ``crash_after``-th
        processed record (ledger flushed first). ``consumer``: see the module docstring.

        Raises:
            ValueError: unknown ``point``.
            WaitTimeout: ``consumer`` given and its positions not committed within
                ``AUTO_COMMIT_WAIT_S``.
        """
        if point not in CRASH_POINTS:
            raise ValueError(f"crash point must be one of {', '.join(CRASH_POINTS)}, not {point!r}")
        o = self.options
        if o.crash_after is None or point != o.crash_point or self.processed_count < o.crash_after:
            return
        if consumer is not None:
            wait_until(lambda: self._positions_committed(consumer), timeout_s=AUTO_COMMIT_WAIT_S, interval_s=0.01,
                       what="the auto-commit timer's commit of the records handed over")
        crash(self.ledger)

    @staticmethod
    def _positions_committed(consumer) -> bool:
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(positions, timeout=10)}
        return all(committed[(tp.topic, tp.partition)] >= tp.offset for tp in positions)
