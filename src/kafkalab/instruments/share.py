"""A share consumer program's instruments (``from kafkalab.instruments import lab``, role ``share``).

What a share consumer program (notebook 09, KIP-932) calls that is not Kafka code, each named
for what it does:

- ``lab.conf``: the run's addresses and names, the only settings the harness adds:
  ``bootstrap.servers``, ``group.id`` (the share group) and ``client.id``. The program merges
  its own settings in (``lab.conf | {...}``): ``share.acknowledgement.mode`` and
  ``max.poll.records`` are on screen. The share group's own settings (the acquisition lock,
  the delivery count limit, ``share.auto.offset.reset``) are group configs, set by the
  experiment on the group before it starts (KIP-932: a share consumer has no say in them).
- ``lab.topic``: the run's topic.
- ``lab.consumed(msg)``: records a ``consumed`` event with the record's delivery count
  (``Message.delivery_count()``), or the error a message carries; returns False for an error.
- ``lab.barrier(name)``: a scheduling arrangement, on screen: the first time a process reaches
  the barrier ``name``, it waits until every member of the run has reached it (at most
  ``wait_max_ms``); later calls with the same name return at once.
- ``lab.wait_until_overtaken(msg)``: a scheduling arrangement too: waits until a later offset of
  the record's partition has been processed, by another member while this one waits (at most
  ``wait_max_ms``); at once for a record delivered again after later offsets were done.
- ``lab.work(msg)``: the simulated work on one record, ``process_ms`` long.
- ``lab.processed(msg)``: records ``processed`` (call it once the work is done).
- ``lab.crash_point(msg)``: where the lab may stop this member: on its ``crash_after``-th
  processed record, SIGKILL (a crash: its connections close) or SIGSTOP (a hang: the process
  and its connections stay, nothing more is sent), the ledger flushed first.
- ``lab.acknowledged(acks, result)``: records an ``acknowledged`` event per ``(msg, ack_type)``
  of ``acks``, with the error ``commit_sync`` returned for the record's partition, if any.
- ``lab.running()``: False once the harness asked the program to stop (SIGTERM).

The barrier and the overtaking wait read what the other members wrote in the run's folder (the
folder of this process's ledger): their ledgers (``*.jsonl``) and the barrier's marker files.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WaitTimeout
from ..ledger import crash, read_events
from ..waiting import wait_until
from . import ProgramLab

#: How a member stops at its crash point: a crash, or a hang.
CRASH_SIGNALS = ("SIGKILL", "SIGSTOP")


@dataclass
class ShareOptions:
    """The instruments' settings for one share consumer program process (``ProgramSpec.options``).

    Attributes:
        process_ms: simulated work per record (``lab.work``), ms.
        crash_after: the process stops at ``lab.crash_point`` on this processed record (None: never).
        crash_signal: one of ``CRASH_SIGNALS``.
        members: members of the run (``lab.barrier`` waits for this many), >= 1.
        wait_max_ms: the longest ``lab.barrier`` and ``lab.wait_until_overtaken`` wait, ms. Keep
            it below the acquisition lock, or a held record is delivered again meanwhile.

    Raises:
        ValueError: unknown ``crash_signal``, ``members`` < 1 or ``crash_after`` < 1.
    """

    process_ms: float = 0.0
    crash_after: int | None = None
    crash_signal: str = "SIGKILL"
    members: int = 1
    wait_max_ms: float = 2500.0

    def __post_init__(self) -> None:
        if self.crash_signal not in CRASH_SIGNALS:
            raise ValueError(f"crash_signal must be one of {', '.join(CRASH_SIGNALS)}, not {self.crash_signal!r}")
        if self.members < 1:
            raise ValueError(f"members must be >= 1, not {self.members}")
        if self.crash_after is not None and self.crash_after < 1:
            raise ValueError(f"crash_after must be >= 1 or None, not {self.crash_after}")


def _text(b: bytes | None) -> str | None:
    return b.decode() if b is not None else None


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "barrier"


def barrier_path(folder: str | os.PathLike[str], name: str, client_id: str) -> Path:
    """The marker file that says ``client_id`` reached the barrier ``name``:
    ``<folder>/<name>.<client_id>.barrier`` (``name`` reduced to letters, digits, ``-``, ``_``)."""
    return Path(folder) / f"{_slug(name)}.{client_id}.barrier"


def arrived(folder: str | os.PathLike[str], name: str) -> set[str]:
    """The members (client ids) whose marker for the barrier ``name`` is in ``folder``."""
    prefix = f"{_slug(name)}."
    return {p.name[len(prefix):-len(".barrier")] for p in Path(folder).glob(f"{prefix}*.barrier")}


def overtaken(folder: str | os.PathLike[str], topic: str, partition: int, offset: int) -> bool:
    """Whether a member of the run (a ``*.jsonl`` ledger in ``folder``) has recorded
    ``processed`` for an offset above ``offset`` of ``topic`` ``partition``. Reads the ledgers as
    they stand, while their writers append. The member that waits on it counts too: a record
    delivered again to a member that has since processed later offsets is overtaken already."""
    return any(e.topic == topic and e.partition == partition and e.offset is not None and e.offset > offset
               for e in read_events(folder, growing=True, kinds="processed"))


class ShareLab(ProgramLab):
    """The instruments of one share consumer program process (module docstring). ``spec``: the
    worker's ``ProgramSpec`` (``conf``, ``topics``, ``ledger``, ``options``)."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.options = ShareOptions(**spec.options)
        self.ledger_path = Path(spec.ledger)
        self.processed_count = 0
        self._passed: set[str] = set()

    # -- the ledger
    def _note(self, kind: str, msg, **kw: Any) -> None:
        self.ledger.record(kind, client_id=self.name, topic=msg.topic(), partition=msg.partition(),
                           offset=msg.offset(), key=_text(msg.key()), value=_text(msg.value()),
                           delivery_count=msg.delivery_count(), **kw)

    def consumed(self, msg) -> bool:
        """Records one message ``poll`` returned: ``consumed`` with its partition, offset, key,
        value and delivery count; for an error message, the error. Returns True for a record,
        False for an error."""
        if msg.error() is not None:
            self.ledger.record("consumed", client_id=self.name, topic=msg.topic() or self.topic, error=str(msg.error()))
            return False
        self._note("consumed", msg)
        return True

    def processed(self, msg) -> None:
        """Records ``processed`` for a record whose work is done."""
        self._note("processed", msg)
        self.processed_count += 1

    def acknowledged(self, acks, result) -> None:
        """Records ``acknowledged`` for each ``(msg, ack_type)`` of ``acks`` (``ack_type``: a
        ``confluent_kafka.AcknowledgeType``), with the error of its partition in ``result``
        (what ``ShareConsumer.commit_sync`` returned: ``{TopicPartition: None or
        KafkaException}``)."""
        errors = {(tp.topic, tp.partition): err for tp, err in (result or {}).items()}
        for msg, ack in acks:
            error = errors.get((msg.topic(), msg.partition()))
            self._note("acknowledged", msg, ack=getattr(ack, "name", str(ack)), error=str(error) if error else None)

    # -- scheduling arrangements, on screen
    def barrier(self, name: str) -> bool:
        """The first time this process reaches the barrier ``name``: wait until every member of
        the run (``members``) has reached it, at most ``wait_max_ms``. Later calls return at
        once. Returns True if every member arrived, False if the wait ran out (the run's counts
        then show who got nothing)."""
        if name in self._passed:
            return True
        self._passed.add(name)
        folder = self.ledger_path.parent
        barrier_path(folder, name, self.name).touch()
        try:
            wait_until(lambda: len(arrived(folder, name)) >= self.options.members,
                       timeout_s=self.options.wait_max_ms / 1000, interval_s=0.02,
                       what=f"{self.options.members} members at the barrier {name!r}")
            return True
        except WaitTimeout:
            return False

    def wait_until_overtaken(self, msg) -> bool:
        """Wait until an offset above ``msg``'s in the same partition has been processed (the
        run's ledgers say so; while this process waits, only another member can do it), at most
        ``wait_max_ms``. Returns True if it was overtaken, False if the wait ran out (then nobody
        overtook it: the record is finished in offset order)."""
        try:
            wait_until(lambda: overtaken(self.ledger_path.parent, msg.topic(), msg.partition(), msg.offset()),
                       timeout_s=self.options.wait_max_ms / 1000, interval_s=0.02,
                       what=f"another member to process an offset above {msg.offset()}")
            return True
        except WaitTimeout:
            return False

    # -- the work and the crash
    def work(self, msg) -> None:
        """The simulated work on one record: ``process_ms``."""
        if self.options.process_ms:
            time.sleep(self.options.process_ms / 1000)  # the work itself (simulated), not a wait on Kafka

    def crash_point(self, msg) -> None:
        """Stop this process here if it is a member the run stops and this is its
        ``crash_after``-th processed record: the ledger flushed, then SIGKILL (a crash) or
        SIGSTOP (a hang; the harness kills it later)."""
        o = self.options
        if o.crash_after is None or self.processed_count < o.crash_after:
            return
        if o.crash_signal == "SIGKILL":
            crash(self.ledger)
        self.ledger.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
