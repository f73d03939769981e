"""Client *processes*: restarted, stopped and killed like pods. The one child-process entry point.

``python -m kafkalab.worker SPEC_JSON`` runs one worker; ``kafkalab.workloads.spawn(spec)``
starts it and returns a handle (``workloads.Worker``). The spec's ``kind`` picks the mode:

==============  ===========================================================================
``exec``        ``ExecSpec``: replaces itself with another program (a JVM client), which
                inherits the same death with the parent (notebook 03's Java consumer)
``program``     ``ProgramSpec``: a client program as a notebook shows it (``kafkalab.programs``),
                run with the lab's instruments of its role (``kafkalab.instruments``):
                notebooks 02, 03, 04, 05 and 09
==============  ===========================================================================

Every worker dies with its parent, one way for all: ``die_with_parent`` asks Linux for
``PR_SET_PDEATHSIG`` = SIGKILL, then checks that the parent that spawned it
(``$KAFKALAB_PARENT_PID``) is still its parent, so a parent that died in between is not
missed; the setting survives ``exec``. So no worker outlives the notebook or test that
started it. Note that Linux sends the signal when the *thread* that forked the child ends:
spawn from a thread that lives as long as the worker should. Each worker appends what it
did to its own ledger file (``Ledger(write_through=True)``: a SIGKILL from outside loses
no line), and every intentional crash goes through ``crash``: ledger flushed, then SIGKILL.

Every Kafka client a notebook runs in a worker is a client program (``ProgramSpec``): the
group members of notebook 02 and the consumers of notebook 03 (role ``consumer``:
``kafkalab.instruments.consumer`` holds their ledger, simulated work and crash points), the
producers of notebook 04 (role ``producer``), and so on.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn


#: Environment variable through which ``workloads.Worker`` tells the child its parent's pid.
PARENT_ENV = "KAFKALAB_PARENT_PID"


@dataclass
class ExecSpec:
    """A worker that becomes another program (``os.execv(argv[0], argv)``) once it is bound to
    die with its parent: how a JVM client gets the same lifetime as every worker. ``ledger``
    names the program's ledger (if it writes one) and, as for every worker, its log
    (``<ledger>.log``, stdout and stderr); ``stdout`` set: stdout goes to that file instead."""

    name: str
    run_id: str
    ledger: str
    argv: list[str]
    stdout: str | None = None
    kind: str = "exec"


@dataclass
class ProgramSpec:
    """A worker that runs a client program (``kafkalab.programs.Program``): ``source``, the
    program's text exactly as shown, run as ``__main__`` once ``kafkalab.instruments`` has
    bound ``lab`` to the instruments of ``role`` (``instruments.ROLES``), made from this spec.
    ``conf``: the settings the harness adds (addresses and names, ``lab.conf``); ``topics``:
    the run's topics; ``options``: the instruments' settings (e.g.
    ``instruments.consumer.ConsumerOptions``). A program that raises exits 1 with its
    traceback in the worker's log; its lines are named ``<program NAME>``."""

    name: str
    run_id: str
    ledger: str
    role: str
    program_name: str
    source: str
    conf: dict = field(default_factory=dict)
    topics: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    kind: str = "program"


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent exits (prctl ``PR_SET_PDEATHSIG``,
    kept across ``exec``). ``parent_pid``: the pid of the process that spawned this one; if
    it is no longer the parent, it died before the request took effect, and this process
    kills itself at once. No-op where ``prctl`` does not exist (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def run_program(spec: ProgramSpec) -> int:
    """Run a client program in this process (``ProgramSpec``): instruments installed, the
    source compiled under the name ``<program NAME>`` (its lines appear in tracebacks) and run
    as ``__main__``; the instruments are closed when it ends, however it ends. Returns 0, or 1
    if the program raised (traceback on stderr)."""
    import linecache
    import traceback

    from . import instruments

    lab = instruments.install(spec)
    filename = f"<program {spec.program_name}>"
    linecache.cache[filename] = (len(spec.source), None, spec.source.splitlines(keepends=True), filename)
    try:
        exec(compile(spec.source, filename, "exec"), {"__name__": "__main__"})
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        lab.close()
    return 0


def run_exec(spec: ExecSpec) -> NoReturn:
    """Become ``spec.argv`` (stdout to ``spec.stdout`` if set). Never returns.

    Raises:
        OSError: the program could not be executed.
    """
    sys.stdout.flush()
    if spec.stdout:
        fd = os.open(spec.stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.close(fd)
    os.execv(spec.argv[0], spec.argv)


def spec_from_json(text: str) -> Any:
    """The spec object of one worker (``ExecSpec``, ``ProgramSpec``) from its JSON (``spec_json``), chosen by ``kind``.

    Raises:
        ValueError: unknown ``kind`` or invalid fields.
    """
    d = json.loads(text)
    kinds = {"exec": ExecSpec, "program": ProgramSpec}
    kind = d.get("kind")
    if kind not in kinds:
        raise ValueError(f"unknown worker kind {kind!r}: one of {', '.join(kinds)}")
    return kinds[kind](**d)


def run(spec: Any) -> int:
    """Run one worker in this process; returns its exit code (0; a program: its own)."""
    if spec.kind == "exec":
        run_exec(spec)
    elif spec.kind == "program":
        return run_program(spec)
    return 0


def main(argv: list[str] | None = None) -> None:
    """``python -m kafkalab.worker SPEC_JSON``: die with the parent, run the worker, exit with
    its code."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: python -m kafkalab.worker SPEC_JSON")
    parent = os.environ.get(PARENT_ENV)
    die_with_parent(int(parent) if parent else None)
    try:
        spec = spec_from_json(argv[0])
    except (ValueError, TypeError) as e:
        sys.exit(f"kafkalab.worker: bad spec: {e}")
    sys.exit(run(spec))


def spec_json(spec: Any) -> str:
    """A worker spec (a dataclass with ``kind``) as the JSON ``main`` takes."""
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
