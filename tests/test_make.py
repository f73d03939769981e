"""The README's two commands, as make would run them (``make -n``: printed, not run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dry_run(target: str, *args: str) -> list[str]:
    cp = subprocess.run(["make", "-n", target, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.splitlines()


def test_make_lab_passes_allow_root_exactly_when_run_as_root() -> None:
    jupyter = [line for line in dry_run("lab") if "jupyter lab" in line]
    assert len(jupyter) == 1, jupyter
    assert ("--allow-root" in jupyter[0]) == (os.getuid() == 0), \
        "JupyterLab refuses root without --allow-root; a normal user does not need it"


def test_make_lab_edition_ko_opens_the_korean_edition() -> None:
    jupyter = [line for line in dry_run("lab", "EDITION=ko") if "jupyter lab" in line]
    assert len(jupyter) == 1 and "--LabApp.default_url=/lab/tree/ko" in jupyter[0], jupyter
    assert "default_url" not in "".join(line for line in dry_run("lab") if "jupyter lab" in line)
    cp = subprocess.run(["make", "lab", "EDITION=fr"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert cp.returncode != 0 and "EDITION=fr: the editions are en (default) and ko" in cp.stdout


def test_make_test_runs_the_tests_and_the_notebooks() -> None:
    pytest = [line for line in dry_run("test") if "pytest" in line]
    assert pytest and "tests notebooks --nbval-lax" in pytest[-1]
