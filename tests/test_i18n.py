"""The Korean edition (kafkalab.i18n): how text is cut into messages, how catalogs are merged and
filled, and, over the repository, that ``notebooks/ko/`` is complete, current and the same code.

When a test of the second part fails after an English change: ``make ko``, translate the strings
``kafkalab i18n status`` lists as missing or fuzzy (``show DOC --todo``, ``fill``),
``make ko`` again (the steps are in ``src/kafkalab/i18n.py``).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import os

import nbformat
import pytest

from kafkalab import i18n, quiz


def signed(doc: str, work: str) -> str:
    """``work`` with each ``=== N`` line checked against string N's English as ``show`` writes it."""
    msgs = i18n.unique_messages(doc)
    return re.sub(r"^(=== (\d+)(?:\s+\((?:quiz|comment)\))?)\s*$",
                  lambda m: f"{m.group(1)}  #{i18n.english_check(msgs[int(m.group(2)) - 1].text)}", work, flags=re.M)

ROOT = Path(__file__).resolve().parents[1]


# --- how text becomes messages (a made-up notebooks/ folder) --------------------------------

def test_blocks_cut_at_blank_lines_and_keep_fenced_code_whole() -> None:
    md = "# Title\n\nOne paragraph\non two lines.\n\n```python\nx = 1\n\ny = 2\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n---"
    got = i18n.blocks(md)
    assert [t for t, _ in got] == ["# Title", "One paragraph\non two lines.", "```python\nx = 1\n\ny = 2\n```",
                                   "| a | b |\n|---|---|\n| 1 | 2 |", "---"]
    assert [ok for _, ok in got] == [True, True, False, True, False]
    assert i18n.blocks("```{toctree}\n:caption: Notebooks\n\n/[0-9]*\n```") == [
        ("```{toctree}\n:caption: Notebooks\n\n/[0-9]*\n```", True)]  # its caption is shown


def test_quiz_strings_are_the_question_and_choices_of_predict_calls() -> None:
    code = ('quiz.predict("k1", "How many " "records?", unit="records")\n'
            'quiz.predict("k2", question="Which one?", choices=["it goes", "it stays"])\n'
            'quiz.check("k1", 3)\nprint("not this")')
    assert i18n.quiz_strings(code) == ["How many records?", "records", "Which one?", "it goes", "it stays"]
    assert i18n.quiz_strings("%%program p\nimport x\n") == []
    names = i18n.string_lists('ANSWERS = ["NONE: it commits", "it aborts"]\nx = [1]')
    assert names == {"ANSWERS": ["NONE: it commits", "it aborts"]}
    assert i18n.quiz_strings('quiz.predict("k", "What?", ANSWERS)', names) == ["What?", "NONE: it commits", "it aborts"]
    assert i18n.quiz_strings("def (") == []


def test_a_list_is_cut_into_items_with_their_nested_lines() -> None:
    qa = "1. Why?\n   <details>Because.</details>\n2. How?\n   - one way\n   - another\n3. When?"
    assert i18n.list_items(qa) == ["1. Why?\n   <details>Because.</details>", "2. How?\n   - one way\n   - another", "3. When?"]
    assert i18n.list_items("- a\n- b") == ["- a", "- b"]
    assert i18n.list_items("Topics:\n- a\n- b") == ["Topics:\n- a\n- b"]  # not a list block: whole
    assert i18n.list_items("1. one item\n   over two lines") == ["1. one item\n   over two lines"]


def test_an_edit_in_one_list_item_reopens_only_that_item(home: Path) -> None:
    doc = "solutions/01_x_solutions.ipynb"
    path = home / "notebooks" / doc
    nb = nbformat.read(path, 4)
    nb.cells.append(nbformat.v4.new_markdown_cell("1. First question?\n   Its answer.\n2. Second question?\n3. Third?"))
    nbformat.write(nb, path)
    i18n.update(doc)
    assert i18n.fill(doc, signed(doc, "=== 1\n[과제](../01_x.ipynb)로 돌아간다.\n=== 2\n1. 첫 질문?\n   그 답.\n"
                                      "=== 3\n2. 둘째 질문?\n=== 4\n3. 셋째?\n")) == 4
    assert nbformat.reads(i18n.render(doc)[0], 4).cells[1].source == "1. 첫 질문?\n   그 답.\n2. 둘째 질문?\n3. 셋째?"
    nb.cells[1].source = nb.cells[1].source.replace("Second question?", "The second question?")
    nbformat.write(nb, path)
    i18n.update(doc)
    st = i18n.status(doc)
    assert st.fuzzy == ["2. The second question?"] and st.missing == []
    assert nbformat.reads(i18n.render(doc)[0], 4).cells[1].source == "1. 첫 질문?\n   그 답.\n2. The second question?\n3. 셋째?"


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
    assert (st.total, len(st.missing), st.fuzzy) == (5, 5, [])
    work = i18n.show(doc)
    first = i18n.unique_messages(doc)[0].text
    assert work.splitlines()[0] == f"=== 1  #{i18n.english_check(first)}" and "=== 3  (quiz)  #" in work
    assert i18n.fill(doc, signed(doc, "=== 1\n# 01 · 제목\n\n=== 2\n[뱅크](interview_bank.md), [코드](../src/x.py) 참고.\n"
                          "=== 3  (quiz)\n몇 개일까?\n=== 4  (quiz)\n레코드\n=== 5\n## 준비\n")) == 5  # as `show` writes it
    assert i18n.status(doc).done
    text, missing = i18n.render(doc)
    assert missing == []
    nb = nbformat.reads(text, 4)
    assert nb.cells[0].source == f"# 01 · 제목\n\n{i18n.generated_note(doc)}\n\n[뱅크](interview_bank.md), [코드](../../src/x.py) 참고."
    assert "notebooks/locale/ko/LC_MESSAGES/01_x.po: edit the .po" in i18n.generated_note(doc)
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
    assert f"=== 5  #{i18n.english_check('## Set up')}\n## Set up" in i18n.show(doc, only_todo=True)
    i18n.update(doc)  # read and written again: the previous English stays a `#|` line, not a comment
    po = i18n.catalog_path(doc).read_text()
    assert '#| msgid "## Setup"' in po and "# |" not in po and i18n.status(doc).fuzzy == ["## Set up"]
    i18n.fill(doc, signed(doc, "=== 5\n## 준비하기\n"))
    po = i18n.catalog_path(doc).read_text()
    assert i18n.status(doc).done and "#, fuzzy" not in po and "#|" not in po and "# |" not in po


def test_links_between_translated_documents_stay_and_others_reach_the_english(home: Path) -> None:
    i18n.update("solutions/01_x_solutions.ipynb")
    text, _ = i18n.render("solutions/01_x_solutions.ipynb")
    assert "](../01_x.ipynb)" in text  # notebooks/ko/solutions -> notebooks/ko/01_x.ipynb


def test_fill_refuses_a_number_that_is_not_a_string_and_an_empty_translation(home: Path) -> None:
    with pytest.raises(ValueError, match="string 9 does not exist"):
        i18n.fill("01_x.ipynb", "=== 9\n무엇\n")
    with pytest.raises(ValueError, match="empty translation"):
        i18n.fill("01_x.ipynb", "=== 1\n\n")


def test_fill_refuses_a_string_without_its_check_and_one_whose_english_moved(home: Path) -> None:
    """A work file made before an English paragraph was inserted above a string numbers that
    string one too low: ``fill`` refuses the whole file and no translation lands on another string."""
    doc = "01_x.ipynb"
    i18n.update(doc)
    with pytest.raises(ValueError, match="string 5 has no check of its English"):
        i18n.fill(doc, "=== 5\n## 준비\n")
    old_work = signed(doc, "=== 1\n# 01 · 제목\n=== 5\n## 준비\n")
    path = home / "notebooks" / doc
    nb = nbformat.read(path, 4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("A new paragraph before the rest."))
    nbformat.write(nb, path)
    i18n.update(doc)
    texts = [m.text for m in i18n.unique_messages(doc)]
    assert texts.index("A new paragraph before the rest.") < texts.index("## Setup") == 5, "string 5 moved to 6"
    with pytest.raises(ValueError, match="string 5 is no longer the English"):
        i18n.fill(doc, old_work)
    assert i18n.status(doc).missing == texts, "nothing was set"
    assert i18n.fill(doc, signed(doc, "=== 1\n# 01 · 제목\n=== 6\n## 준비\n")) == 2
    cat = i18n.read_catalog(doc)
    assert i18n.lookup(cat, "## Setup") == "## 준비" and i18n.lookup(cat, "A new paragraph before the rest.") is None

    nb.cells.insert(3, nbformat.v4.new_markdown_cell("Another new paragraph, right before the translated heading."))
    nbformat.write(nb, path)
    i18n.update(doc)  # a translation is found by its English, not by its place: nothing shifts
    text, missing = i18n.render(doc)
    cells = nbformat.reads(text, 4).cells
    assert cells[3].source == "Another new paragraph, right before the translated heading."
    assert cells[4].source.startswith("## 준비\n") and cells[0].source.startswith("# 01 · 제목\n")
    assert "Another new paragraph, right before the translated heading." in missing and "## Setup" not in missing


PROGRAM = ('%%program p\n'
           'from confluent_kafka import Producer  # the client\n'
           '\n'
           '# Two lines of\n'
           '# one comment.\n'
           '#\n'
           '# A second paragraph.\n'
           'url = "http://x/#not-a-comment"\n'
           'def f():\n'
           '    # indented\n'
           '    return 1  # noqa: E501\n')


def test_code_comments_are_found_by_tokenize_and_runs_of_lines_are_one_message() -> None:
    got = [(c.text, c.first, c.last, c.col, c.trailing) for c in i18n.code_comments(PROGRAM)]
    assert got == [("the client", 1, 1, 38, True), ("Two lines of\none comment.\n\nA second paragraph.", 3, 6, 0, False),
                   ("indented", 9, 9, 4, False)]  # not the "#" in a string, not a tool's "# noqa"
    assert i18n.code_comments('x = """\n# inside a string\n"""\n') == []
    assert i18n.code_comments("def (:\n  'unterminated") == []  # does not tokenize: nothing to translate


def test_translated_comments_leave_every_other_token_as_it_was() -> None:
    from babel.messages.catalog import Catalog

    cat = Catalog(locale="ko")
    cat.add("the client", "클라이언트", context=i18n.COMMENT_CONTEXT)
    cat.add("Two lines of\none comment.\n\nA second paragraph.", "한 주석의\n두 줄.\n\n두 번째 문단.", context=i18n.COMMENT_CONTEXT)
    missing: list[str] = []
    ko = i18n.translate_comments(PROGRAM, cat, missing)
    assert ko.splitlines()[1:8] == ['from confluent_kafka import Producer  # 클라이언트', "", "# 한 주석의", "# 두 줄.", "#",
                                    "# 두 번째 문단.", 'url = "http://x/#not-a-comment"']
    assert missing == ["indented"] and "    # indented\n" in ko and ko.endswith("# noqa: E501\n")
    assert i18n.code_tokens(ko) == i18n.code_tokens(PROGRAM)
    assert i18n.code_tokens(ko.replace("Producer", "Consumer")) != i18n.code_tokens(PROGRAM)


def test_the_quiz_speaks_korean_in_a_notebook_under_notebooks_ko(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    i18n.update("01_x.ipynb")
    i18n.fill("01_x.ipynb", signed("01_x.ipynb", "=== 3\n몇 개일까?\n=== 4\n레코드 {n}개\n"))
    (home / "notebooks" / "ko").mkdir()
    monkeypatch.chdir(home / "notebooks" / "ko")
    assert i18n.language_of() == "ko"
    p = quiz.predict("k", "How many?", unit="records", show=False)
    assert p.text(p.question) == "몇 개일까?"
    assert quiz.check("k", 3, show=False).message == "클러스터 측정값: 레코드 3개. (기록한 예측이 없다.)"
    monkeypatch.chdir(home / "notebooks")
    assert i18n.language_of() == "en"


# --- the repository's Korean edition ----------------------------------------------------------

DOCS = i18n.documents()


def _terms() -> list[dict[str, str]]:
    lines = [line for line in (ROOT / "notebooks" / "locale" / "ko" / "terms.tsv").read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


@pytest.mark.parametrize("doc", DOCS)
def test_every_string_is_translated_and_current(doc: str) -> None:
    st = i18n.status(doc)
    assert st.done, (f"{doc}: {len(st.missing)} strings untranslated, {len(st.fuzzy)} fuzzy (the English changed). "
                     f"`make ko`, then translate them: `.venv/bin/kafkalab i18n show {doc} --todo`, "
                     f"`... fill {doc} FILE`, `make ko`. First: {(st.missing + st.fuzzy)[0][:200]!r}")


def test_no_translation_holds_a_work_file_separator() -> None:
    """``fill`` cuts a work file at ``=== N`` lines: one left inside a translation means two
    strings were stored as one."""
    bad = [f"{d}: {e.id[:60]!r}" for d in DOCS for e in i18n.read_catalog(d)
           if e.id and e.string and re.search(r"^=== \d+", e.string, re.M)]
    assert not bad, "translations with a `=== N` line inside:\n" + "\n".join(bad)


def test_every_catalog_is_well_formed_po() -> None:
    """Each string line is one quoted line, and no stale previous-English comment is left.
    Babel's ``read_po`` reads a string broken by a raw line break without an error but drops
    text at each break (a catalog written by hand once lost a word per line); ``# | msgid``
    comments are previous English read back as comments (``i18n._previous_from_comments``)."""
    bad = []
    for doc in DOCS:
        path = i18n.catalog_path(doc)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if (line.startswith('"') and (len(line) < 2 or not line.endswith('"'))) or line.startswith("# |"):
                bad.append(f"{path.name}:{n}: {line[:60]}")
    assert not bad, "malformed catalog lines (write catalogs with kafkalab i18n, not by hand):\n" + "\n".join(bad)


def test_no_catalog_marks_a_string_as_a_format_string() -> None:
    """``msgfmt -c`` checks a ``python-format`` string's translation as a format string and fails
    on prose such as "20%의"; Babel flags such a string by itself when it reads or merges a
    catalog, and ``i18n.write_catalog`` drops the flag."""
    bad = [f"{doc}:{n}" for doc in DOCS
           for n, line in enumerate(i18n.catalog_path(doc).read_text(encoding="utf-8").splitlines(), 1)
           if line.startswith("#,") and "python-format" in line]
    assert not bad, "python-format flags (write catalogs with kafkalab i18n):\n" + "\n".join(bad)


@pytest.mark.subprocess
def test_msgfmt_check_passes_on_every_catalog() -> None:
    """GNU gettext's ``msgfmt -c`` (what a translator's tools run) accepts every catalog with no
    warning. gettext is a system package: install it (Debian ``apt install gettext``, macOS
    ``brew install gettext``) to run this check."""
    import shutil
    import subprocess

    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        if os.environ.get("CI"):
            pytest.fail("msgfmt (GNU gettext) is not on PATH on CI")
        pytest.skip("msgfmt (GNU gettext) is not on PATH: apt install gettext / brew install gettext")
    out = []
    for doc in DOCS:
        r = subprocess.run([msgfmt, "-c", "-o", os.devnull, str(i18n.catalog_path(doc))], capture_output=True, text=True)
        if r.returncode or r.stderr.strip():
            out.append(r.stderr.strip() or f"{doc}: exit {r.returncode}")
    assert not out, "\n".join(out)


@pytest.mark.parametrize("doc", DOCS)
def test_notebooks_ko_is_what_the_catalogs_give(doc: str) -> None:
    path = i18n.edition_path(doc)
    assert path.exists(), f"{path} is missing: run `make ko`"
    assert path.read_text(encoding="utf-8") == i18n.render(doc)[0], f"{path} is not current: it is generated; edit {i18n.catalog_path(doc)} (or the English), then run `make ko`"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.endswith(".ipynb")])
def test_a_korean_notebook_has_the_english_code(doc: str) -> None:
    en = nbformat.read(ROOT / "notebooks" / doc, 4)
    ko = nbformat.read(i18n.edition_path(doc), 4)
    assert [c.cell_type for c in ko.cells] == [c.cell_type for c in en.cells]
    en_code = [c.source for c in en.cells if c.cell_type == "code"]
    ko_code = [c.source for c in ko.cells if c.cell_type == "code"]
    for i, (e, k) in enumerate(zip(en_code, ko_code)):  # only comments may differ: the programs run the same
        assert i18n.code_tokens(k) == i18n.code_tokens(e), f"{doc}: code cell {i} differs from the English beyond its comments"
    if any(i18n.code_comments(e) for e in en_code):
        assert ko_code != en_code, f"{doc}: no code comment is in Korean"
    assert ko.metadata == en.metadata
    prose = "".join(c.source for c in ko.cells if c.cell_type == "markdown")
    assert len(re.findall("[가-힣]", prose)) > len(prose) / 10, f"{doc}: the Korean notebook's text is not Korean"


def _korean_texts() -> dict[str, str]:
    """Every translation by catalog, and the English notebooks (their glossaries' Korean column);
    an article's own title in 「」 is left out (it is quoted as written)."""
    texts = {f"locale/{d}": "\n".join(e.string for e in i18n.read_catalog(d) if e.id and e.string) for d in DOCS}
    texts.update({d: (ROOT / "notebooks" / d).read_text(encoding="utf-8") for d in DOCS if d.endswith(".ipynb")})
    return {where: re.sub("「[^」]*」", "", text) for where, text in texts.items()}


def test_no_gloss_is_nested_in_parentheses_or_doubled() -> None:
    """An English gloss inside a parenthesis, or a parenthesis right after a gloss, reads as noise:
    ``(정적 멤버십(static membership), KIP-345)`` is written ``(정적 멤버십, static membership, KIP-345)``."""
    nested = re.compile(r"\([^()\n]*[가-힣]\*{0,2}\([A-Za-z][A-Za-z -]*\)[^()\n]*\)|[가-힣]\([A-Za-z][A-Za-z -]*\)\(")
    bad = [f"{d}: {m.group(0)!r}" for d in DOCS for e in i18n.read_catalog(d) if e.id and e.string
           for m in nested.finditer(re.sub(r"`[^`\n]*`", "``", e.string))]
    assert not bad, "\n".join(bad)
    assert nested.search("(정적 멤버십(static membership), KIP-345)") and not nested.search("(정적 멤버십, static membership)")


def test_a_translated_list_item_keeps_its_marker() -> None:
    """A list item's translation starts with the English item's marker (``2.``, ``-``): the
    Korean list keeps its numbering and its shape."""
    bad = []
    for d in DOCS:
        for e in i18n.read_catalog(d):
            m = i18n._ITEM.match(e.id) if e.id and e.string and not e.context else None
            if m and not e.string.startswith(m.group(1) + m.group(2)):
                bad.append(f"{d}: {e.id[:50]!r} -> {e.string[:50]!r}")
    assert not bad, "list items translated without their marker:\n" + "\n".join(bad)


def test_one_english_comment_or_quiz_string_has_one_korean_wording() -> None:
    """A code comment or quiz string that several notebooks share ("plotting", "fails in seconds ...")
    reads the same in each Korean notebook."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for d in DOCS:
        for e in i18n.read_catalog(d):
            if e.id and e.string and e.context in (i18n.COMMENT_CONTEXT, i18n.QUIZ_CONTEXT):
                seen.setdefault((e.context, e.id), {}).setdefault(e.string, d)
    bad = [f"{ctx} {en[:60]!r}: " + " | ".join(f"{d}: {ko[:40]!r}" for ko, d in kos.items())
           for (ctx, en), kos in seen.items() if len(kos) > 1]
    assert not bad, f"{len(bad)} strings worded differently in different notebooks:\n" + "\n".join(bad)


def test_one_korean_spelling_per_term() -> None:
    """No spelling of terms.tsv's "avoid" column in any translation, nor in the English notebooks'
    glossaries (their Korean column). An avoid entry ``re:PATTERN`` is a regular expression, matched
    outside code spans (``500ms``: write ``500 ms``; an exercise's ``~하라``: write ``~해 보자``)."""
    avoid = {a: t["korean"] for t in _terms() for a in (t["avoid"] or "").split("|") if a}
    found = []
    for where, text in _korean_texts().items():
        prose = re.sub(r"`[^`\n]*`", "``", text)
        for bad, good in avoid.items():
            if bad.startswith("re:"):
                hits = [m.group(0) for m in re.finditer(bad[3:], prose, re.M)] if where.startswith("locale/") else []
                found += [f"{where}: {hit!r} (write {good!r})" for hit in sorted(set(hits))]
            elif bad in text:
                found.append(f"{where}: {bad!r} (write {good!r})")
    assert not found, "spellings terms.tsv says not to use:\n" + "\n".join(found)


def test_the_spellings_terms_tsv_avoids_are_still_caught() -> None:
    """The check above finds each kind of spelling it bans (a literal, and each pattern)."""
    rows = {t["english"]: t for t in _terms()}
    patterns = [a[3:] for t in _terms() for a in (t["avoid"] or "").split("|") if a.startswith("re:")]
    assert any(re.search(p, "대기 시간은 500ms다.") for p in patterns)
    assert any(re.search(p, "로그의 순서를 예측하라.") for p in patterns)
    assert not any(re.search(p, "500 ms 뒤에 레코드의 순서를 예측해 보자. 규칙에 따라, 아니라.") for p in patterns)
    assert any(re.search(p, "레코드마다 확인 응답을 받는다.") for p in patterns)
    assert not any(re.search(p, "처음 나올 때만 ack(확인 응답)라고 풀어 쓴다.") for p in patterns)
    assert "어보트" in rows["abort"]["avoid"].split("|")


@pytest.mark.parametrize("doc", [d for d in DOCS if d.endswith(".md")])
def test_links_to_headings_of_a_korean_page_resolve(doc: str) -> None:
    from myst_parser.slugs import github_slugify

    text = i18n.edition_path(doc).read_text(encoding="utf-8")
    slugs = {github_slugify(m.group(1).strip()) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}
    broken = sorted({a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in slugs})
    assert not broken, f"notebooks/ko/{doc}: links to no heading: {broken}"


def test_every_article_box_gives_the_article_and_its_lines() -> None:
    """Issue 27: a Korean reader finds the sentence being corrected. Each block (quote) that says
    what an article says names the article (000-004) and its line numbers."""
    bad = []
    for doc in [d for d in DOCS if d.endswith(".ipynb")]:
        nb = nbformat.read(ROOT / "notebooks" / doc, 4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            for text, _ in i18n.blocks(cell.source):
                if "The article says" in text and not (re.search(r"\b00[0-4]\b", text)
                                                       and re.search(r"\blines? \d+", text)):
                    bad.append(f"{doc} [{i}]: {text[:90]!r}")
    assert not bad, f"{len(bad)} boxes without the article's number and line numbers:\n" + "\n".join(bad)


def test_emphasis_in_a_translation_renders() -> None:
    """CommonMark closes ``**`` only when it is right-flanking: ``**오프셋(LSO)**은`` (a closing
    parenthesis, then a Hangul particle) shows its asterisks as text. Each translation is parsed
    with markdown-it (MyST's parser) and no ``*`` may be left in its text where the English has
    none; write ``**오프셋**(LSO)은``."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")

    def stray(text: str) -> list[str]:
        return [c.content for t in md.parse(text) if t.type == "inline" for c in t.children
                if c.type == "text" and re.search(r"\*\*|(?<![\w*])\*(?=\S)[^*]+\*(?!\*)", c.content)]

    bad = [f"{d}: {stray(e.string)[0][:120]!r}" for d in DOCS for e in i18n.read_catalog(d)
           if e.id and e.string and stray(e.string) and not stray(e.id)]
    assert not bad, "emphasis shown as asterisks:\n" + "\n".join(bad)


def test_the_korean_bank_names_sections_as_the_korean_notebooks_title_them() -> None:
    """Each ``근거`` (evidence) line of the Korean interview bank names sections by the headings
    of the Korean notebook it links (the English bank's test does the same for the English)."""
    ko = ROOT / "notebooks" / "ko"

    def headings(path: Path) -> set[str]:
        nb = nbformat.read(path, 4)
        return {m.group(1).strip() for c in nb.cells if c.cell_type == "markdown"
                for m in re.finditer(r"^#{1,6} (.+)$", c.source, re.M)}

    bad, seen = [], 0
    for line in (ko / "interview_bank.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("근거"):
            continue
        for name, tail in re.findall(r"\]\(([^)]+\.ipynb)\)([^\[]*)", line):
            titles = headings(ko / name)
            for section in re.findall(r'"([^"]+)"', tail):
                seen += 1
                if section not in titles:
                    bad.append(f"{name}: {section!r}")
    assert seen > 50, f"only {seen} sections named: the evidence lines were not read"
    assert not bad, "sections that are no heading of the Korean notebook:\n" + "\n".join(bad)


def test_the_command_line(home: Path, tmp_path: Path) -> None:
    """``kafkalab i18n``: update, show, fill, status (exit 1 until done), build; bad input is a
    clear error, not a traceback."""
    from click.testing import CliRunner

    from kafkalab.cli import main

    run = CliRunner().invoke
    assert run(main, ["i18n", "update"]).exit_code == 0
    r = run(main, ["i18n", "status", "01_x.ipynb"])
    assert r.exit_code == 1 and "missing   5" in r.output
    assert f"=== 3  (quiz)  #{i18n.english_check('How many?')}\nHow many?" in run(main, ["i18n", "show", "01_x.ipynb", "--todo"]).output
    work = tmp_path / "w.txt"
    work.write_text("=== 9\n무엇\n")
    r = run(main, ["i18n", "fill", "01_x.ipynb", str(work)])
    assert r.exit_code == 1 and "string 9 does not exist (1..5)" in r.output
    r = run(main, ["i18n", "status", "nope.ipynb"])
    assert r.exit_code == 2 and "not a translated document: ['nope.ipynb']" in r.output
    work.write_text(signed("01_x.ipynb", "=== 1\n# 01 · 제목\n=== 2\n뱅크\n=== 3\n몇 개일까?\n=== 4\n레코드\n=== 5\n## 준비\n"))
    assert run(main, ["i18n", "fill", "01_x.ipynb", str(work)]).output.strip() == "01_x.ipynb: 5 strings set"
    assert run(main, ["i18n", "status", "01_x.ipynb"]).exit_code == 0
    assert run(main, ["i18n", "build", "01_x.ipynb"]).exit_code == 0
    assert (home / "notebooks" / "ko" / "01_x.ipynb").exists()
    assert run(main, ["i18n", "slug", "2. 토픽: 항공편"]).output.strip() == "2-토픽-항공편"
