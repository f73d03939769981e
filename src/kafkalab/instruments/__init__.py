"""The lab's instruments: what a client program uses that is not Kafka code.

A client program (``kafkalab.programs``) runs in a worker process. Its one line that is not
Kafka code is ``from kafkalab.instruments import lab``: ``lab`` is the instrument object
of this process, made by the worker before it runs the program (``install``), one class per
role:

==================  =========================================================================
role                instruments
==================  =========================================================================
``consumer``        ``kafkalab.instruments.consumer.ConsumerLab``: the harness's settings
                    (``lab.conf``), the topic, the ledger (assigned, revoked, consumed,
                    processed, committed), the side effect's simulated work, the crash points
                    (notebook 03)
``producer``        ``kafkalab.instruments.producer.ProducerLab``: the harness's settings
                    (``lab.conf``), the topic, the records to send, the ledger (produced,
                    acked: the delivery report) (notebook 04)
``share``           ``kafkalab.instruments.share.ShareLab``: the harness's settings, the topic,
                    the ledger (consumed with delivery count, processed, acknowledged), the
                    simulated work, the crash or freeze point, the barrier and the overtaking
                    wait (notebook 09)
``transactions``    ``kafkalab.instruments.transactions.TransactionsLab``: a
                    consume-transform-produce processor's names (group, transactional.id,
                    topics, batch, sink), its ledger, its crash points, the end of its input
                    (notebook 05)
``reader``          ``kafkalab.instruments.transactions.ReaderLab``: a reader's ledger of
                    records and end-of-partition positions (notebook 05)
``gated``           ``kafkalab.instruments.fault_gate.GatedProducerLab``: the ``producer``
                    role plus ``lab.wait_for_fault()``, the gate that holds the records until
                    the harness has applied its fault (notebooks 07 and 08)
``batches``         ``kafkalab.instruments.batches.BatchesLab``: the harness's settings, the
                    topic and partition, the records to write from a recipe (notebook 06)
``measuring``       ``kafkalab.instruments.measuring.MeasuringLab``: the harness's settings, the
                    topic, the values, the pacing, the stopwatch and the delivery reports' times
                    (notebook 10)
``timed_reader``    ``kafkalab.instruments.measuring.MeasuringConsumerLab``: the harness's
                    settings, the topic, the stopwatch, each record's end-to-end latency, the
                    Fetch requests from librdkafka's statistics (notebook 10)
``pod``             ``kafkalab.instruments.pod.PodLab``: the ``consumer`` role plus a start
                    gate the program never sees: the process is started ahead and runs its
                    program when the harness starts the pod (notebook 02)
==================  =========================================================================

A host worker (``worker.HostSpec``) runs many programs in one process, each in its own
thread: there ``lab`` is a ``ThreadLabs`` (``install_per_thread``) that hands each thread the
instruments of its own program (``bind_thread``), so the program's text is the same as in a
worker of its own (notebook 01 runs the members of its groups this way).

The instruments are few and named for what they do: record to the ledger, do the simulated
work, crash here. Nothing in them sets a Kafka configuration the program does not show:
``lab.conf`` holds only the addresses and names of the run (``bootstrap.servers``,
``client.id``, ``group.id``, ``group.instance.id``), and the experiment prints it with its
result.
"""

from __future__ import annotations

import importlib
import signal
import threading
from typing import Any

from ..ledger import Ledger

#: The instruments of the program running in this process (None outside a program worker).
lab: Any = None

#: Role -> ``module:class`` of its instruments, constructed with the worker's ``ProgramSpec``.
ROLES: dict[str, str] = {
    "consumer": "kafkalab.instruments.consumer:ConsumerLab",
    "producer": "kafkalab.instruments.producer:ProducerLab",
    "transactions": "kafkalab.instruments.transactions:TransactionsLab",
    "reader": "kafkalab.instruments.transactions:ReaderLab",
    "share": "kafkalab.instruments.share:ShareLab",
    "gated": "kafkalab.instruments.fault_gate:GatedProducerLab",
    "batches": "kafkalab.instruments.batches:BatchesLab",
    "measuring": "kafkalab.instruments.measuring:MeasuringLab",
    "timed_reader": "kafkalab.instruments.measuring:MeasuringConsumerLab",
    "pod": "kafkalab.instruments.pod:PodLab",
    "outbox": "kafkalab.instruments.outbox:OutboxLab",
}


class ProgramLab:
    """What the instruments of every role share, in one place: the process's name (its
    ``client.id``), the settings the harness adds (``conf``), a name for static membership
    (``instance_id``: the program writes ``"group.instance.id": lab.instance_id``), the run's topics (``topics``;
    ``topic``: the first), a write-through ledger (a SIGKILL loses no line), and the harness's
    request to stop: SIGTERM sets a flag that ``running()`` reads, so the program finishes what
    it holds and ends. A role whose programs end by themselves sets ``stops_on_sigterm = False``
    (SIGTERM then ends the process, its default). ``spec``: the worker's ``ProgramSpec``."""

    stops_on_sigterm = True

    def __init__(self, spec: Any):
        self.name: str = spec.name
        self.conf: dict[str, Any] = dict(spec.conf)
        self.instance_id: str | None = getattr(spec, "instance_id", None)
        self.topics: list[str] = list(spec.topics)
        self.topic: str | None = self.topics[0] if self.topics else None
        self.ledger = Ledger(spec.ledger, spec.run_id, write_through=True)
        self._stop = threading.Event()
        if self.stops_on_sigterm:
            signal.signal(signal.SIGTERM, lambda *_: self._stop.set())

    def running(self) -> bool:
        """False once the harness asked this program to stop (SIGTERM)."""
        return not self._stop.is_set()

    def close(self) -> None:
        """Close the ledger (the worker calls it when the program ends)."""
        self.ledger.close()

    def stop(self) -> None:
        """Ask the program to stop, as SIGTERM does (``running()`` turns False): how a host
        worker stops one of its programs."""
        self._stop.set()


def install(spec: Any) -> Any:
    """Make the instruments of ``spec.role`` for this process and bind them to ``lab``.

    Raises:
        ValueError: unknown role.
    """
    global lab
    if spec.role not in ROLES:
        raise ValueError(f"unknown program role {spec.role!r}: one of {', '.join(ROLES)}")
    module, cls = ROLES[spec.role].split(":")
    lab = getattr(importlib.import_module(module), cls)(spec)
    return lab


def make(spec: Any) -> Any:
    """The instruments of ``spec.role`` for one program, not bound to ``lab`` (a host worker
    binds them to the program's thread with ``bind_thread``).

    Raises:
        ValueError: unknown role.
    """
    if spec.role not in ROLES:
        raise ValueError(f"unknown program role {spec.role!r}: one of {', '.join(ROLES)}")
    module, cls = ROLES[spec.role].split(":")
    return getattr(importlib.import_module(module), cls)(spec)


class ThreadLabs:
    """``lab`` in a host worker (``worker.HostSpec``): every attribute is looked up on the
    instruments bound to the calling thread (``bind_thread``), so each program, running in its
    own thread, sees its own ``lab.conf``, topics, ledger and stop flag. Its rebalance and
    delivery callbacks run inside ``poll()``, on the same thread, and see the same ``lab``.

    Raises:
        AttributeError: the calling thread runs no program (nothing bound).
    """

    _local = threading.local()

    def bind(self, instruments: Any) -> None:
        """Bind ``instruments`` to the calling thread."""
        ThreadLabs._local.lab = instruments

    def current(self) -> Any:
        """The instruments bound to the calling thread, or None."""
        return getattr(ThreadLabs._local, "lab", None)

    def __getattr__(self, name: str) -> Any:
        current = ThreadLabs._local.__dict__.get("lab")
        if current is None:
            raise AttributeError(f"lab.{name}: this thread runs no program (no instruments bound)")
        return getattr(current, name)


def install_per_thread() -> ThreadLabs:
    """Make ``lab`` a ``ThreadLabs`` for this process (a host worker) and return it."""
    global lab
    lab = ThreadLabs()
    return lab


def bind_thread(instruments: Any) -> None:
    """Bind ``instruments`` (from ``make``) to the calling thread, for ``lab`` as installed by
    ``install_per_thread``.

    Raises:
        RuntimeError: ``install_per_thread`` was not called in this process.
    """
    if not isinstance(lab, ThreadLabs):
        raise RuntimeError("bind_thread needs install_per_thread() first (a host worker)")
    lab.bind(instruments)
