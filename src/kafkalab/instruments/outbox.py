"""The instruments of notebook 12's programs (``from kafkalab.instruments import lab``, role
``outbox``): a service that writes its database (and, in the dual write, produces), the outbox
relay, and the idempotent consumer.

What such a program calls that is not Kafka code or sqlite code, each named for what it does:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers``, ``client.id`` and, for a consumer, ``group.id``. Every Kafka setting
  that decides what happens is in the program.
- ``lab.topic``: the run's topic. ``lab.db_path``: the service's sqlite file (orders and the
  outbox; the relay reads the same file). ``lab.sink_path``: the consumer's sqlite file.
- ``lab.requests()``: the requests this run of the service handles, ``(order_id, amount)``
  each, in order: the application's input (a caller placing orders). Each is written to the
  ledger (``consumed``, value = the order id) as it is handed over, so its time is known.
  A service restarted after a crash gets the requests after the one it died in: that caller
  got no answer and did not retry (notebook 12 says so).
- ``lab.consumed(msg)``: a consumer program's ledger line per record ``poll`` returned
  (``consumed``), so a record handed over twice shows.
- ``lab.crash_point(point)``: where the lab may kill this process: the ``crash_after``-th time
  the program reaches the run's ``crash_point`` (``CRASH_POINTS``), the ledger is flushed and
  the process SIGKILLs itself (``ledger.crash``). Nowhere else, and no timer.
- ``lab.running()``: False once the harness asked the program to stop (SIGTERM): the relay and
  the consumer run until the harness has seen their work done (it reads the database and the
  group's committed offsets; it never calls a client).

Nothing here sets a Kafka configuration, sends a record or commits an offset: the program does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..ledger import crash
from . import ProgramLab

#: Where a program of notebook 12 may be killed. The service: ``before-db-commit`` (its
#: transaction written, not committed), ``after-db-commit``, ``after-produce`` (a record
#: acknowledged, the database transaction not committed). The relay: ``after-produce`` (a row
#: handed to ``produce()``, no delivery report yet), ``after-delivery`` (the batch's reports
#: in, the rows not marked sent), ``after-mark``. The consumer: ``before-db-commit``,
#: ``after-db-commit`` (its offset not committed), ``after-offset-commit``.
CRASH_POINTS = ("before-db-commit", "after-db-commit", "after-produce", "after-delivery", "after-mark",
                "after-offset-commit")


@dataclass
class OutboxOptions:
    """The instruments' settings for one program process (``ProgramSpec.options``).

    Attributes:
        db: the service's sqlite file (``lab.db_path``), or None.
        sink: the consumer's sqlite file (``lab.sink_path``), or None.
        requests: ``[order_id, amount]`` each, the requests ``lab.requests()`` hands over.
        crash_point: one of ``CRASH_POINTS``, or None (never).
        crash_after: the process dies the ``crash_after``-th time it reaches ``crash_point`` (>= 1).

    Raises:
        ValueError: unknown ``crash_point``, or ``crash_after`` below 1.
    """

    db: str | None = None
    sink: str | None = None
    requests: list[list[Any]] = field(default_factory=list)
    crash_point: str | None = None
    crash_after: int = 1

    def __post_init__(self) -> None:
        if self.crash_point is not None and self.crash_point not in CRASH_POINTS:
            raise ValueError(f"crash_point must be one of {', '.join(CRASH_POINTS)}, not {self.crash_point!r}")
        if self.crash_after < 1:
            raise ValueError(f"crash_after must be at least 1, not {self.crash_after}")


class OutboxLab(ProgramLab):
    """The instruments of one program process of notebook 12 (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``ledger``, ``options``: ``OutboxOptions``).
    A service ends by itself when its requests are done; the relay and the consumer end when
    ``running()`` turns False (SIGTERM)."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = OutboxOptions(**spec.options)
        self.db_path: str | None = self.options.db
        self.sink_path: str | None = self.options.sink
        self.reached: dict[str, int] = {}

    def requests(self) -> Iterator[tuple[str, int]]:
        """The requests to handle, ``(order_id, amount)``, in order; each recorded as
        ``consumed`` (value: the order id) when it is handed over."""
        for order_id, amount in self.options.requests:
            self.ledger.record("consumed", topic=self.topic, key=str(order_id), value=str(order_id),
                               client_id=self.name)
            yield str(order_id), int(amount)

    def consumed(self, msg) -> None:
        """Records ``consumed`` for a record ``poll`` returned (partition, offset, key, value)."""
        key, value = msg.key(), msg.value()
        self.ledger.record("consumed", topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                           key=key.decode() if key is not None else None,
                           value=value.decode() if value is not None else None, client_id=self.name)

    def crash_point(self, point: str) -> None:
        """Kill this process here if ``point`` is the run's crash point and this is the
        ``crash_after``-th time the program reaches it (ledger flushed first).

        Raises:
            ValueError: unknown ``point``.
        """
        if point not in CRASH_POINTS:
            raise ValueError(f"crash point must be one of {', '.join(CRASH_POINTS)}, not {point!r}")
        self.reached[point] = self.reached.get(point, 0) + 1
        if point == self.options.crash_point and self.reached[point] == self.options.crash_after:
            crash(self.ledger)
