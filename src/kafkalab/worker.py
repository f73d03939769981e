"""Client *processes*: restarted, stopped and killed like pods. The one child-process entry point.

``python -m kafkalab.worker SPEC_JSON`` runs one worker; ``kafkalab.workloads.spawn(spec)``
starts it and returns a handle (``workloads.Worker``). The spec's ``kind`` picks the mode:

==============  ===========================================================================
``exec``        ``ExecSpec``: replaces itself with another program (a JVM client), which
                inherits the same death with the parent (notebook 03's Java consumer)
``program``     ``ProgramSpec``: a client program as a notebook shows it (``kafkalab.programs``),
                run with the lab's instruments of its role (``kafkalab.instruments``):
                notebooks 02, 03, 04, 05 and 09
``host``        ``HostSpec``: many client programs in one process, each in its own thread
                with its own instruments (``lab`` per thread), started and stopped through
                files in an inbox folder: the members of notebook 01's groups
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


#: The only settings the harness may put in a program's ``lab.conf``: where the cluster is and the
#: run's names (STYLE.md: every setting that decides what Kafka does is in the program on screen).
#: ``ssl.ca.location``: the lab's CA, for a program that writes ``"security.protocol": "SSL"``.
LAB_CONF_KEYS = ("bootstrap.servers", "client.id", "group.id", "ssl.ca.location")


def lab_conf(client_id: str, group_id: str | None = None, bootstrap_servers: str | None = None,
             tls_ca: str | None = None) -> dict[str, str]:
    """The settings the harness adds to a client program's own (``lab.conf``), the one builder:
    ``bootstrap.servers`` (default: the cluster's CLIENT listeners; a fault proxy's ports where a
    run needs it), ``client.id``, ``group.id`` if given, and the lab CA's path (``tls_ca``) for a
    program that writes ``"security.protocol": "SSL"``. Nothing that changes what Kafka does."""
    if bootstrap_servers is None:
        from . import config

        bootstrap_servers = config.bootstrap_servers()
    conf = {"bootstrap.servers": bootstrap_servers, "client.id": client_id}
    if group_id is not None:
        conf["group.id"] = group_id
    if tls_ca is not None:
        conf["ssl.ca.location"] = tls_ca
    return conf


@dataclass
class ProgramSpec:
    """A worker that runs a client program (``kafkalab.programs.Program``): ``source``, the
    program's text exactly as shown, run as ``__main__`` once ``kafkalab.instruments`` has
    bound ``lab`` to the instruments of ``role`` (``instruments.ROLES``), made from this spec.
    ``conf``: the settings the harness adds (addresses and names, ``lab.conf``); ``topics``:
    the run's topics; ``options``: the instruments' settings (e.g.
    ``instruments.consumer.ConsumerOptions``); ``instance_id``: a name for a program that writes
    ``"group.instance.id": lab.instance_id`` (static membership, KIP-345). A program that raises
    exits 1 with its traceback in the worker's log; its lines are named ``<program NAME>``.

    Raises:
        ValueError: ``conf`` holds a key outside ``LAB_CONF_KEYS`` (a setting the program would not
            show).
    """

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
    instance_id: str | None = None

    def __post_init__(self) -> None:
        hidden = sorted(set(self.conf) - set(LAB_CONF_KEYS))
        if hidden:
            raise ValueError(f"program {self.program_name}: lab.conf may hold only {', '.join(LAB_CONF_KEYS)}, "
                             f"not {', '.join(hidden)}: write such settings in the program, where they show")


@dataclass
class HostSpec:
    """A worker that runs many client programs, each in its own thread with its own
    instruments (``instruments.install_per_thread``): e.g. the members of many consumer groups
    in one process, where a process each would cost a Python start per member (notebook 01).

    ``inbox``: a folder. The harness starts a program by writing its ``ProgramSpec`` as JSON
    to ``<KEY>.json`` there (written under another name, then renamed, so it is read whole),
    and asks it to stop by creating ``<KEY>.stop`` (its ``lab.running()`` turns False). When a
    program ends, the host writes ``<KEY>.end``: empty if the program returned, its traceback
    if it raised. SIGTERM stops every program; the host exits once they have all ended.
    ``ledger``: names the host's log (``<ledger>.log``); each program has its own ledger.
    ``poll_ms``: how often the host looks at the inbox, ms."""

    name: str
    run_id: str
    ledger: str
    inbox: str
    poll_ms: int = 20
    kind: str = "host"


def _write_file(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` under a temporary name, then rename: a reader sees all of it or nothing."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _host_program(spec: ProgramSpec, lab: Any, end_path: str) -> None:
    """One program of a host worker, on its own thread: ``lab`` bound to this thread, the
    source run as ``__main__``, the instruments closed and ``end_path`` written when it ends."""
    import linecache
    import traceback

    from . import instruments

    instruments.bind_thread(lab)
    filename = f"<program {spec.program_name}>"
    linecache.cache[filename] = (len(spec.source), None, spec.source.splitlines(keepends=True), filename)
    error = ""
    try:
        exec(compile(spec.source, filename, "exec"), {"__name__": "__main__"})
    except Exception:
        error = traceback.format_exc()
        print(f"program {spec.name} ({spec.program_name}) failed:\n{error}", file=sys.stderr, flush=True)
    finally:
        lab.close()
        _write_file(end_path, error)


def run_host(spec: HostSpec) -> int:
    """Run a host worker (``HostSpec``) until SIGTERM and the end of all its programs.
    Returns 0. A program whose instruments cannot be made (bad role or options) ends at once,
    its ``.end`` file holding the error."""
    import threading
    import traceback
    from pathlib import Path

    from . import instruments

    instruments.install_per_thread()
    inbox = Path(spec.inbox)
    inbox.mkdir(parents=True, exist_ok=True)
    stopping = threading.Event()

    def on_sigterm(*_: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    labs: dict[str, Any] = {}
    threads: dict[str, threading.Thread | None] = {}
    tick = threading.Event()  # never set: the pause between two looks at the inbox
    while True:
        for path in sorted(inbox.glob("*.json")):
            key = path.stem
            if key in threads:
                continue
            try:
                program = ProgramSpec(**json.loads(path.read_text()))
                lab = instruments.make(program)  # a role may set its own SIGTERM handler...
            except Exception:
                threads[key] = None
                _write_file(inbox / f"{key}.end", traceback.format_exc())
                continue
            finally:
                signal.signal(signal.SIGTERM, on_sigterm)  # ...the host's is the one that counts
            labs[key] = lab
            t = threading.Thread(target=_host_program, args=(program, lab, str(inbox / f"{key}.end")),
                                 name=key, daemon=True)
            threads[key] = t
            t.start()
        stop_asked = {p.stem for p in inbox.glob("*.stop")}
        for key, lab in labs.items():
            if stopping.is_set() or key in stop_asked:
                lab.stop()
        if stopping.is_set() and all(t is None or not t.is_alive() for t in threads.values()):
            return 0
        tick.wait(spec.poll_ms / 1000)  # the inbox's polling interval


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
    kinds = {"exec": ExecSpec, "program": ProgramSpec, "host": HostSpec}
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
    elif spec.kind == "host":
        return run_host(spec)
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
