"""The instruments of notebook 05's programs (``from kafkalab.instruments import lab``): role
``transactions`` (the consume-transform-produce processor, transactional or at-least-once) and
role ``reader`` (a consumer that reads a topic from the beginning, with the isolation level its
program sets).

What a processor program calls that is not Kafka code, each named for what it does:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers`` and ``client.id``. ``lab.group_id`` (whose committed offsets say where
  to resume), ``lab.transactional_id`` (the same for every restart of one processor; None for
  an at-least-once run), ``lab.input_topic``, ``lab.output_topic``, ``lab.partitions`` (of the
  input), ``lab.batch`` (most records per batch: per transaction), ``lab.sink_path`` (the
  sqlite file of the side effect). Every Kafka setting is in the program.
- ``lab.assigned(consumer, partitions)``: records ``assigned`` per partition (offset: where it starts) and
  reads the input's end offsets: the program runs until it has committed up to them.
- ``lab.consumed(msgs)``: records ``consumed`` per record of one ``consume`` call and returns
  the records (end-of-partition events dropped); a batch of records is one batch of the run.
- ``lab.produced(msg)``: records ``produced`` for the output record of input ``msg``;
  ``lab.acked`` is a delivery callback (``on_delivery``): records ``acked``.
- ``lab.processed(msgs)``: records ``processed`` per record once its sink row is committed.
- ``lab.committed(offsets)``: records ``committed`` per partition (offset: the next to read)
  once the commit returned; the input is done when they reach the end offsets.
- ``lab.crash_point(point)``: where the lab may kill this process: in the run's ``crash_at``-th
  batch, at its ``crash_point`` (``CRASH_POINTS``), the process SIGKILLs itself
  (``ledger.crash``). At ``mid-produce``, only once half the batch is produced; the program
  flushes those records before it calls this, so they are in the log (the lab never calls a
  client method).
- ``lab.running()``: False once the input is done (exit code 0) or the harness asked the program
  to stop (SIGTERM); past ``max_runtime_s`` it ends the program with exit code
  ``EXIT_TIMED_OUT``.

A reader program: ``lab.conf`` (``bootstrap.servers``, ``client.id``, ``group.id``: librdkafka
wants one, the reader joins no group), ``lab.topic``, ``lab.partitions``, ``lab.read(msg)``
(records ``consumed`` with the record, or, for an end-of-partition event, the position there
with ``error`` = ``END_OF_PARTITION``), ``lab.running()`` (False after SIGTERM).

Sources: KIP-98, KIP-447; librdkafka INTRODUCTION.md ("Transactional Producer", "Exactly Once
Semantics") and CONFIGURATION.md.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from ..ledger import crash
from . import ProgramLab

#: Where a processor program may be killed, in loop order.
CRASH_POINTS = ("mid-produce", "after-produce", "after-offsets", "after-commit")
#: Exit code of a processor program whose ``max_runtime_s`` passed before the input was done.
EXIT_TIMED_OUT = 3
#: The ``error`` of a reader's ledger event for an end-of-partition event (its offset: the position).
END_OF_PARTITION = "end of partition"


@dataclass
class ProcessorOptions:
    """The instruments' settings for one processor program process (``ProgramSpec.options``).

    Attributes:
        group_id: consumer group of the committed offsets.
        transactional_id: ``transactional.id`` of a transactional processor, or None.
        partitions: partitions of the input topic.
        batch: most records per batch (= per transaction).
        crash_at: SIGKILL in this batch (1 = the first); None: never.
        crash_point: one of ``CRASH_POINTS``.
        sink: path of the sqlite file of the side effect, or None.
        max_runtime_s: give up (exit code ``EXIT_TIMED_OUT``) after this many seconds.

    Raises:
        ValueError: unknown ``crash_point``, ``batch`` < 1.
    """

    group_id: str
    transactional_id: str | None = None
    partitions: tuple[int, ...] = (0,)
    batch: int = 50
    crash_at: int | None = None
    crash_point: str = "after-produce"
    sink: str | None = None
    max_runtime_s: float = 60.0

    def __post_init__(self) -> None:
        if self.crash_point not in CRASH_POINTS:
            raise ValueError(f"crash_point must be one of {', '.join(CRASH_POINTS)}, not {self.crash_point!r}")
        if self.batch < 1:
            raise ValueError(f"batch must be at least 1, not {self.batch}")
        self.partitions = tuple(self.partitions)


def _text(b: bytes | None) -> str | None:
    return b.decode() if b is not None else None


def record_id(value: bytes | None) -> str | None:
    """The ``record_id`` of a JSON record value (input flight or output); the value as text if
    it is not JSON with a ``record_id``; None for no value."""
    import json

    if value is None:
        return None
    try:
        return json.loads(value)["record_id"]
    except (ValueError, KeyError, TypeError):
        return value.decode(errors="replace")


class _Base(ProgramLab):
    def _note(self, kind: str, **kw: Any) -> None:
        self.ledger.record(kind, client_id=self.name, **kw)


class TransactionsLab(_Base):
    """The instruments of one processor program process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``topics`` = [input, output], ``options``: ``ProcessorOptions``)."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = ProcessorOptions(**spec.options)
        self.input_topic, self.output_topic = self.topics[0], self.topics[1]
        self.group_id = self.options.group_id
        self.transactional_id = self.options.transactional_id
        self.partitions = list(self.options.partitions)
        self.batch = self.options.batch
        self.sink_path = self.options.sink
        self.batch_no = 0
        self._batch_size = 0
        self._produced_in_batch = 0
        self._position: dict[int, int] = {}
        self._ends: dict[int, int] | None = None
        self._deadline = time.monotonic() + self.options.max_runtime_s

    def assigned(self, consumer, partitions) -> None:
        """Records ``assigned`` per partition of ``partitions`` (the ``TopicPartition`` list the
        program assigned: its committed offsets) with the offset it starts from (the committed
        one, or the low watermark), and reads the input's end offsets (high watermarks, with
        ``consumer``): the input written before the start."""
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            self._position[tp.partition] = tp.offset if tp.offset >= 0 else low
            self._ends = {**(self._ends or {}), tp.partition: high}
            self._note("assigned", topic=tp.topic, partition=tp.partition, offset=self._position[tp.partition])

    def consumed(self, msgs: list) -> list:
        """Records ``consumed`` per record of one ``consume``; returns the records.

        Raises:
            RuntimeError: a message carries an error other than end-of-partition.
        """
        from confluent_kafka import KafkaError

        out = []
        for m in msgs:
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"{self.name}: consumer error {m.error()}")
            out.append(m)
            self._note("consumed", topic=m.topic(), partition=m.partition(), offset=m.offset(),
                       key=_text(m.key()), value=record_id(m.value()))
        if out:
            self.batch_no += 1
            self._batch_size = len(out)
            self._produced_in_batch = 0
        return out

    def produced(self, msg) -> None:
        """Records ``produced``: the output record of input record ``msg`` was produced."""
        self._produced_in_batch += 1
        self._note("produced", topic=self.output_topic, key=_text(msg.key()), value=record_id(msg.value()))

    def acked(self, err, msg) -> None:
        """A delivery callback (``on_delivery``): records ``acked`` with the output record's
        partition and offset, or the error."""
        self._note("acked", topic=msg.topic(), partition=msg.partition(),
                   offset=msg.offset() if err is None else None, key=_text(msg.key()),
                   value=record_id(msg.value()), error=str(err) if err else None)

    def processed(self, msgs: list) -> None:
        """Records ``processed`` per record whose sink row is committed."""
        for m in msgs:
            self._note("processed", topic=m.topic(), partition=m.partition(), offset=m.offset(),
                       value=record_id(m.value()))

    def committed(self, offsets) -> None:
        """Records ``committed`` per partition with a valid offset of ``offsets`` (a list of
        ``TopicPartition``, the next offsets to read), once the commit returned."""
        for tp in offsets or []:
            if tp.offset >= 0:
                self._note("committed", topic=tp.topic, partition=tp.partition, offset=tp.offset)
                self._position[tp.partition] = max(self._position.get(tp.partition, 0), tp.offset)

    def crash_point(self, point: str) -> None:
        """SIGKILL this process here if this is the run's crash point in its ``crash_at``-th
        batch (``mid-produce``: once half the batch is produced; the program flushes those
        records first, so they are in the log: the instrument never calls the client).

        Raises:
            ValueError: unknown ``point``.
        """
        if point not in CRASH_POINTS:
            raise ValueError(f"crash point must be one of {', '.join(CRASH_POINTS)}, not {point!r}")
        o = self.options
        if o.crash_at is None or point != o.crash_point or self.batch_no != o.crash_at:
            return
        if point == "mid-produce" and self._produced_in_batch != max(1, self._batch_size // 2):
            return
        crash(self.ledger)

    def done(self) -> bool:
        """Whether every partition's committed position has reached its end offset."""
        return self._ends is not None and all(self._position.get(p, 0) >= e for p, e in self._ends.items())

    def running(self) -> bool:
        """False once the input is done or SIGTERM came; past ``max_runtime_s``, ends the
        program (``SystemExit(EXIT_TIMED_OUT)``, positions and ends on stderr)."""
        if self.done() or self._stop.is_set():
            return False
        if time.monotonic() > self._deadline:
            print(f"{self.name}: max_runtime_s={self.options.max_runtime_s} passed with positions "
                  f"{self._position} and ends {self._ends}", file=sys.stderr)
            raise SystemExit(EXIT_TIMED_OUT)
        return True


class ReaderLab(_Base):
    """The instruments of one reader program process (module docstring). ``spec.options``:
    ``{"partitions": [...]}``."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.partitions: list[int] = list(spec.options.get("partitions", [0]))

    def read(self, msg) -> None:
        """Records one message ``consume`` returned: ``consumed`` with the record (its whole
        value as text), or for an end-of-partition event the position there (``error`` =
        ``END_OF_PARTITION``), or another error."""
        from confluent_kafka import KafkaError

        err = msg.error()
        if err is None:
            self._note("consumed", topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                       key=_text(msg.key()), value=_text(msg.value()) or "")
        elif err.code() == KafkaError._PARTITION_EOF:
            self._note("consumed", topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                       error=END_OF_PARTITION)
        else:
            self._note("consumed", topic=msg.topic() or self.topic, error=str(err))
