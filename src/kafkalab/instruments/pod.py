"""A group member's instruments with a start gate (``from kafkalab.instruments import lab``,
role ``pod``; notebook 02).

Everything of the ``consumer`` role (``kafkalab.instruments.consumer.ConsumerLab``:
``lab.conf``, ``lab.topic``, ``lab.on_assign``, ``lab.on_revoke``, ``lab.consumed``,
``lab.work``, ``lab.processed``, ``lab.running()``), plus one scheduling arrangement that the
program never sees: the process may be started *ahead*, and then runs its program's first
line only when the harness starts the pod.

Why: a program process takes a second or more to start Python and import its libraries on a
loaded machine, and notebook 02 starts a dozen pods one after another (a scale-out, the
replacements of a rolling restart). That second is not what the lesson measures (a rebalance
and the pause it causes), so the harness starts the process while the group is busy with
something else and releases it at the moment it records the pod's ``start``: from then on
the pod does exactly what its program says (construct its consumer, subscribe, poll).
Like a Kubernetes pod whose image is already on the node.

The gate is the file ``ProgramSpec.options["start_gate"]``: the process writes
``<gate>.ready`` once it is waiting, and goes on when the gate file exists. A process asked
to stop (SIGTERM) before its gate opened exits without running its program.

Nothing here sets a Kafka configuration or talks to the cluster: the program does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import confluent_kafka  # noqa: F401  (imported before the gate: the program's own import is then instant)

from ..waiting import wait_until
from .consumer import ConsumerLab

#: The longest a pod started ahead waits for its gate, seconds (the harness ended meanwhile).
START_WAIT_MAX_S = 600.0


def ready_path(gate: str | Path) -> Path:
    """The marker a pod writes once it waits at ``gate``."""
    return Path(str(gate) + ".ready")


class PodLab(ConsumerLab):
    """A consumer program's instruments whose program starts when its gate opens (module
    docstring). ``spec``: the worker's ``ProgramSpec``; ``options`` are the ``consumer``
    role's (``ConsumerOptions``) plus ``start_gate`` (a path, or None: start at once).

    Raises:
        SystemExit: the harness stopped the pod (SIGTERM) before its gate opened.
        WaitTimeout: the gate did not open within ``START_WAIT_MAX_S``.
    """

    def __init__(self, spec: Any):
        options = dict(spec.options)
        gate = options.pop("start_gate", None)
        super().__init__(dataclasses.replace(spec, options=options))
        self.gate: Path | None = Path(gate) if gate else None
        if self.gate is not None:
            self.wait_for_start(self.gate)

    def wait_for_start(self, gate: Path) -> None:
        """Write ``<gate>.ready``, then return once ``gate`` exists; exit (SystemExit 0) if
        the harness asked this pod to stop first."""
        ready_path(gate).touch()
        wait_until(lambda: gate.exists() or not self.running(), timeout_s=START_WAIT_MAX_S, interval_s=0.01,
                   what=f"{gate}: the harness starting pod {self.name}")
        if not gate.exists():
            raise SystemExit(0)
