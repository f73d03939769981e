"""Lanes: ``make test`` runs in pytest-xdist workers side by side, each against a cluster of its own.

Loaded with ``-p lanes`` (``pyproject.toml`` puts ``tests/`` on the path). Without xdist, or in
its first worker (``gw0``), nothing changes: the tests use the cluster of the environment
(``$KAFKALAB_PORT_BASE``, default 9092, and ``$KAFKALAB_STATE``), which ``make test`` starts.
Worker ``gwN`` (N >= 1) moves its whole process, and so every kernel nbval starts and every
process a test spawns, to a cluster of its own:

- ``KAFKALAB_PORT_BASE`` = the environment's base + ``LANE_PORT_STEP`` * N (9092 -> 10092);
- ``KAFKALAB_STATE`` = the environment's state folder + ``/lanes/gwN`` (node data, ledgers,
  the fault proxy's control socket: nothing shared between lanes; the jars are shared,
  ``config.jars_dir``);

and starts that cluster (``kafkalab up``) before it collects, and stops it (``kafkalab down``)
when it ends, if it started it. A lane that cannot start its cluster fails at once with the
cluster's own error.

Every lane (and a run without xdist) also starts one Spark driver in its own process, with a
Spark Connect server in it (``kafkalab.spark.serve``, on 127.0.0.1, port
``SPARK_CONNECT_PORT_OFFSET`` above the lane's port base), and sets ``SPARK_REMOTE`` to it: every
notebook kernel and every command the lane starts is a Spark Connect client of that one warm
JVM instead of starting a JVM of its own (the notebooks' code is unchanged: ``kafkalab.spark.
session`` returns a client session). The lane's own Spark tests use the server's session
directly. A user's ``SPARK_REMOTE`` or ``SPARK_MASTER`` is left as it is and nothing is started.

Scheduling is ``--dist loadfile --no-loadscope-reorder`` (``make test``): a notebook's cells,
or a test file's tests, run in order on one lane, and files are handed out in collection order,
which ``pytest_collection_modifyitems`` makes longest first, so that the lanes end together. A
file's cost is its seconds in the last run's JUnit report (``LAST_REPORT``, which ``make test``
writes), else in ``COSTS_S``.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

#: Port distance between two lanes' clusters: a cluster uses base .. base + 205.
LANE_PORT_STEP = 1000
#: The lane's Spark Connect server listens on its port base + this (above the cluster's ports).
SPARK_CONNECT_PORT_OFFSET = 900
#: Seconds a lane's ``kafkalab up`` may take (four JVMs on a machine where the other lane runs).
LANE_UP_TIMEOUT_S = 240
#: The JUnit report ``make test`` writes (``JUNIT`` in the Makefile), relative to the project root:
#: the next run's schedule reads each file's seconds from it.
LAST_REPORT = Path("build/junit.xml")
#: Seconds each file took in a ``make test`` with three lanes (its JUnit report read by
#: ``benchmarks/test_times.py --costs``, 2026-11-29 05:20 UTC, this 2-core machine): the schedule of a run with no
#: report of its own (a fresh clone, CI); a file the last run's report has takes that figure
#: instead. Files are handed out longest first, so that the last file a lane starts is a short one;
#: a file listed nowhere counts as short and keeps its place. A stale figure costs balance between
#: the lanes, never a result.
COSTS_S = {
    "notebooks/05_transactions.ipynb": 115,
    "notebooks/08_replication.ipynb": 113,
    "notebooks/02_rebalancing.ipynb": 111,
    "tests/test_browser.py": 94,
    "notebooks/solutions/09_share_groups_solutions.ipynb": 81,
    "notebooks/13_stalled_partition.ipynb": 90,
    "notebooks/solutions/13_stalled_partition_solutions.ipynb": 55,
    "notebooks/10_performance.ipynb": 70,
    "tests/test_rebalance_cluster.py": 66,
    "notebooks/01_partition_assignment.ipynb": 65,
    "notebooks/solutions/08_replication_solutions.ipynb": 63,
    "notebooks/09_share_groups.ipynb": 62,
    "notebooks/03_offset_commit.ipynb": 62,
    "notebooks/04_idempotent_producer.ipynb": 58,
    "notebooks/11_late_transaction.ipynb": 51,
    "notebooks/12_exactly_once_database.ipynb": 75,
    "notebooks/solutions/02_rebalancing_solutions.ipynb": 49,
    "notebooks/solutions/04_idempotent_producer_solutions.ipynb": 48,
    "tests/test_cli.py": 45,
    "tests/test_offset_commit_cluster.py": 44,
    "tests/test_cluster.py": 43,
    "notebooks/solutions/01_partition_assignment_solutions.ipynb": 42,
    "tests/test_audit.py": 41,
    "notebooks/07_ordering.ipynb": 38,
    "tests/test_transactions.py": 36,
    "notebooks/solutions/03_offset_commit_solutions.ipynb": 35,
    "tests/test_compose_image.py": 34,
    "tests/test_share_groups.py": 33,
    "notebooks/solutions/10_performance_solutions.ipynb": 29,
    "notebooks/solutions/05_transactions_solutions.ipynb": 29,
    "notebooks/06_segments_retention.ipynb": 25,
    "tests/test_rebalance_analysis.py": 25,
    "notebooks/solutions/06_segments_retention_solutions.ipynb": 24,
    "notebooks/00_cluster_tour.ipynb": 21,
    "notebooks/ko/00_cluster_tour.ipynb": 20,
    "notebooks/solutions/11_late_transaction_solutions.ipynb": 17,
    "notebooks/solutions/12_exactly_once_database_solutions.ipynb": 25,
    "tests/test_segments_live.py": 17,
    "tests/test_perf.py": 17,
    "notebooks/solutions/07_ordering_solutions.ipynb": 14,
    "tests/test_replication_cluster.py": 14,
    "tests/test_compose.py": 12,
    "tests/test_faults.py": 11,
    "tests/test_runscope.py": 10,
}

_started: list[dict[str, str]] = []


def lane_number() -> int:
    """0 outside xdist and in worker ``gw0``; N in worker ``gwN``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw"))


def _kafkalab(*args: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalab.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def _runs_tests(config: pytest.Config) -> bool:
    """False in xdist's controller (``-n N``), which only hands out tests."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def _serve_spark(port: int) -> None:
    from kafkalab import spark

    spark.serve(port, app_name=f"kafkalab-tests-{os.environ.get('PYTEST_XDIST_WORKER', 'gw0')}")


def pytest_configure(config: pytest.Config) -> None:
    if not _runs_tests(config):
        return
    from kafkalab import config as kconfig

    n = lane_number()
    base = kconfig.port_base() + LANE_PORT_STEP * n
    serving = None
    if not (os.environ.get("SPARK_REMOTE") or os.environ.get("SPARK_MASTER")):
        import concurrent.futures

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lane-spark")
        serving = pool.submit(_serve_spark, base + SPARK_CONNECT_PORT_OFFSET)
        pool.shutdown(wait=False)
    if n != 0:
        _lane_cluster(n, base)
    if serving is not None:
        try:
            serving.result(timeout=LANE_UP_TIMEOUT_S)
        except Exception as exc:
            raise pytest.UsageError(f"lane gw{n}: the Spark driver with a Spark Connect server on "
                                    f"127.0.0.1:{base + SPARK_CONNECT_PORT_OFFSET} did not start: {exc!r}") from exc
        os.environ["SPARK_REMOTE"] = f"sc://127.0.0.1:{base + SPARK_CONNECT_PORT_OFFSET}"


#: What ``kafkalab up`` says of a state folder an older Kafka formatted (``kafkalab.cluster.stale_features``).
STALE_FORMAT = "was formatted by an older Kafka"


def _lane_cluster(n: int, base: int) -> None:
    from kafkalab import config as kconfig

    state = kconfig.state_dir() / "lanes" / f"gw{n}"
    os.environ["KAFKALAB_PORT_BASE"] = str(base)
    os.environ["KAFKALAB_STATE"] = str(state)
    env = dict(os.environ)
    if _kafkalab("status", "--check", env=env, timeout_s=60).returncode == 0:
        return  # this lane's cluster runs already: use it, leave it running
    up = _kafkalab("up", env=env, timeout_s=LANE_UP_TIMEOUT_S)
    if up.returncode != 0 and STALE_FORMAT in up.stdout + up.stderr:
        # The lane's state holds nothing but earlier test runs' data: an older Kafka's format is
        # wiped and the lane formats afresh (kafkalab.cluster.stale_features).
        print(f"lane gw{n}: {state} was formatted by an older Kafka; wiping it", file=sys.stderr)
        _kafkalab("down", env=env, timeout_s=120)
        _kafkalab("wipe", "--yes", env=env, timeout_s=120)
        up = _kafkalab("up", env=env, timeout_s=LANE_UP_TIMEOUT_S)
    if up.returncode != 0:
        _kafkalab("down", env=env, timeout_s=120)
        raise pytest.UsageError(f"lane gw{n}: `kafkalab up` on port base {base} (state {state}) failed:\n"
                                f"{(up.stdout + up.stderr)[-4000:]}")
    _started.append(env)


def pytest_unconfigure(config: pytest.Config) -> None:
    from kafkalab import spark

    spark.stop_served()
    while _started:
        _kafkalab("down", env=_started.pop(), timeout_s=120)


def file_of(classname: str) -> str:
    """``tests.test_cli`` -> ``tests/test_cli.py``; ``notebooks.solutions.03_x.ipynb`` ->
    ``notebooks/solutions/03_x.ipynb`` (pytest's JUnit class names)."""
    if classname.endswith(".ipynb"):
        stem = classname[: -len(".ipynb")]
        folder, _, name = stem.rpartition(".")
        return f"{folder.replace('.', '/')}/{name}.ipynb"
    return classname.replace(".", "/") + ".py"


def per_file(report: Path) -> tuple[collections.Counter, collections.Counter]:
    """``(seconds, tests)`` per file of a JUnit XML report (pytest ``--junitxml``).

    Raises:
        OSError, xml.etree.ElementTree.ParseError: the report cannot be read.
    """
    seconds: collections.Counter = collections.Counter()
    tests: collections.Counter = collections.Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = file_of(case.get("classname", ""))
        seconds[name] += float(case.get("time", 0))
        tests[name] += 1
    return seconds, tests


def costs(root: Path) -> dict[str, float]:
    """Seconds per file for the schedule: ``COSTS_S``, overridden by the last run's report
    (``root / LAST_REPORT``) for every file it has. An unreadable report is ignored (a run
    killed while writing it): the table still orders the files."""
    out: dict[str, float] = dict(COSTS_S)
    try:
        out.update(per_file(root / LAST_REPORT)[0])
    except (OSError, ET.ParseError):
        pass
    return out


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (stable: a file's items keep their order)."""
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts the same way
        cost = costs(config.rootpath)
        items.sort(key=lambda item: -cost.get(item.nodeid.split("::", 1)[0], 0))
