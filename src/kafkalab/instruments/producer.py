"""A producer program's instruments (``from kafkalab.instruments import lab``, role ``producer``).

What a producer program (notebook 04) calls that is not Kafka code, each named for what it does:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers`` and ``client.id``. In notebook 04 ``bootstrap.servers`` is the fault
  proxy's ports (``kafkalab.faults``), so every Produce request and its answer pass through the
  lab's instrument that drops acks; its rules pick this producer by its ``client.id``. The
  program merges its own settings in (``lab.conf | {...}``), so every setting that decides what
  happens (``enable.idempotence``, ``acks``, ``retries``, timeouts, ``linger.ms``) is on screen.
- ``lab.topic``: the run's topic.
- ``lab.records()``: the records this run of the program has to send, as
  ``(key, value, partition)`` strings and int: the application's data. A program restarted
  after a crash gets the records its crashed run never got a delivery report for (the harness
  reads them from that run's ledger, as an application would from its own outbox).
- ``lab.together``: how many of the last records the program sends together, in one batch
  (0: none; notebook 04 section 4).
- ``lab.produced(key, value, partition)``: records a ``produced`` ledger event (call it just
  before ``produce``).
- ``lab.delivered(err, msg)``: records what a delivery report said: ``acked`` with the offset,
  or with the error (``KafkaError.name()``, e.g. ``_MSG_TIMED_OUT``). Call it from the
  ``on_delivery`` callback.

Nothing here sets a Kafka configuration or sends a record: the program does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import ProgramLab


@dataclass
class ProducerOptions:
    """The instruments' settings for one producer program process (``ProgramSpec.options``).

    Attributes:
        records: the records to send, ``[key, value, partition]`` each (``lab.records()``).
        together: how many of the last records the program sends in one batch (``lab.together``).

    Raises:
        ValueError: ``together`` below 0 or above the number of records.
    """

    records: list[list[Any]] = field(default_factory=list)
    together: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.together <= len(self.records):
            raise ValueError(f"together must be between 0 and the {len(self.records)} records, not {self.together}")


class ProducerLab(ProgramLab):
    """The instruments of one producer program process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``ledger``, ``options``). A producer program
    sends its records and ends; SIGTERM ends it (``stops_on_sigterm`` False)."""

    stops_on_sigterm = False

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = ProducerOptions(**spec.options)
        self.together: int = self.options.together

    def records(self) -> list[tuple[str, str, int]]:
        """The records to send, ``(key, value, partition)``, in order."""
        return [(str(k), str(v), int(p)) for k, v, p in self.options.records]

    def produced(self, key: str, value: str, partition: int) -> None:
        """Records ``produced`` for a record about to be handed to ``Producer.produce``."""
        self.ledger.record("produced", topic=self.topic, partition=partition, key=key, value=value,
                           client_id=self.name)

    def delivered(self, err, msg) -> None:
        """Records ``acked`` for a delivery report (``on_delivery(err, msg)``): the partition and
        offset, or the error's name (``KafkaError.name()``) with no offset."""
        key, value = msg.key(), msg.value()
        self.ledger.record("acked", topic=msg.topic() or self.topic, partition=msg.partition(),
                           offset=msg.offset() if err is None else None,
                           key=key.decode() if key is not None else None,
                           value=value.decode() if value is not None else None,
                           client_id=self.name, error=err.name() if err is not None else None)
