"""tests/conftest.py's guard (issue 35): a test of ``make check`` (none of the markers cluster,
spark, jvm) starts no process and opens no socket unless its marker (``subprocess``, ``socket``)
allows it, and never a JVM. The guard runs here on stand-in tests; a call it lets through goes to a
recorder put in place of the real one, so nothing here starts a process or opens a socket."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import conftest
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOCKET_GUARD_ON = conftest._socket_guard_on


@pytest.fixture(autouse=True)
def as_in_make_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket guard on, as in ``make check``, also where this runs beside a Spark driver or
    after a heavy test (make test)."""
    monkeypatch.setattr(conftest, "_socket_guard_on", lambda: True)


class Item:
    """The part of a ``pytest.Item`` the guard reads: a node id and markers."""

    def __init__(self, *markers: str) -> None:
        self.nodeid = "tests/test_x.py::test_" + "_".join(markers or ("unmarked",))
        self.markers = markers

    def get_closest_marker(self, name: str) -> object:
        return name if name in self.markers else None


def refused(item: Item, call: Callable[[], object]) -> str:
    """The message the guard raises when ``item`` makes ``call``."""
    with conftest.guard(item) as state, pytest.raises(conftest.Unmarked) as e:
        call()
    assert state.refused == [str(e.value)]
    return str(e.value)


def test_an_unmarked_test_may_start_no_process_in_any_way() -> None:
    item = Item()
    for call in (lambda: subprocess.run(["true"]), lambda: subprocess.check_output("echo hi", shell=True),
                 lambda: os.popen("true"), lambda: os.system("true"), lambda: os.fork(),
                 lambda: os.posix_spawn("/bin/true", ["true"], {}), lambda: os.execv("/bin/true", ["true"]),
                 lambda: os.spawnv(os.P_WAIT, "/bin/true", ["true"]),
                 lambda: multiprocessing.get_context("spawn").Process(target=print).start()):
        message = refused(item, call)
        assert message.startswith(f"{item.nodeid} starts a process (") and message.endswith(
            "but is not marked: add @pytest.mark.subprocess (@pytest.mark.jvm if it runs Java)"), message
    assert "(Popen.__init__(true))" in refused(item, lambda: subprocess.run(["true"]))
    assert "(os.system(make))" in refused(item, lambda: os.system("make -n check"))
    assert "(os.fork)" in refused(item, lambda: os.fork())


def test_an_unmarked_test_may_open_no_socket_not_even_on_loopback(tmp_path: Path) -> None:
    item = Item()
    for call, shown in ((lambda: socket.create_connection(("127.0.0.1", 9)), "connect(('127.0.0.1', 9))"),
                        (lambda: socket.socket().bind(("127.0.0.1", 0)), "bind(('127.0.0.1', 0))"),
                        (lambda: socket.socket(socket.AF_UNIX).connect(str(tmp_path / "s")), "connect("),
                        (lambda: socket.socket(type=socket.SOCK_DGRAM).sendto(b"x", ("10.1.2.3", 53)), "sendto(")):
        message = refused(item, call)
        assert f"opens a socket (socket.{shown}" in message and message.endswith(
            "add @pytest.mark.socket (loopback only), or @pytest.mark.cluster if it talks to the cluster"), message
    with conftest.guard(item):
        a, b = socket.socketpair()  # asyncio's event loop makes one: no address, allowed
        a.close(), b.close()


def test_a_subprocess_test_may_start_processes_but_never_a_jvm() -> None:
    item = Item("subprocess")
    started = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "system", started.append)  # the real one, as the guard sees it
        with conftest.guard(item) as state:
            os.system("make -n check")
        assert started == ["make -n check"] and state.refused == []
    for argv in (["java", "-version"], ["/usr/lib/jvm/java-21/bin/java", "-cp", "x"], "javac A.java",
                 ["spark-submit", "x.py"], ["kafka/bin/kafka-topics.sh", "--list"]):
        message = refused(item, lambda: subprocess.Popen(argv))
        assert " starts a JVM (" in message and message.endswith(
            "add @pytest.mark.jvm (or cluster, spark): make check starts no JVM"), message
    for call in (lambda: os.system("java -version"), lambda: os.execv("/usr/bin/java", ["java"]),
                 lambda: os.posix_spawn("/usr/bin/javac", ["javac"], {}),
                 lambda: os.spawnv(os.P_WAIT, "/usr/bin/java", ["java"])):
        assert " starts a JVM (java" in refused(item, call)
    assert "starts a JVM (java)" in refused(Item(), lambda: subprocess.run(["java", "-version"])), \
        "an unmarked test is told the marker Java needs"


def test_a_socket_test_may_use_loopback_and_unix_sockets_only(tmp_path: Path) -> None:
    item = Item("socket")
    reached = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "bind", lambda self, address: reached.append(address))
        with conftest.guard(item), socket.socket() as s, socket.socket(socket.AF_UNIX) as u:
            s.bind(("127.0.0.1", 0))
            s.bind(("localhost", 0))
            u.bind(str(tmp_path / "control.sock"))
    assert reached == [("127.0.0.1", 0), ("localhost", 0), str(tmp_path / "control.sock")]
    for address in (("0.0.0.0", 9092), ("", 0), ("10.0.0.1", 9092), ("example.com", 443)):
        with socket.socket() as s:
            message = refused(item, lambda: s.bind(address))
        assert message == f"{item.nodeid} opens a socket to {address!r}: make check stays on loopback " \
            "(127.0.0.1) and Unix sockets", message
    assert "opens a socket (" in refused(Item("subprocess"), lambda: socket.create_connection(("127.0.0.1", 9))), \
        "subprocess allows processes, not sockets"


def test_a_refusal_the_code_caught_still_fails_the_test() -> None:
    """``pytest_runtest_call`` reads what the guard refused, not only what reached the test."""
    with conftest.guard(Item()) as state:
        try:
            subprocess.run(["true"])
        except Exception:  # noqa: BLE001  (code under test that hides every error)
            pass
    assert state.refused and "starts a process (Popen.__init__(true))" in state.refused[0]


def test_the_guard_puts_everything_back_and_stays_off_for_heavy_tests_and_in_teardown() -> None:
    calls = [(owner, name, getattr(owner, name)) for table in (conftest.PROCESS_CALLS, conftest.SOCKET_CALLS)
             for owner, names in table for name in names if hasattr(owner, name)]
    with conftest.guard(Item()) as state:
        assert all(getattr(owner, name) is not real for owner, name, real in calls)
    assert all(getattr(owner, name) is real for owner, name, real in calls)
    started = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "system", started.append)
        with conftest.guard(Item()) as state:
            state.on = False  # teardown: a module fixture of heavy tests may end after an unmarked test
            os.system("kafkalab down")
    assert started == ["kafkalab down"] and state.refused == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conftest, "_heavy_ran", False)
        for marker in conftest.HEAVY_MARKERS:
            with conftest.guard(Item(marker)) as state:
                assert not state.on and all(getattr(owner, name) is real for owner, name, real in calls)
        assert conftest._heavy_ran, "a heavy test ran"


def test_the_socket_guard_stands_down_beside_a_spark_driver_or_after_a_heavy_test(monkeypatch) -> None:
    class SparkContext:
        _gateway: object = None  # a Spark driver's py4j gateway: a JVM child of this process

    monkeypatch.setitem(sys.modules, "pyspark", type(sys)("pyspark"))
    sys.modules["pyspark"].SparkContext = SparkContext  # type: ignore[attr-defined]
    monkeypatch.setattr(conftest, "_heavy_ran", False)
    assert SOCKET_GUARD_ON(), "make check: no Spark driver, no heavy test"
    SparkContext._gateway = object()
    assert not SOCKET_GUARD_ON(), "py4j connects to the JVM at any moment (make test's lanes serve Spark)"
    SparkContext._gateway = None
    monkeypatch.setattr(conftest, "_heavy_ran", True)
    assert not SOCKET_GUARD_ON(), "after a heavy test (its Spark session, its clients)"
    monkeypatch.setattr(conftest, "_socket_guard_on", SOCKET_GUARD_ON)
    connect = socket.socket.connect
    with conftest.guard(Item()):
        assert socket.socket.connect is connect, "the socket calls are left as they are"


def test_the_markers_are_registered_and_make_check_runs_exactly_the_tests_without_heavy_ones() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    for marker in (*conftest.HEAVY_MARKERS, conftest.SUBPROCESS_MARKER, conftest.SOCKET_MARKER):
        assert f'    "{marker}: ' in pyproject, f"marker {marker} is not in pyproject.toml"
    check = re.search(r"^check:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert check and "-m \"" + " and ".join(f"not {m}" for m in conftest.HEAVY_MARKERS) + "\"" in check[1], \
        check and check[1]


def test_a_notebook_cell_is_a_cluster_test() -> None:
    """nbval's items come from notebooks/: they start a kernel and talk to the cluster, so the guard
    treats them as ``cluster`` tests (``make test`` collects them; ``make check`` never does)."""
    import conftest

    class Cell:
        path = Path("notebooks/00_cluster_tour.ipynb")
        fixturenames = ()
        markers: list = []

        def get_closest_marker(self, name):
            return next((m for m in self.markers if m.name == name), None)

        def add_marker(self, mark):
            self.markers.append(mark.mark)

    cell = Cell()
    conftest.pytest_collection_modifyitems(None, [cell])
    assert cell.get_closest_marker("cluster") is not None
