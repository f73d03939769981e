"""A producer program that waits for the lab's fault (``from kafkalab.instruments import lab``,
role ``gated``; notebooks 07 and 08).

Everything of the ``producer`` role (``kafkalab.instruments.producer.ProducerLab``: ``lab.conf``,
``lab.topic``, ``lab.records()``, ``lab.produced``, ``lab.delivered``), plus one scheduling
arrangement, on screen in the program:

- ``lab.committed(label)``: a ledger line once ``commit_transaction()`` returned (notebook 11).
- ``lab.wait_for_fault()``: says the program is ready (a marker file beside its ledger,
  ``<ledger>.ready``), then blocks until the harness has applied its fault (08: paused the
  followers; 07: armed the fault proxy's rule that drops the next Produce request) and created the go file ``fault.go`` in the run's folder (the folder of the
  ledger). At most ``WAIT_MAX_S``.

Why a gate: a program process takes a second or more to start on a loaded machine, while the
fault must stay short (paused followers are fenced after ``broker.session.timeout.ms``, 6 s
on the teaching cluster). The harness starts the programs first, waits until every one is
ready, then pauses the followers and opens the gate: the records are sent during the fault,
every run.

Nothing here sets a Kafka configuration or sends a record: the program does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..waiting import wait_until
from .producer import ProducerLab

#: The longest ``wait_for_fault`` waits for the go file, seconds.
WAIT_MAX_S = 180.0
#: Name of the go file in the run's folder.
GO_FILE = "fault.go"


def ready_path(ledger: str | Path) -> Path:
    """The marker a gated program writes when it reaches ``lab.wait_for_fault()``."""
    return Path(ledger).with_suffix(".ready")


def go_path(ledger: str | Path) -> Path:
    """The go file the harness creates once the fault is applied (beside the ledger)."""
    return Path(ledger).parent / GO_FILE


class GatedProducerLab(ProducerLab):
    """A producer program's instruments plus ``wait_for_fault`` (module docstring)."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self._ledger_path = Path(spec.ledger)

    def wait_for_fault(self) -> None:
        """Mark this program ready, then return once the go file exists.

        Raises:
            WaitTimeout: no go file within ``WAIT_MAX_S`` seconds (the harness never applied its
                fault).
        """
        ready_path(self._ledger_path).touch()
        go = go_path(self._ledger_path)
        wait_until(go.exists, timeout_s=WAIT_MAX_S, interval_s=0.005,
                   what=f"{go}: the harness applying its fault")

    def committed(self, transaction: str) -> None:
        """Records ``committed`` for ``transaction`` (the program's label, e.g. ``"N"``): call it
        once ``commit_transaction()`` returned, so the ledger holds what the program saw
        committed, not what the harness guesses (notebook 11)."""
        self.ledger.record("committed", client_id=self.name, topic=self.topic, value=transaction)
