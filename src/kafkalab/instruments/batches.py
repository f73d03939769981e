"""A batch-shaping producer program's instruments (``from kafkalab.instruments import lab``, role
``batches``).

Notebook 06 writes records to look at the files they end up in, so its producer program only
needs the records: what shapes the batches on disk (``linger.ms``, ``batch.size``,
``batch.num.messages``, ``compression.type``) is written in the program. What it calls that is
not Kafka code:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers`` and ``client.id``.
- ``lab.topic``: where the records go.
- ``lab.records()``: the records to write, ``(key, value, timestamp_ms, partition)``, made from
  one or more recipes (``RecordRecipe``), one after the other: ``count`` records ``k0``,
  ``k1``... whose values are ``value_bytes`` of their key repeated (``filler_value``), stamped
  ``first_timestamp_ms + i * timestamp_step_ms`` (CreateTime), or 0 (the producer stamps them
  now), for one partition. Recipes, not a list: 3.3 MB of records would not fit in the worker's
  command line.
- ``lab.topics``: the topics, for a program that writes the same records to several
  (notebook 06's compacted topic and its control twin).
- ``lab.rounds()``: the rounds of a keyed writer (``KeyedRound``), one after the other, each
  with its record time (``round.timestamp_ms``), its new values (``round.updates()``:
  ``(key, value)``) and the keys it deletes (``round.deletes``: the program writes each as a
  tombstone, a key with a null value).

Nothing here sets a Kafka configuration or sends a record: the program does, and it raises if a
record was not delivered (the harness then shows its log).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from . import ProgramLab


def filler_value(key: bytes, value_bytes: int) -> bytes:
    """``value_bytes`` bytes of ``key + b":"`` repeated: a value that differs per record (so a
    codec cannot fold the records into nothing) but compresses well within one."""
    head = key + b":"
    return (head * (value_bytes // len(head) + 1))[:value_bytes]


@dataclass
class RecordRecipe:
    """The records one program run writes (``ProgramSpec.options``).

    Attributes:
        count: records, >= 0.
        value_bytes: bytes per value, >= 1.
        key_prefix: keys are ``<prefix><i>``.
        first_timestamp_ms: CreateTime of record 0 (ms since the epoch); None: 0, the producer
            stamps each record when it is produced.
        timestamp_step_ms: added per record after the first.
        partition: the partition to write to.

    Raises:
        ValueError: a negative count or a value under 1 byte.
    """

    count: int
    value_bytes: int
    key_prefix: str = "k"
    first_timestamp_ms: int | None = None
    timestamp_step_ms: int = 0
    partition: int = 0

    def __post_init__(self) -> None:
        if self.count < 0 or self.value_bytes < 1:
            raise ValueError(f"count must be >= 0 and value_bytes >= 1, not {self.count} and {self.value_bytes}")

    def records(self) -> Iterator[tuple[bytes, bytes, int, int]]:
        """``(key, value, timestamp_ms, partition)`` of every record, in order (timestamp 0: now)."""
        for i in range(self.count):
            key = f"{self.key_prefix}{i}".encode()
            ts = 0 if self.first_timestamp_ms is None else self.first_timestamp_ms + i * self.timestamp_step_ms
            yield key, filler_value(key, self.value_bytes), ts, self.partition

    @property
    def payload_bytes(self) -> int:
        """Bytes of keys and values together."""
        return sum(len(k) + len(v) for k, v, _, _ in self.records())


@dataclass
class KeyedRound:
    """One round of keyed records (``ProgramSpec.options["rounds"]``), all stamped
    ``timestamp_ms`` (CreateTime, ms since the epoch): ``repeat`` times a value
    ``"<label><n>:<key>"`` for each key of ``keys``, then a delete for each key of ``deletes``.
    The deletes are keys only: the program writes them as tombstones (value None).

    Raises:
        ValueError: ``repeat`` below 0.
    """

    timestamp_ms: int
    keys: list[str] = field(default_factory=list)
    label: str = ""
    repeat: int = 1
    deletes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.repeat < 0:
            raise ValueError(f"repeat must be >= 0, not {self.repeat}")

    def updates(self) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of every new value, in order: ``repeat`` passes over ``keys``."""
        for n in range(self.repeat):
            for k in self.keys:
                yield k.encode(), f"{self.label}{n}:{k}".encode()

    def records(self) -> list[tuple[bytes, bytes | None]]:
        """``(key, value)`` of the round as the program writes it: the updates, then a
        tombstone (value None) per deleted key."""
        return list(self.updates()) + [(k.encode(), None) for k in self.deletes]


class BatchesLab(ProgramLab):
    """The instruments of one batch-shaping producer process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``options``: ``{"recipes": [fields of a
    RecordRecipe, ...]}`` and/or ``{"rounds": [fields of a KeyedRound, ...]}``). The program writes its records and ends; SIGTERM ends it
    (``stops_on_sigterm`` False)."""

    stops_on_sigterm = False

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.recipes = [RecordRecipe(**r) for r in spec.options.get("recipes", [])]
        self._rounds = [KeyedRound(**r) for r in spec.options.get("rounds", [])]

    def records(self) -> Iterator[tuple[bytes, bytes, int, int]]:
        """The records to write, ``(key, value, timestamp_ms, partition)``: every recipe's
        (``RecordRecipe.records``), one recipe after the other."""
        for recipe in self.recipes:
            yield from recipe.records()

    def rounds(self) -> list[KeyedRound]:
        """The keyed rounds to write, in order (``KeyedRound``)."""
        return list(self._rounds)
