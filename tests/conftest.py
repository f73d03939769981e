"""Shared pytest fixtures, and the guard that keeps ``make check`` hermetic.

``spark``: one local Spark session (``kafkalab.spark.session``) for the whole test run;
tests that use it are marked ``@pytest.mark.spark``. A test that needs the live cluster is
marked ``cluster``; one that starts any other JVM (Kafka's tools, javac, a second cluster) or
reads the jars ``make jars`` fetches with Maven ``jvm``. ``make check`` runs the rest, with Python only (no Java, no Maven, no jars), and the
guard (``guard`` below) keeps it that way: a test without
those markers that starts a process or opens a socket fails, naming the marker to add
(``subprocess`` or ``socket`` where Python and the system's own tools are all it needs: such a
test stays in ``make check``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing.process
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Generator, Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """``kafkalab.spark.session("kafkalab-tests")``, stopped when the test run ends."""
    from kafkalab import spark as kspark

    session = kspark.session("kafkalab-tests")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _default_ports_for_pure_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that compare files against the default port plan (the compose file, captured tool
    output) see the default ports even when the suite runs against a second cluster
    (``KAFKALAB_PORT_BASE``); tests marked ``cluster`` keep the environment."""
    if request.node.get_closest_marker("cluster") is None:
        monkeypatch.delenv("KAFKALAB_PORT_BASE", raising=False)


#: Markers of the tests that need more than Python: ``make check`` runs every test without them.
HEAVY_MARKERS = ("cluster", "spark", "jvm")
#: A test of ``make check`` that starts a process (``make``, ``git``, ``msgfmt``, ``kafkalab``'s
#: CLI, a Python child): allowed, but never a JVM.
SUBPROCESS_MARKER = "subprocess"
#: A test of ``make check`` that opens a socket (``bind``, ``connect``) on loopback or a Unix
#: socket's path: any other address still fails it.
SOCKET_MARKER = "socket"
#: Programs that start a JVM (``java``, ``javac``, Spark's launchers, Kafka's scripts).
JVM_PROGRAMS = ("java", "javac", "spark-submit", "spark-class")
#: Every way Python starts a process: ``subprocess`` (``run``, ``check_output``, ``os.popen``,
#: asyncio's subprocesses go through ``Popen``), ``multiprocessing`` (and
#: ``concurrent.futures.ProcessPoolExecutor``), and the ``os`` calls under them all (``pty`` and
#: ``os.spawn*`` fork through ``os.fork``/``os.forkpty``).
PROCESS_CALLS = (
    (subprocess.Popen, ("__init__",)),
    (multiprocessing.process.BaseProcess, ("start",)),
    (os, ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execl", "execle", "execlp",
          "execlpe", "execv", "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
          "spawnv", "spawnve", "spawnvp", "spawnvpe")),
)
#: Every way a socket reaches an address (``create_connection``, asyncio's and ``http.client``'s
#: connections call ``connect``), loopback and Unix sockets included. ``socket.socketpair``
#: (asyncio's event loop makes one) reaches none and stays allowed.
SOCKET_CALLS = ((socket.socket, ("connect", "connect_ex", "bind", "sendto")),)


def _argv0(args: object) -> str:
    """The file name of the program in ``args`` (an argv list, or a command line's first word)."""
    if isinstance(args, (str, bytes, os.PathLike)):
        first = os.fsdecode(args).split()[0] if os.fsdecode(args).split() else ""
    else:
        seq = list(args)  # type: ignore[call-overload]
        first = os.fsdecode(seq[0]) if seq else ""
    return os.path.basename(first)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that asks for the ``spark`` fixture is a ``spark`` test, marked or not; a notebook's
    cell (nbval, ``make test``) is a ``cluster`` test: it runs against the live cluster and starts
    its kernel, its workers and Spark."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if getattr(item, "path", None) is not None and item.path.suffix == ".ipynb" and item.get_closest_marker("cluster") is None:
            item.add_marker(pytest.mark.cluster)


class Unmarked(AssertionError):
    """A test started a process or opened a socket without the marker that allows it."""


#: Whether a test with one of ``HEAVY_MARKERS`` has run in this process (see ``_socket_guard_on``).
_heavy_ran = False


def _socket_guard_on() -> bool:
    """Whether the socket guard is on: not once a test with one of ``HEAVY_MARKERS`` has run in
    this process, nor while a Spark driver lives in it (``make test``'s lanes start one before
    the first test, tests/lanes.py): py4j then connects to its JVM at any moment, from whichever
    test runs then (its garbage collection of a Spark object opens a connection from the thread
    that collects it). ``make check`` has neither: there it is always on."""
    pyspark = sys.modules.get("pyspark")
    return not _heavy_ran and getattr(getattr(pyspark, "SparkContext", None), "_gateway", None) is None


def _program(owner: object, name: str, args: tuple, kw: dict) -> str:
    """The name of the program a ``PROCESS_CALLS`` call runs (``""``: none named, a fork or a
    ``multiprocessing`` child)."""
    if owner is subprocess.Popen:  # (self, args, ...)
        return _argv0(args[1] if len(args) > 1 else kw.get("args", ""))
    if owner is os and name.startswith("spawn"):  # (mode, file, ...)
        return _argv0([args[1]]) if len(args) > 1 else ""
    if owner is os and name not in ("fork", "forkpty"):  # system(command), exec*(path, ...), posix_spawn*(path, ...)
        return _argv0(args[0]) if args else ""
    return ""


def _loopback(address: object) -> bool:
    """Whether ``address`` (a socket address) is a Unix socket's path or a loopback host."""
    if isinstance(address, (str, bytes)):
        return True
    host = address[0] if isinstance(address, tuple) and address else None
    return host in ("::1", "localhost") or (isinstance(host, str) and host.startswith("127."))


@dataclasses.dataclass
class Guard:
    """One test's guard: what it refused (``nodeid``, what, which marker to add), and whether it
    is checking (``on``: not during teardown)."""

    refused: list[str] = dataclasses.field(default_factory=list)
    on: bool = True


@contextlib.contextmanager
def guard(item: pytest.Item) -> Iterator[Guard]:
    """While it lasts and its ``Guard`` is ``on``, for a test without ``HEAVY_MARKERS``: a
    ``PROCESS_CALLS`` call raises ``Unmarked`` unless the test is marked ``subprocess`` (and then
    still for a ``JVM_PROGRAMS`` program or a ``kafka-*.sh`` script), and a ``SOCKET_CALLS`` call
    unless the test is marked ``socket`` and the address is loopback or a Unix socket's path.
    Each refusal is also kept in ``Guard.refused`` (from any thread, and also where the code under
    test caught the error): ``pytest_runtest_call`` fails the test on it. Out of its sight: what C
    code does by itself (librdkafka's own sockets) and what an allowed child process does."""
    global _heavy_ran
    if any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
        _heavy_ran = True
        yield Guard(on=False)
        return
    state = Guard()
    may_spawn = item.get_closest_marker(SUBPROCESS_MARKER) is not None
    may_connect = item.get_closest_marker(SOCKET_MARKER) is not None

    def refuse(what: str, advice: str) -> Unmarked:
        state.refused.append(f"{item.nodeid} {what}: {advice}")
        return Unmarked(state.refused[-1])

    def process_guard(owner: object, name: str, real: Callable[..., object]) -> Callable[..., object]:
        @functools.wraps(real)
        def guarded(*args: object, **kw: object) -> object:
            if state.on:
                exe = _program(owner, name, args, kw)
                if exe in JVM_PROGRAMS or (exe.startswith("kafka-") and exe.endswith(".sh")):
                    raise refuse(f"starts a JVM ({exe})",
                                 "add @pytest.mark.jvm (or cluster, spark): make check starts no JVM")
                call = f"{getattr(owner, '__name__', owner)}.{name}" + (f"({exe})" if exe else "")
                if not may_spawn:
                    raise refuse(f"starts a process ({call}) but is not marked",
                                 f"add @pytest.mark.{SUBPROCESS_MARKER} (@pytest.mark.jvm if it runs Java)")
            return real(*args, **kw)
        return guarded

    def socket_guard(owner: object, name: str, real: Callable[..., object]) -> Callable[..., object]:
        @functools.wraps(real)
        def guarded(sock: socket.socket, *args: object, **kw: object) -> object:
            if state.on:
                address = args[-1] if name == "sendto" else (args[0] if args else kw.get("address"))
                if not may_connect:
                    raise refuse(f"opens a socket (socket.{name}({address!r})) but is not marked",
                                 f"add @pytest.mark.{SOCKET_MARKER} (loopback only), or @pytest.mark.cluster "
                                 "if it talks to the cluster")
                if not _loopback(address):
                    raise refuse(f"opens a socket to {address!r}",
                                 "make check stays on loopback (127.0.0.1) and Unix sockets")
            return real(sock, *args, **kw)
        return guarded

    with pytest.MonkeyPatch.context() as mp:
        for calls, wrap in ((PROCESS_CALLS, process_guard), (SOCKET_CALLS, socket_guard)):
            if wrap is socket_guard and not _socket_guard_on():
                continue
            for owner, names in calls:
                for name in names:
                    if hasattr(owner, name):
                        mp.setattr(owner, name, wrap(owner, name, getattr(owner, name)))
        yield state


_GUARD = pytest.StashKey[Guard]()


# One guard spans the test's whole protocol, so that a test's own monkeypatch of a guarded call
# (undone in teardown) nests inside it; it checks set-up (the test's fixtures, a module's too) and
# the body, not teardown, where a module- or session-wide fixture of heavy tests may end after an
# unmarked test.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    with guard(item) as state:
        item.stash[_GUARD] = state
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Fails a test whose body passed although the guard refused something (the code under test
    caught the ``Unmarked`` error, or another thread got it)."""
    result = yield
    refused = item.stash[_GUARD].refused if _GUARD in item.stash else []
    if refused:
        raise Unmarked("\n".join(dict.fromkeys(refused)))
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _GUARD in item.stash:
        item.stash[_GUARD].on = False
