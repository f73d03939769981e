"""The README's two commands, as make would run them (``make -n``: printed, not run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dry_run(target: str) -> list[str]:
    cp = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.splitlines()


def test_make_lab_passes_allow_root_exactly_when_run_as_root() -> None:
    jupyter = [line for line in dry_run("lab") if "jupyter lab" in line]
    assert len(jupyter) == 1, jupyter
    assert ("--allow-root" in jupyter[0]) == (os.getuid() == 0), \
        "JupyterLab refuses root without --allow-root; a normal user does not need it"


def test_make_test_runs_the_tests_and_the_notebooks() -> None:
    pytest = [line for line in dry_run("test") if "pytest" in line]
    assert pytest and "tests notebooks --nbval-lax" in pytest[-1]
