"""The Korean edition (kafkalab.i18n): how text is cut into messages, how catalogs are merged and
filled, and, over the repository, that ``notebooks/ko/`` is complete, current and the same code.

When a test of the second part fails after an English change: ``make ko``, translate the strings
``python -m kafkalab.i18n status`` lists as missing or fuzzy (``show DOC --todo``, ``fill``),
``make ko`` again (the steps are in ``src/kafkalab/i18n.py``).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import nbformat
import pytest

from kafkalab import i18n, quiz

ROOT = Path(__file__).resolve().parents[1]


# --- how text becomes messages (a made-up notebooks/ folder) --------------------------------

def test_blocks_cut_at_blank_lines_and_keep_fenced_code_whole() -> None:
    md = "# Title\n\nOne paragraph\non two lines.\n\n```python\nx = 1\n\ny = 2\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n---"
    got = i18n.blocks(md)
    assert [t for t, _ in got] == ["# Title", "One paragraph\non two lines.", "```python\nx = 1\n\ny = 2\n```",
                                   "| a | b |\n|---|---|\n| 1 | 2 |", "---"]
    assert [ok for _, ok in got] == [True, True, False, True, False]


def test_quiz_strings_are_the_question_and_choices_of_predict_calls() -> None:
    code = ('quiz.predict("k1", "How many " "records?", unit="records")\n'
            'quiz.predict("k2", question="Which one?", choices=["it goes", "it stays"])\n'
            'quiz.check("k1", 3)\nprint("not this")')
    assert i18n.quiz_strings(code) == ["How many records?", "Which one?", "it goes", "it stays"]
    assert i18n.quiz_strings("%%program p\nimport x\n") == []
    assert i18n.quiz_strings("def (") == []


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with one notebook, one solution and the pages, in ``$KAFKALAB_HOME``."""
    nbdir = tmp_path / "notebooks"
    (nbdir / "solutions").mkdir(parents=True)
    (nbdir / "_book").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 01 · Title\n\nSee [the bank](interview_bank.md), [code](../src/x.py)."),
                nbformat.v4.new_code_cell('quiz.predict("k", "How many?", unit="records")'),
                nbformat.v4.new_markdown_cell("## Setup\n\n```bash\nmake lab\n```")]
    nbformat.write(nb, nbdir / "01_x.ipynb")
    sol = nbformat.v4.new_notebook()
    sol.cells = [nbformat.v4.new_markdown_cell("Back to [the lesson](../01_x.ipynb).")]
    nbformat.write(sol, nbdir / "solutions" / "01_x_solutions.ipynb")
    for page in i18n.PAGES:
        (nbdir / page).write_text("## A page\n\nIts text.\n")
    monkeypatch.setenv("KAFKALAB_HOME", str(tmp_path))
    i18n._quiz_cache.clear()
    yield tmp_path
    i18n._quiz_cache.clear()


def test_update_fill_build_and_a_changed_english_string_becomes_fuzzy(home: Path) -> None:
    doc = "01_x.ipynb"
    i18n.update(doc)
    st = i18n.status(doc)
    assert (st.total, len(st.missing), st.fuzzy) == (4, 4, [])
    work = i18n.show(doc)
    assert work.splitlines()[0] == "=== 1" and "=== 3  (quiz)" in work
    assert i18n.fill(doc, "=== 1\n# 01 · 제목\n\n=== 2\n[뱅크](interview_bank.md), [코드](../src/x.py) 참고.\n"
                          "=== 3\n몇 개일까?\n=== 4\n## 준비\n") == 4
    assert i18n.status(doc).done
    text, missing = i18n.render(doc)
    assert missing == []
    nb = nbformat.reads(text, 4)
    assert nb.cells[0].source == "# 01 · 제목\n\n[뱅크](interview_bank.md), [코드](../../src/x.py) 참고."
    assert nb.cells[1].source == 'quiz.predict("k", "How many?", unit="records")'  # code: as it is
    assert nb.cells[2].source == "## 준비\n\n```bash\nmake lab\n```"
    assert i18n.quiz_text("How many?", "ko") == "몇 개일까?" and i18n.quiz_text("How many?", "en") == "How many?"

    path = home / "notebooks" / doc
    nb = nbformat.read(path, 4)
    nb.cells[2].source = "## Set up\n\n```bash\nmake lab\n```"
    nbformat.write(nb, path)
    i18n.update(doc)
    st = i18n.status(doc)
    assert st.fuzzy == ["## Set up"] and st.missing == []
    assert i18n.render(doc)[1] == ["## Set up"]  # a fuzzy translation is not used: the English shows
    assert "=== 4\n## Set up" in i18n.show(doc, only_todo=True)
    i18n.fill(doc, "=== 4\n## 준비하기\n")
    assert i18n.status(doc).done and "#, fuzzy" not in i18n.catalog_path(doc).read_text()


def test_links_between_translated_documents_stay_and_others_reach_the_english(home: Path) -> None:
    i18n.update("solutions/01_x_solutions.ipynb")
    text, _ = i18n.render("solutions/01_x_solutions.ipynb")
    assert "](../01_x.ipynb)" in text  # notebooks/ko/solutions -> notebooks/ko/01_x.ipynb


def test_fill_refuses_a_number_that_is_not_a_string_and_an_empty_translation(home: Path) -> None:
    with pytest.raises(ValueError, match="string 9 does not exist"):
        i18n.fill("01_x.ipynb", "=== 9\n무엇\n")
    with pytest.raises(ValueError, match="empty translation"):
        i18n.fill("01_x.ipynb", "=== 1\n\n")


def test_the_quiz_speaks_korean_in_a_notebook_under_notebooks_ko(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    i18n.update("01_x.ipynb")
    i18n.fill("01_x.ipynb", "=== 3\n몇 개일까?\n")
    (home / "notebooks" / "ko").mkdir()
    monkeypatch.chdir(home / "notebooks" / "ko")
    assert i18n.language_of() == "ko"
    p = quiz.predict("k", "How many?", unit="records", show=False)
    assert p.text(p.question) == "몇 개일까?"
    assert "클러스터 측정값은 3 records" in quiz.check("k", 3, show=False).message
    monkeypatch.chdir(home / "notebooks")
    assert i18n.language_of() == "en"
