"""``notebooks/interview_bank.md`` gathers the interview questions of every notebook on one page,
grouped by topic. These checks keep it in step with the notebooks: every question is there, each
with a level, its evidence links point to real notebooks and sections, and every ``kafkalab run``
command it prints is a registered command with options that exist, and so is every one of the
workshop guide (notebooks/workshop_guide.md); the Korean bank asks each question in the Korean
notebook's words. Pure Python: no cluster, no network, no notebook is run."""

from __future__ import annotations

import html
import re
import shlex
from pathlib import Path

import click
import nbformat
import pytest

import kafkalab.cli

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
BANK = NOTEBOOK_DIR / "interview_bank.md"
#: The Korean edition (generated from notebooks/locale/ko/ by ``kafkalab i18n build``).
KO_DIR = NOTEBOOK_DIR / "ko"

LEVELS = ("basic", "intermediate", "advanced")
NO_COMMAND = "Reproduce: run the notebook section (no single command)"

#: The interview section of a notebook: from its heading to the next level-2 heading.
INTERVIEW_HEADING = re.compile(r"^## Interview questions[ \t]*$", re.M)
#: The same heading in the Korean edition.
KO_INTERVIEW_HEADING = re.compile(r"^## 면접 질문[ \t]*$", re.M)
NEXT_SECTION = re.compile(r"^## ", re.M)
#: A numbered list item at the start of a line, up to the next one (items span several lines).
LIST_ITEM = re.compile(r"^(\d+)\.[ \t]+(.*?)(?=^\d+\.[ \t]|\Z)", re.M | re.S)
#: The other house form: the numbered question is the summary of the folded answer.
SUMMARY_ITEM = re.compile(r"<details>\s*<summary>\s*(\d+)\.\s+(.*?)</summary>", re.S)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`]+)`")


def normalize(text: str) -> str:
    """Markdown text as it reads: ``<code>x</code>`` and ```x``` alike, no bold markers, HTML
    entities decoded, every run of whitespace one space."""
    text = re.sub(r"<code>(.*?)</code>", r"`\1`", text, flags=re.S)
    text = html.unescape(text.replace("**", ""))
    return " ".join(text.split())


def interview_questions(nb, heading_re: re.Pattern = INTERVIEW_HEADING) -> dict[int, str]:
    """Question number -> question text (normalized) of the notebook's "## Interview questions"
    (the section whose heading ``heading_re`` matches: ``KO_INTERVIEW_HEADING`` for a Korean one)."""
    found: dict[int, str] = {}
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        heading = heading_re.search(cell.source)
        if heading is None:
            continue
        section = cell.source[heading.end():]
        end = NEXT_SECTION.search(section)
        section = section[:end.start()] if end else section
        for m in LIST_ITEM.finditer(section):
            question, details, _ = m.group(2).partition("<details>")
            if details:
                found[int(m.group(1))] = normalize(question)
        for m in SUMMARY_ITEM.finditer(section):
            found[int(m.group(1))] = normalize(m.group(2))
    return found


def all_questions() -> list[tuple[str, int, str]]:
    """(notebook file name, number, question) for every interview question of every notebook."""
    out = []
    for path in NOTEBOOKS:
        for number, question in sorted(interview_questions(nbformat.read(path, as_version=4)).items()):
            out.append((path.name, number, question))
    return out


def bank_text() -> str:
    return BANK.read_text(encoding="utf-8")


def bank_entries(text: str | None = None) -> list[str]:
    """The bank's question entries (of ``text``, the English bank by default): each "### " heading
    with everything up to the next heading."""
    return re.findall(r"^### .*?(?=^#{2,3} |\Z)", bank_text() if text is None else text, re.M | re.S)


def entry_lines(entry: str, prefix: str) -> list[str]:
    return [line for line in entry.splitlines() if line.startswith(prefix)]


def entry_for(question: str) -> str:
    """The one bank entry whose heading is ``question``."""
    matches = [e for e in bank_entries() if normalize(e.splitlines()[0][4:]) == question]
    assert len(matches) == 1, f"{len(matches)} bank entries are headed {question!r}"
    return matches[0]


def section_headings(path: Path) -> set[str]:
    nb = nbformat.read(path, as_version=4)
    return {line[3:].strip() for c in nb.cells if c.cell_type == "markdown"
            for line in c.source.splitlines() if line.startswith("## ")}


def github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


QUESTIONS = all_questions()


# ----------------------------------------------------------------------------- extraction


def test_every_notebook_has_interview_questions_numbered_from_one() -> None:
    assert len(NOTEBOOKS) >= 11, [p.name for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        numbers = [n for name, n, _ in QUESTIONS if name == path.name]
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 3, \
            f"{path.name}: interview questions numbered {numbers}"
    assert all(q and "<details>" not in q and "<summary>" not in q for _, _, q in QUESTIONS)


def test_extraction_reads_both_house_forms_and_questions_over_several_lines() -> None:
    section = (
        "## Interview questions\n\n"
        "1. **A question that goes on\n   over two lines?**\n"
        "   <details><summary>Answer</summary>It does. 2. Not a question.</details>\n"
        "2. A plain one with <code>acks=all</code>?\n   <details><summary>Answer</summary>Yes.</details>\n\n"
        "## Exercises\n\n1. Not an interview question.\n"
    )
    folded = ("## Interview questions\n\n<details><summary>1. Folded\nquestion?</summary>\n\nAnswer.\n"
              "</details>\n\n## Exercises\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(section)])
    assert interview_questions(nb) == {1: "A question that goes on over two lines?",
                                       2: "A plain one with `acks=all`?"}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(folded)])
    assert interview_questions(nb) == {1: "Folded question?"}


# ----------------------------------------------------------------------------- the bank


def test_the_bank_holds_every_interview_question_of_every_notebook() -> None:
    bank = normalize(bank_text())
    missing = [f"{name} #{n}: {q}" for name, n, q in QUESTIONS if q not in bank]
    assert not missing, "questions missing from interview_bank.md:\n" + "\n".join(missing)


def test_the_bank_has_one_entry_per_question_and_no_other() -> None:
    headings = sorted(normalize(e.splitlines()[0][4:]) for e in bank_entries())
    assert headings == sorted(q for _, _, q in QUESTIONS)


@pytest.mark.parametrize("name,number,question", QUESTIONS, ids=[f"{n[:2]}-q{i}" for n, i, _ in QUESTIONS])
def test_each_question_has_a_level_an_answer_its_notebooks_evidence_and_a_reproduce_line(
        name: str, number: int, question: str) -> None:
    entry = entry_for(question)
    levels = [m.group(1) for line in entry_lines(entry, "Level:")
              for m in [re.match(r"Level: (basic|intermediate|advanced)\b", line)] if m]
    assert len(levels) == 1 and levels[0] in LEVELS, f"{name} #{number}: one level marker of {LEVELS}"
    assert f"notebook {name[:2]}, question {number}" in entry, f"{name} #{number}: the entry names its source"
    evidence = entry_lines(entry, "Evidence:")
    assert len(evidence) == 1 and f"]({name})" in evidence[0], \
        f"{name} #{number}: one Evidence line, linking to {name}"
    assert len(entry_lines(entry, "Reproduce:")) == 1, f"{name} #{number}: one Reproduce line"
    body = [line for line in entry.splitlines()[1:] if line.strip()
            and not line.startswith(("Level:", "Evidence:", "Reproduce:"))]
    assert 2 <= len(body) <= 4, f"{name} #{number}: the answer takes 2-4 lines, not {len(body)}"


def test_every_relative_notebook_link_points_to_an_existing_file() -> None:
    targets = [t for _, t in LINK.findall(bank_text()) if not t.startswith(("#", "http://", "https://"))]
    assert targets, "the bank links to notebooks"
    missing = [t for t in targets if not (NOTEBOOK_DIR / t.split("#")[0]).is_file()]
    assert not missing, f"links to files that do not exist: {missing}"


def test_every_evidence_section_is_a_heading_of_the_notebook_it_follows() -> None:
    problems = []
    for line in bank_text().splitlines():
        if not line.startswith("Evidence:"):
            continue
        links = list(LINK.finditer(line))
        assert links, f"an Evidence line without a notebook link: {line}"
        for link, nxt in zip(links, links[1:] + [None]):
            tail = line[link.end():nxt.start() if nxt else len(line)]
            sections = re.findall(r'section "([^"]+)"', tail)
            headings = section_headings(NOTEBOOK_DIR / link.group(2))
            if not sections:
                problems.append(f"no section named after {link.group(2)}: {line}")
            problems += [f"{link.group(2)} has no section {s!r}" for s in sections if s not in headings]
    assert not problems, "\n".join(problems)


def test_the_header_counts_the_questions_and_each_topic() -> None:
    text = bank_text()
    total = re.search(r"holds all (\d+) interview questions", text)
    assert total and int(total.group(1)) == len(QUESTIONS), \
        f"the header says {total and total.group(1)} questions; the notebooks have {len(QUESTIONS)}"
    listed = {name: int(n) for name, n in re.findall(r"^- \[([^\]]+)\]\(#[^)]+\) \((\d+)\)$", text, re.M)}
    topics = re.split(r"^## ", text, flags=re.M)[1:]
    found = {t.splitlines()[0].strip(): len(re.findall(r"^### ", t, re.M)) for t in topics}
    assert listed == found, f"the topic list counts {listed}; the topics hold {found}"


def test_the_topic_list_links_to_the_topic_headings() -> None:
    text = bank_text()
    anchors = {github_anchor(h) for h in re.findall(r"^## (.+)$", text, re.M)}
    internal = [t[1:] for _, t in LINK.findall(text) if t.startswith("#")]
    assert internal and set(internal) == anchors, (sorted(internal), sorted(anchors))


def test_the_korean_bank_asks_each_question_in_the_korean_notebooks_words() -> None:
    """Issue 40: the Korean bank reuses the Korean notebook's translation of each question, so a
    reader who searches the notebook for the bank's question finds it. The Korean entries are the
    English ones translated in order (one catalog string each), so the English entry names the
    notebook and question number; both texts are compared after ``normalize``. To fix a mismatch,
    edit notebooks/locale/ko/LC_MESSAGES/ (the bank's heading or the notebook's question, until
    they are the same words), then ``kafkalab i18n build``."""
    en_entries = bank_entries()
    ko_entries = bank_entries((KO_DIR / "interview_bank.md").read_text(encoding="utf-8"))
    assert len(ko_entries) == len(en_entries) == len(QUESTIONS), \
        f"{len(ko_entries)} Korean bank entries, {len(en_entries)} English, {len(QUESTIONS)} questions"
    korean = {}
    for path in NOTEBOOKS:
        korean[path.name] = interview_questions(nbformat.read(KO_DIR / path.name, as_version=4), KO_INTERVIEW_HEADING)
        english = [n for name, n, _ in QUESTIONS if name == path.name]
        assert sorted(korean[path.name]) == english, \
            f"ko/{path.name}: Korean interview questions numbered {sorted(korean[path.name])}, English {english}"
    names = {path.name[:2]: path.name for path in NOTEBOOKS}
    mismatches = []
    for en, ko in zip(en_entries, ko_entries):
        source = re.search(r"notebook (\d\d), question (\d+)", en)
        assert source, f"no notebook named in the entry {en.splitlines()[0]!r}"
        name, number = names[source.group(1)], int(source.group(2))
        bank, notebook = normalize(ko.splitlines()[0][4:]), korean[name][number]
        if bank != notebook:
            mismatches.append(f"{name} question {number} ({en.splitlines()[0][4:]})\n"
                              f"  ko/interview_bank.md: {bank}\n  ko/{name}: {notebook}")
    assert not mismatches, (f"{len(mismatches)} questions worded differently in the Korean bank and the "
                            f"Korean notebook:\n" + "\n".join(mismatches))


# ----------------------------------------------------------------------------- the commands


def reproduce_commands() -> list[tuple[str, str, list[str], list[str]]]:
    """(line, command name, arguments of the command, options of the variants in parentheses) for
    every Reproduce line that names a command."""
    out = []
    for line in bank_text().splitlines():
        if not line.startswith("Reproduce:") or line == NO_COMMAND:
            continue
        spans = CODE_SPAN.findall(line)
        assert spans and spans[0].startswith("kafkalab run "), \
            f"a Reproduce line is `kafkalab run ...` or {NO_COMMAND!r}: {line}"
        words = shlex.split(spans[0])
        variant_options = [w for span in spans[1:] for w in shlex.split(span) if w.startswith("--")]
        out.append((line, words[2], words[3:], variant_options))
    return out


def test_every_kafkalab_run_in_the_bank_names_a_registered_command() -> None:
    names = re.findall(r"kafkalab run ([A-Za-z0-9_-]+)", bank_text())
    assert names, "the bank shows kafkalab run commands"
    unknown = sorted({n for n in names if n not in kafkalab.cli.run.commands})
    assert not unknown, f"not commands of `kafkalab run` ({sorted(kafkalab.cli.run.commands)}): {unknown}"


def test_every_option_of_a_bank_command_exists_on_that_command() -> None:
    problems = []
    for line, name, args, variants in reproduce_commands():
        cmd = kafkalab.cli.run.commands[name]
        opts = {o for p in cmd.params for o in p.opts}
        used = [a.split("=")[0] for a in args if a.startswith("--")] + variants
        problems += [f"{name} has no option {o}: {line}" for o in used if o not in opts]
    assert not problems, "\n".join(problems)


def test_every_command_of_the_workshop_guide_parses_with_its_values() -> None:
    """The workshop guide's ``kafkalab run`` commands too (placeholders ``NAME`` and ``...`` aside):
    a command missing a required option would fail in front of a room."""
    guide = (NOTEBOOK_DIR / "workshop_guide.md").read_text(encoding="utf-8")
    commands = [shlex.split(s) for s in CODE_SPAN.findall(guide) if s.startswith("kafkalab run ")]
    commands = [w for w in commands if w[2] not in ("NAME", "...")]
    assert len(commands) >= 4, commands
    for words in commands:
        cmd = kafkalab.cli.run.commands.get(words[2])
        assert cmd is not None, f"not a command of `kafkalab run`: {' '.join(words)}"
        try:
            cmd.make_context(words[2], words[3:])
        except click.ClickException as e:
            pytest.fail(f"{' '.join(words)}\n  {e.format_message()}")


def test_every_bank_command_parses_with_its_values() -> None:
    """click parses each command line (types, ranges, choices, required options) without running it."""
    for line, name, args, _ in reproduce_commands():
        cmd = kafkalab.cli.run.commands[name]
        try:
            cmd.make_context(name, list(args))
        except click.ClickException as e:
            pytest.fail(f"{line}\n  {e.format_message()}")
