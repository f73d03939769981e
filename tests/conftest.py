"""Shared pytest fixtures.

``spark``: one local Spark session (``kafkalab.spark.session``) for the whole test run;
tests that use it are marked ``@pytest.mark.spark``. A test that needs the live cluster is
marked ``cluster``; one that starts any other JVM (Kafka's tools, javac, a second cluster)
``jvm``. ``make check`` runs the rest, and ``_heavy_tests_are_marked`` keeps it that way.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

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
#: Programs that start a JVM (``java``, ``javac``, Spark's launchers, Kafka's scripts).
JVM_PROGRAMS = ("java", "javac", "spark-submit", "spark-class")


def _argv0(args: object) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        first = os.fsdecode(args).split()[0] if os.fsdecode(args).split() else ""
    else:
        seq = list(args)  # type: ignore[call-overload]
        first = os.fsdecode(seq[0]) if seq else ""
    return os.path.basename(first)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that asks for the ``spark`` fixture is a ``spark`` test, marked or not."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that starts a JVM (a broker, a Kafka tool, javac, Spark), in its own body or in a
    fixture set up for it (a module's too), carries one of ``HEAVY_MARKERS``, so that
    ``make check`` (``-m "not cluster and not spark and not jvm"``) never starts one: for an
    unmarked test, ``subprocess.Popen`` of a ``JVM_PROGRAMS`` program (or a ``kafka-*.sh``
    script) raises, naming the marker to add."""
    if any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
        yield
        return
    real_init = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen, args: object, *a: object, **kw: object) -> None:
        exe = _argv0(args)
        if exe in JVM_PROGRAMS or (exe.startswith("kafka-") and exe.endswith(".sh")):
            raise UnmarkedJvm(f"{item.nodeid} starts a JVM ({exe}) but is not marked "
                              f"{' / '.join(HEAVY_MARKERS)}: add @pytest.mark.jvm (or cluster/spark)")
        real_init(self, args, *a, **kw)  # type: ignore[arg-type]

    subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real_init  # type: ignore[method-assign]


class UnmarkedJvm(AssertionError):
    """A test without a ``HEAVY_MARKERS`` marker tried to start a JVM."""
