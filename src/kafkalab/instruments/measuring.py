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

Nothing here sets a Kafka configuration or sends a record: the program does.
"""

from __future__ import annotations

import json
import time
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

    Raises:
        ValueError: a count, size or rate below 1 (rate: above 0).
    """

    count: int
    value_bytes: int
    rate: float | None = None

    def __post_init__(self) -> None:
        if self.count < 1 or self.value_bytes < 1 or (self.rate is not None and self.rate <= 0):
            raise ValueError(f"count and value_bytes must be >= 1 and rate > 0, not {self.count}, "
                             f"{self.value_bytes}, {self.rate}")


def times_path(ledger: str) -> str:
    """Where a measuring program's times go: ``<ledger>.times.json``."""
    return f"{ledger}.times.json"


class MeasuringLab(ProgramLab):
    """The instruments of one measuring producer process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``ledger``, ``options``: a
    ``MeasureOptions``'s fields). The program sends its values and ends; SIGTERM ends it."""

    stops_on_sigterm = False

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = MeasureOptions(**spec.options)
        self._path = times_path(spec.ledger)
        self._start: float | None = None
        self.acks: list[tuple[float, float, int, str | None]] = []

    def values(self) -> Iterator[bytes]:
        """The values to send, in order."""
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

    def close(self) -> None:
        """Write the reports to ``<ledger>.times.json`` (``[sent, acked, offset, error]`` each,
        in report order), then close the ledger."""
        with open(self._path, "w") as fh:
            json.dump(self.acks, fh)
        super().close()
