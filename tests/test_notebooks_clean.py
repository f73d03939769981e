"""Notebooks are committed without outputs (STYLE.md): diffs stay readable. And every notebook
has the house skeleton (STYLE.md, "A notebook's shape"), checked by ``skeleton_problems``,
which a planted bad notebook shows can fail."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

#: The skeleton's sections, as markdown headings, in this order.
SECTIONS = ("Setup", "Summary", "Interview questions", "Exercises", "Glossary", "Cleanup")
#: The end of a notebook: each of these headings begins a markdown cell of its own.
END_SECTIONS = SECTIONS[1:]
#: An interview question with its answer folded: ``<details><summary>Q</summary> A </details>``.
FOLDED_QA = re.compile(r"<details>\s*<summary>(.+?)</summary>(.*?)</details>", re.S)


def read_stripped(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, after asserting it is valid, has no outputs or execution
    counts, and uses the python3 kernel."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; strip them"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    return nb


def test_there_are_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS][:2] == ["00_cluster_tour.ipynb", "01_partition_assignment.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped_and_uses_the_python3_kernel(path: Path) -> None:
    nb = read_stripped(path)


def _section_at(nb, name: str) -> int | None:
    """Index of the first markdown cell with a heading starting with ``name``, or None."""
    pattern = re.compile(rf"^#{{1,6}}\s+{re.escape(name)}\b", re.M)
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and pattern.search(c.source)), None)


def skeleton_problems(nb) -> list[str]:
    """What ``nb`` lacks of the house skeleton, one sentence each ([] if nothing):

    - headings ``SECTIONS``, in that order;
    - Setup: the first code cell after its heading calls ``kafkalab.require_cluster()``;
    - Checks: at least one ``assert`` between Setup and Cleanup, and one in every code cell
      that opens with a ``# Check`` comment;
    - Interview questions: at least three, each ``<details><summary>`` with an answer inside;
    - Cleanup: code cells after its heading, the last cell of the notebook being one;
    - Summary, Interview questions, Exercises, Glossary and Cleanup each begin their own cell;
    - no bare ``time.sleep(`` anywhere (wait on a condition).
    """
    cells = nb.cells
    at = {name: _section_at(nb, name) for name in SECTIONS}
    problems = [f"no {name!r} heading" for name, i in at.items() if i is None]
    found = [at[name] for name in SECTIONS if at[name] is not None]
    if found != sorted(found):
        problems.append(f"the sections are not in the order {SECTIONS}")
    code = [(i, c.source) for i, c in enumerate(cells) if c.cell_type == "code"]
    if at["Setup"] is not None:
        setup = next((src for i, src in code if i > at["Setup"]), "")
        if "kafkalab.require_cluster(" not in setup:
            problems.append("the Setup cell does not call kafkalab.require_cluster() (fail fast when the cluster is down)")
    body_start = at["Setup"] + 1 if at["Setup"] is not None else 0
    body_end = at["Cleanup"] if at["Cleanup"] is not None else len(cells)
    if not any("assert " in src for i, src in code if body_start < i < body_end):
        problems.append("no assert between Setup and Cleanup: no claim is checked")
    for i, src in code:
        if re.match(r"\s*# Check\b", src) and "assert " not in src:
            problems.append(f"cell {i} is a Check without an assert")
    if at["Interview questions"] is not None:
        text = "\n".join(c.source for c in cells[at["Interview questions"]:] if c.cell_type == "markdown")
        text = re.split(r"^#{1,6}\s+Interview questions.*$", text, maxsplit=1, flags=re.M)[1]
        text = re.split(r"^#{1,2}\s", text, maxsplit=1, flags=re.M)[0]  # up to the next section
        answered = [a for _, a in FOLDED_QA.findall(text) if a.strip()]
        if len(answered) < 3 or text.count("<details>") != len(answered):
            problems.append(f"interview questions: {len(answered)} with an answer folded in <details><summary>, "
                            f"of {text.count('<details>')} <details> (at least 3, every one answered)")
    if at["Cleanup"] is not None and not (code and code[-1][0] == len(cells) - 1 and code[-1][0] > at["Cleanup"]):
        problems.append("the notebook does not end with a cleanup code cell after its Cleanup heading")
    if any("time.sleep(" in src for _, src in code):
        problems.append("a bare time.sleep(: wait on a condition instead")
    for name in END_SECTIONS:  # each its own cell: a workshop jumps to one, a reader folds one
        i = at[name]
        if i is not None and not re.match(rf"#{{1,6}}\s+{re.escape(name)}\b", cells[i].source):
            problems.append(f"the {name!r} heading does not begin its own cell")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_the_house_skeleton(path: Path) -> None:
    problems = skeleton_problems(nbformat.read(path, as_version=4))
    assert not problems, f"{path.name}: " + "; ".join(problems)


def skeleton(**replace: str | None) -> object:
    """A minimal notebook with the whole skeleton; ``replace`` swaps (or with None, drops)
    the cell named by its key."""
    cells = {
        "title": new_markdown_cell("# 99 · A planted notebook\n\n**The question.** Does the check fail?"),
        "setup_md": new_markdown_cell("## Setup"),
        "setup": new_code_cell("import kafkalab\n\nstatus = kafkalab.require_cluster()"),
        "section": new_markdown_cell("## 1. A claim\n\n**Predict.** What happens?"),
        "run": new_code_cell("# Run\nresult = 1 + 1"),
        "check": new_code_cell('# Check\nassert result == 2, "one and one make two"'),
        "summary": new_markdown_cell("## Summary\n\n- it holds"),
        "interview": new_markdown_cell("## Interview questions\n\n" + "\n\n".join(
            f"<details><summary>{n}. Why?</summary>\n\nBecause {n}.\n</details>" for n in (1, 2, 3))),
        "exercises": new_markdown_cell("## Exercises\n\n1. Change it."),
        "glossary": new_markdown_cell("## Glossary (English - 한국어)\n\n| offset | 오프셋 |"),
        "cleanup_md": new_markdown_cell("## Cleanup"),
        "cleanup": new_code_cell("kafkalab.cleanup()"),
    }
    for key, source in replace.items():
        new_cell = new_code_cell if cells[key].cell_type == "code" else new_markdown_cell
        cells[key] = None if source is None else new_cell(source)
    return new_notebook(cells=[c for c in cells.values() if c is not None])


def test_the_planted_skeleton_passes() -> None:
    assert skeleton_problems(skeleton()) == []


@pytest.mark.parametrize("replace, problem", [
    ({"setup": "import kafkalab"}, "require_cluster"),
    ({"setup_md": None}, "no 'Setup' heading"),
    ({"check": "# Check\nprint(result == 2)"}, "a Check without an assert"),
    ({"check": "print(result == 2)"}, "no assert between Setup and Cleanup"),
    ({"interview": "## Interview questions\n\n1. Why?\n2. How?\n3. When?"}, "interview questions: 0"),
    ({"interview": "## Interview questions\n\n<details><summary>1. Why?</summary>\n</details>\n"
                   "<details><summary>2. How?</summary>Like so.</details>"}, "interview questions: 1"),
    ({"cleanup": None}, "does not end with a cleanup code cell"),
    ({"glossary": None}, "no 'Glossary' heading"),
    ({"summary": "## Exercises", "exercises": "## Summary"}, "not in the order"),
    ({"run": "import time\ntime.sleep(5)\nresult = 2"}, "time.sleep"),
    ({"summary": "## Summary\n\n- it holds\n\n## Interview questions\n\n" + "\n\n".join(
        f"<details><summary>{n}. Why?</summary>\n\nBecause {n}.\n</details>" for n in (1, 2, 3)),
      "interview": None}, "'Interview questions' heading does not begin its own cell"),
], ids=["setup-without-require-cluster", "no-setup", "check-without-assert", "no-assert", "questions-unfolded",
        "answer-missing", "no-cleanup-cell", "no-glossary", "sections-out-of-order", "bare-sleep", "end-cells-merged"])
def test_a_planted_bad_notebook_fails_the_skeleton_check(replace: dict, problem: str) -> None:
    problems = skeleton_problems(skeleton(**replace))
    assert any(problem in p for p in problems), problems


# ----------------------------------------------------------------------------- worked solutions

#: ``notebooks/solutions/NN_name_solutions.ipynb``: the worked solutions of lesson ``NN_name``
#: (issue 16). nbval runs them with the lessons; they are not lessons, so the skeleton above
#: does not apply to them.
SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_solution_is_stripped_links_its_lesson_and_starts_from_a_whole_cluster(path: Path) -> None:
    nb = read_stripped(path)
    lesson = path.name.removesuffix("_solutions.ipynb") + ".ipynb"
    assert path.name.endswith("_solutions.ipynb") and (path.parents[1] / lesson).exists(), \
        f"{path.name} is named after a lesson notebook: {lesson} does not exist"
    assert f"](../{lesson})" in nb.cells[0].source, f"{path.name}: the title cell links back to ../{lesson}"
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code and "kafkalab.require_cluster(" in code[0], f"{path.name}: the first code cell calls kafkalab.require_cluster()"
    assert "require_cluster(restore=False)" in code[-1], f"{path.name}: the last cell cleans up and checks the cluster is whole"
    assert not any("time.sleep(" in src for src in code), f"{path.name}: a bare time.sleep(: wait on a condition instead"
