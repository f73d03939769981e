"""Where ``make test``'s time goes: seconds per test file and per notebook, from a JUnit report.

``make test`` writes its report to ``build/junit.xml``; read it::

    .venv/bin/python benchmarks/test_times.py build/junit.xml [--costs | --slowest 10 --budget 90]

Prints one row per file (tests/*.py, notebooks/*.ipynb, notebooks/solutions/*.ipynb): tests and
seconds, longest first, and the total. ``--costs`` prints the rows of 10 s or more as the
``COSTS_S`` table of ``tests/lanes.py``, the schedule of a run that has no report of its own
(a fresh clone). ``--slowest N --budget S`` prints the N slowest files and marks each notebook
over S seconds (the speed rule: a notebook in at most 90 s on the 2-core development machine);
``.ci/run`` prints it after every ``make test``. It reports, it never fails a run: a loaded
machine is slower, and timings belong in benchmarks, not in tests. With several lanes each
file's seconds include the load of the files running beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from lanes import per_file  # noqa: E402  (tests/lanes.py: the one reader of the report)

#: Seconds a notebook may take on the 2-core development machine (the developers' guide).
NOTEBOOK_BUDGET_S = 90


def slowest(report: Path, n: int, budget_s: float) -> tuple[str, int]:
    """The ``n`` slowest files of ``report`` as a Markdown table, each notebook over ``budget_s``
    (s) marked, and how many notebooks are over it."""
    seconds, tests = per_file(report)
    over = [f for f, s in seconds.items() if f.endswith(".ipynb") and s > budget_s]
    lines = [f"The {n} slowest files of {report} (budget: {budget_s:g} s per notebook; "
             f"{len(over)} notebook(s) over it)", "", "| file | tests | seconds | budget |", "|---|---:|---:|---|"]
    for name, s in seconds.most_common(n):
        mark = ("OVER" if s > budget_s else "ok") if name.endswith(".ipynb") else "-"
        lines.append(f"| {name} | {tests[name]} | {s:.1f} | {mark} |")
    lines.append(f"| all {len(seconds)} files | {sum(tests.values())} | {sum(seconds.values()):.1f} | |")
    return "\n".join(lines), len(over)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="JUnit XML written by pytest --junitxml (make test: build/junit.xml)")
    ap.add_argument("--costs", action="store_true", help="print tests/lanes.py's COSTS_S table instead")
    ap.add_argument("--slowest", type=int, metavar="N", help="print only the N slowest files, with the budget")
    ap.add_argument("--budget", type=float, default=NOTEBOOK_BUDGET_S, metavar="S",
                    help=f"seconds a notebook may take (default {NOTEBOOK_BUDGET_S})")
    args = ap.parse_args()
    if not args.report.is_file():
        ap.error(f"{args.report}: no such report (make test writes build/junit.xml)")
    seconds, tests = per_file(args.report)
    if args.costs:
        print("COSTS_S = {")
        for name, s in seconds.most_common():
            if s >= 10:
                print(f'    "{name}": {round(s)},')
        print("}")
        return
    if args.slowest:
        print(slowest(args.report, args.slowest, args.budget)[0])
        return
    print("| file | tests | seconds |\n|---|---:|---:|")
    for name, s in seconds.most_common():
        print(f"| {name} | {tests[name]} | {s:.1f} |")
    print(f"| total | {sum(tests.values())} | {sum(seconds.values()):.1f} |")


if __name__ == "__main__":
    main()
