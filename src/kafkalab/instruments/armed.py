"""A producer program that waits for the lab's fault (``from kafkalab.instruments import lab``,
role ``armed_producer``): notebook 07's retry programs.

Everything of ``kafkalab.instruments.producer.ProducerLab`` (``lab.conf``, ``lab.topic``,
``lab.records()``, ``lab.delivered``...), plus one call:

- ``lab.arm_fault()``: the program has sent its warm-up record and had it acknowledged; it
  tells the harness so (creates the run's ``ready_file``) and waits until the harness has
  armed its fault (the fault proxy's rule, ``kafkalab.faults.Rule``) and says go (its
  ``go_file`` exists), at most ``ARM_WAIT_S``. So the rule that swallows "the next Produce
  request" applies to the first record after the warm-up, never to the warm-up or its retry.

Nothing here sets a Kafka configuration or sends a record: the program does.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ..waiting import wait_until
from .producer import ProducerLab

#: Bound (s) of ``arm_fault``'s wait for the harness's go.
ARM_WAIT_S = 60.0


class ArmedProducerLab(ProducerLab):
    """The instruments of one producer program that waits for the fault (module docstring).
    ``spec.options``: those of ``ProducerOptions`` plus ``ready_file`` and ``go_file`` (paths)."""

    def __init__(self, spec: Any):
        options = dict(spec.options)
        self.ready_file = Path(options.pop("ready_file"))
        self.go_file = Path(options.pop("go_file"))
        super().__init__(dataclasses.replace(spec, options=options))

    def arm_fault(self) -> None:
        """Tell the harness the warm-up is done, and wait until its fault is armed.

        Raises:
            WaitTimeout: no go within ``ARM_WAIT_S``.
        """
        self.ready_file.touch()
        wait_until(lambda: os.path.exists(self.go_file), timeout_s=ARM_WAIT_S, interval_s=0.01,
                   what=f"the harness's go ({self.go_file}): the fault armed")
