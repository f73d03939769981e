"""Notebooks are committed without outputs (STYLE.md): diffs stay readable."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS][:2] == ["00_cluster_tour.ipynb", "01_partition_assignment.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped_and_uses_the_python3_kernel(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; strip them"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_the_house_skeleton(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for heading in ("Setup", "Summary", "Interview questions", "Exercises", "Glossary"):
        assert heading in text, f"{path.name} lacks a {heading!r} section"
    assert "require_cluster(" in code, "the setup cell fails fast when the cluster is down"
    assert "assert " in code
    assert "time.sleep(" not in code, "wait on a condition, not a bare sleep"
