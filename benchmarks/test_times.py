"""Where ``make test``'s time goes: seconds per test file and per notebook, from a JUnit report.

Run the suite with a report, then read it::

    make test LANES=1 PYTEST_ARGS=--junitxml=build/junit.xml   # one lane: each file's own time
    .venv/bin/python benchmarks/test_times.py build/junit.xml [--costs]

Prints one row per file (tests/*.py, notebooks/*.ipynb, notebooks/solutions/*.ipynb): tests and
seconds, longest first, and the total. ``--costs`` prints the rows of 10 s or more as the
``COSTS_S`` table of ``tests/lanes.py``, which orders the files for the lanes (measure with
``LANES=1``: with several lanes each file also pays for the others beside it).
"""

from __future__ import annotations

import argparse
import collections
import xml.etree.ElementTree as ET
from pathlib import Path


def file_of(classname: str) -> str:
    """``tests.test_cli`` -> ``tests/test_cli.py``; ``notebooks.solutions.03_x.ipynb`` ->
    ``notebooks/solutions/03_x.ipynb`` (pytest's JUnit class names)."""
    if classname.endswith(".ipynb"):
        stem = classname[: -len(".ipynb")]
        folder, _, name = stem.rpartition(".")
        return f"{folder.replace('.', '/')}/{name}.ipynb"
    return classname.replace(".", "/") + ".py"


def per_file(report: Path) -> tuple[collections.Counter, collections.Counter]:
    """``(seconds, tests)`` per file of a JUnit XML report."""
    seconds: collections.Counter = collections.Counter()
    tests: collections.Counter = collections.Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = file_of(case.get("classname", ""))
        seconds[name] += float(case.get("time", 0))
        tests[name] += 1
    return seconds, tests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="JUnit XML written by pytest --junitxml")
    ap.add_argument("--costs", action="store_true", help="print tests/lanes.py's COSTS_S table instead")
    args = ap.parse_args()
    seconds, tests = per_file(args.report)
    if args.costs:
        print("COSTS_S = {")
        for name, s in seconds.most_common():
            if s >= 10:
                print(f'    "{name}": {round(s)},')
        print("}")
        return
    print(f"| file | tests | seconds |\n|---|---:|---:|")
    for name, s in seconds.most_common():
        print(f"| {name} | {tests[name]} | {s:.1f} |")
    print(f"| total | {sum(tests.values())} | {sum(seconds.values()):.1f} |")


if __name__ == "__main__":
    main()
