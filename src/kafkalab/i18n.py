"""The Korean edition (한국어판): notebooks and pages generated from the English ones and a
gettext catalog per document.

One source of code: a Korean notebook is its English notebook with every markdown cell
translated and every code cell copied with only its comments translated (``code_comments``:
found by ``tokenize``, context ``comment``; ``tests/test_i18n.py`` compares the cells' tokens
without comments, so a ``%%program`` runs the same program in both editions). The English text is cut into *blocks* (the
paragraphs, headings, lists, tables and quotes between blank lines; a fenced code block is
copied, not translated; a list is cut further into its items, ``list_items``), and each is one message (``msgid``) of the document's catalog,
``notebooks/locale/ko/LC_MESSAGES/<document>.po``, in the layout Sphinx's i18n uses. The
questions of the quiz cells (``quiz.predict(key, question, choices)``) are messages too, with
the context ``quiz``: the code stays the same, and ``kafkalab.quiz`` shows the Korean question
when the notebook runs from ``notebooks/ko/``.

How an English change reaches the Korean edition:

1. ``make ko`` (``kafkalab i18n update`` then ``build``). ``update`` merges the new
   English into every catalog with Babel (``Catalog.update``): a changed block keeps its old
   translation marked ``#, fuzzy`` (with the previous English as ``#| msgid``), a new block gets
   an empty translation, a removed one goes. ``build`` writes ``notebooks/ko/`` from the English
   and the catalogs; a block without a current translation stays English, and ``build`` lists it.
2. Translate the entries marked fuzzy or empty (``kafkalab i18n status`` lists them; ``show DOC
   --todo`` writes them as a work file, each ``=== N  #check`` line carrying a check of its
   English, and ``fill DOC FILE`` stores the translations, refusing the whole file if a string's
   English is no longer the one ``show`` wrote), run ``make ko`` again. The steps in Korean, for
   a translator: ``notebooks/locale/ko/README.md``.
3. ``tests/test_i18n.py`` (``make check``) fails while any block is missing or fuzzy, or while
   ``notebooks/ko/`` differs from what ``build`` writes.

Sources: GNU gettext manual (PO files, fuzzy entries); Babel ``babel.messages`` (catalog,
``read_po``/``write_po``, ``Catalog.update``); Sphinx internationalization (``locale_dirs``,
``LC_MESSAGES`` layout).
"""

from __future__ import annotations

import ast
import copy
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

#: The editions other than English, by language code (ISO 639-1, as Sphinx's ``language``).
LANGUAGES = ("ko",)
#: Markdown pages translated besides the notebooks (paths under ``notebooks/``).
PAGES = ("README.md", "interview_bank.md", "workshop_guide.md", "_book/index.md")
#: The message context of a quiz question, choice or unit.
QUIZ_CONTEXT = "quiz"
#: The message context of a comment in a code cell (``code_comments``).
COMMENT_CONTEXT = "comment"

#: The catalogs' header fields (Babel ``Catalog`` arguments).
HEADER = dict(copyright_holder="kafkalab authors", version="", msgid_bugs_address="",
              last_translator="kafkalab authors", language_team="kafkalab authors",
              header_comment="# The Korean edition of kafkalab: a gettext catalog (see src/kafkalab/i18n.py).\n"
                             "# Licensed as the project, Apache-2.0.")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def notebooks_dir() -> Path:
    """``notebooks/`` of this checkout."""
    from . import config

    return config.repo_root() / "notebooks"


def documents() -> list[str]:
    """Every translated document, as a path under ``notebooks/`` (``"03_offset_commit.ipynb"``,
    ``"solutions/03_offset_commit_solutions.ipynb"``, ``"README.md"``...), lessons first."""
    root = notebooks_dir()
    lessons = sorted(p.name for p in root.glob("*.ipynb"))
    solutions = sorted(f"solutions/{p.name}" for p in (root / "solutions").glob("*.ipynb"))
    return lessons + solutions + list(PAGES)


def catalog_path(doc: str, lang: str = "ko") -> Path:
    """``notebooks/locale/<lang>/LC_MESSAGES/<doc without suffix>.po``."""
    return notebooks_dir() / "locale" / lang / "LC_MESSAGES" / Path(doc).with_suffix(".po")


def edition_path(doc: str, lang: str = "ko") -> Path:
    """Where the translated document is written: ``notebooks/<lang>/<doc>``."""
    return notebooks_dir() / lang / doc


# ----------------------------------------------------------------------------- blocks

def blocks(markdown: str) -> list[tuple[str, bool]]:
    """Cut markdown into blocks at blank lines outside fenced code.

    Returns:
        ``[(text, translatable), ...]`` in order; ``"\\n\\n".join`` of the texts gives the
        markdown back up to blank-line runs and trailing spaces. A block is not translatable
        when it is a fenced code block alone, or has no Latin letter (a formula, a rule).
    """
    out: list[tuple[str, bool]] = []
    cur: list[str] = []
    fenced = False

    def flush() -> None:
        if cur:
            text = "\n".join(cur).strip("\n")
            if text.strip():
                out.append((text, _translatable(text)))
            cur.clear()

    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and not line.strip():
            flush()
        else:
            cur.append(line.rstrip())
    flush()
    return out


_ITEM = re.compile(r"^( *)(\d+[.)]|[-*+])[ \t]+\S")


def list_items(text: str) -> list[str]:
    """A block that is a list, cut into its items: each item is one message, so an English change
    in one item re-opens only that item. An item runs to the next line that starts an item at the
    first item's indent (nested items and continuation lines stay with their item).

    Returns:
        the items in order (``"\\n".join`` gives the block back), or ``[text]`` when the block
        does not start with a list item or has only one.
    """
    lines = text.split("\n")
    first = _ITEM.match(lines[0])
    if first is None:
        return [text]
    indent = first.group(1)
    items: list[list[str]] = []
    for line in lines:
        m = _ITEM.match(line)
        if m and m.group(1) == indent or not items:
            items.append([line])
        else:
            items[-1].append(line)
    return ["\n".join(item) for item in items] if len(items) > 1 else [text]


def _translatable(text: str) -> bool:
    lines = text.splitlines()
    if _FENCE.match(lines[0]) and _FENCE.match(lines[-1]) and len(lines) > 1:
        # A MyST directive with a caption (the book's ``{toctree}``) carries text a reader sees.
        return lines[0].lstrip("`~ ").startswith("{") and any(line.startswith(":caption:") for line in lines)
    return re.search(r"[A-Za-z]", text) is not None


def _python(code: str):
    src = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        return ast.parse(src)
    except SyntaxError:
        return None


def string_lists(code: str) -> dict[str, list[str]]:
    """The names a cell binds to a list or tuple of string literals (``ANSWERS = ["a", "b"]``):
    the choices a ``quiz.predict`` call may name instead of writing them."""
    tree = _python(code)
    found: dict[str, list[str]] = {}
    for node in (tree.body if tree else []):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.List, ast.Tuple))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts)):
            found[node.targets[0].id] = [e.value for e in node.value.elts]
    return found


def quiz_strings(code: str, names: dict[str, list[str]] | None = None) -> list[str]:
    """The literal question, choices and unit of each ``quiz.predict(...)`` call in a code cell;
    choices given as a name are looked up in ``names`` (``string_lists`` of the notebook).

    Returns:
        ``[question, choice, ...]`` in source order; ``[]`` when the cell is not Python (a
        ``%%program`` cell parses: its magic line is dropped first).
    """
    tree = _python(code)
    if tree is None:
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "predict"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "quiz"):
            args = list(node.args[1:3])
            args += [k.value for k in node.keywords if k.arg in ("question", "choices", "unit")]
            for a in args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    found.append(a.value)
                elif isinstance(a, (ast.List, ast.Tuple)):
                    found += [e.value for e in a.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                elif isinstance(a, ast.Name) and names and a.id in names:
                    found += names[a.id]
    return found


@dataclass
class Comment:
    """A comment of a code cell: one trailing comment (``x = 1  # why``), or a run of whole-line
    comments at one indent (each line's text after ``# ``, joined by newlines).

    Attributes:
        text: the English without the ``#`` markers (the ``msgid``).
        first, last: the cell's lines it spans, from 0.
        col: the column of its first ``#``.
        trailing: True when code precedes it on its line.
    """

    text: str
    first: int
    last: int
    col: int
    trailing: bool


#: Comments that are instructions to a tool, not to a reader: never translated.
_PRAGMA = re.compile(r"^(noqa|type:|pragma|fmt:|isort:|pylint:|!)")


def code_comments(code: str) -> list[Comment]:
    """The translatable comments of a Python code cell (a ``%%program`` or ``%magic`` line is
    read as a blank line), in source order, found by Python's ``tokenize`` (a ``#`` inside a
    string is not a comment).

    Returns:
        ``[Comment, ...]``; ``[]`` when the cell does not tokenize. A comment without a Latin
        letter, or a tool's (``# noqa``, ``# type:``...), is not listed.
    """
    import io
    import tokenize

    lines = code.splitlines()
    src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines) + "\n"
    try:
        found = [(t.start[0] - 1, t.start[1], t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline)
                 if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return []
    out: list[Comment] = []
    run: list[tuple[int, int, str]] = []

    def close() -> None:
        if run:
            text = "\n".join(_comment_text(s) for _, _, s in run).strip("\n")
            if _comment_translatable(text):
                out.append(Comment(text, run[0][0], run[-1][0], run[0][1], False))
            run.clear()

    for row, col, string in found:
        if lines[row][:col].strip():
            close()
            text = _comment_text(string)
            if _comment_translatable(text):
                out.append(Comment(text, row, row, col, True))
            continue
        if run and (row != run[-1][0] + 1 or col != run[-1][1]):
            close()
        run.append((row, col, string))
    close()
    return out


def _comment_text(token: str) -> str:
    text = token[1:]
    return text[1:] if text.startswith(" ") else text


def _comment_translatable(text: str) -> bool:
    return re.search(r"[A-Za-z]", text) is not None and not _PRAGMA.match(text.strip())


def translate_comments(code: str, cat, missing: list[str] | None = None) -> str:
    """``code`` with each comment of ``code_comments`` replaced by its translation in ``cat``
    (context ``COMMENT_CONTEXT``): a run of whole-line comments becomes one ``# `` line per line
    of the translation at the same indent, a trailing comment stays one line. Code is not
    touched, so the cell's tokens other than comments are the English cell's. A comment without
    a translation stays English and is appended to ``missing``."""
    lines = code.splitlines()
    for c in reversed(code_comments(code)):
        t = lookup(cat, c.text, COMMENT_CONTEXT)
        if t is None:
            if missing is not None:
                missing.append(c.text)
            continue
        if c.trailing:
            lines[c.first] = lines[c.first][:c.col] + "# " + " ".join(t.split("\n"))
        else:
            pad = lines[c.first][:c.col]
            lines[c.first:c.last + 1] = [f"{pad}# {line}".rstrip() if line.strip() else f"{pad}#" for line in t.split("\n")]
    out = "\n".join(lines)
    return out + "\n" if code.endswith("\n") else out


def code_tokens(code: str) -> list[tuple[int, str]]:
    """A code cell's tokens without comments and line layout (``tokenize`` type and text; magic
    lines kept as text): what runs, the same in both editions when only comments were translated.
    A cell that does not tokenize is its whole text (only the same text is the same code)."""
    import io
    import tokenize

    lines = code.splitlines()
    magics = [(-2, line) for line in lines if line.lstrip().startswith(("%", "!"))]
    src = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines) + "\n"
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER}
    try:
        return magics + [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline)
                         if t.type not in skip]
    except (tokenize.TokenError, SyntaxError):
        return [(-1, code)]


@dataclass
class Message:
    """One translatable string of a document.

    Attributes:
        text: the English (the ``msgid``).
        where: the cell index (a notebook) or block index (a page), for the catalog's location.
        context: ``None`` for prose, ``QUIZ_CONTEXT`` for a quiz question, choice or unit,
            ``COMMENT_CONTEXT`` for a comment in a code cell.
    """

    text: str
    where: int
    context: str | None = None


def messages(doc: str) -> list[Message]:
    """The translatable strings of ``doc`` (a path under ``notebooks/``), in document order."""
    path = notebooks_dir() / doc
    out: list[Message] = []
    if path.suffix == ".ipynb":
        import nbformat

        nb = nbformat.read(path, as_version=4)
        names: dict[str, list[str]] = {}
        for cell in nb.cells:
            if cell.cell_type == "code":
                names.update(string_lists(cell.source))
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                out += [Message(u, i) for t, ok in blocks(cell.source) if ok for u in list_items(t) if _translatable(u)]
            elif cell.cell_type == "code":
                out += [Message(t, i, QUIZ_CONTEXT) for t in quiz_strings(cell.source, names)]
                out += [Message(c.text, i, COMMENT_CONTEXT) for c in code_comments(cell.source)]
    else:
        out += [Message(u, i) for i, (t, ok) in enumerate(blocks(path.read_text(encoding="utf-8"))) if ok
                for u in list_items(t) if _translatable(u)]
    return out


# ----------------------------------------------------------------------------- catalogs

def template(doc: str):
    """The document's message template (a Babel ``Catalog`` without translations)."""
    from babel.messages.catalog import Catalog

    cat = Catalog(project="kafkalab", fuzzy=False, **HEADER)
    for m in messages(doc):
        cat.add(m.text, locations=[(doc, m.where)], context=m.context)
    return cat


def read_catalog(doc: str, lang: str = "ko"):
    """The document's catalog (Babel ``Catalog``); an empty one when the file does not exist."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po

    path = catalog_path(doc, lang)
    if not path.exists():
        return Catalog(locale=lang, project="kafkalab", fuzzy=False, **HEADER)
    with path.open("rb") as f:
        cat = read_po(f, locale=lang)
    for entry in cat:
        _previous_from_comments(entry)
    return cat


def _previous_from_comments(entry) -> None:
    """Put a fuzzy entry's previous English back where ``write_catalog`` wrote it.

    Babel 2.18's ``read_po`` reads the ``#| msgid "..."`` lines that ``write_po`` writes as
    translator comments (``"| msgid ..."``); written again they became ``# | msgid`` comments,
    rewrapped at every write and kept after the entry was translated. Here they go back to
    ``previous_id`` (a fuzzy entry) or are dropped (a current one)."""
    from babel.messages.pofile import denormalize

    prev = [c for c in entry.user_comments if c.startswith("|")]
    if not prev:
        return
    entry.user_comments = [c for c in entry.user_comments if not c.startswith("|")]
    lines = [c[1:].strip() for c in prev]
    if entry.fuzzy and lines[0].startswith("msgid "):
        lines[0] = lines[0][len("msgid "):]
        try:
            entry.previous_id = [denormalize("\n".join(lines))]
        except (ValueError, IndexError):
            entry.previous_id = []


def write_catalog(doc: str, cat, lang: str = "ko") -> Path:
    """Write ``cat`` to ``catalog_path(doc, lang)`` (no line wrapping; obsolete entries dropped)."""
    from babel.messages.pofile import write_po

    path = catalog_path(doc, lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    cat.fuzzy = False
    for entry in cat:
        # Babel flags a string with a "%" followed by a letter ("20%의") as python-format, and
        # `msgfmt -c` then fails on its translation; no string here is a format string.
        entry.flags.discard("python-format")
    if isinstance(cat.revision_date, str):  # Babel's placeholder, which `msgfmt -c` warns of
        cat.revision_date = cat.creation_date
    with path.open("wb") as f:
        write_po(f, cat, width=0, omit_header=False, ignore_obsolete=True, include_previous=True,
                 sort_output=False)
    return path


def update(doc: str, lang: str = "ko") -> Path:
    """Merge the document's English into its catalog (Babel ``Catalog.update``: changed strings
    keep their old translation marked fuzzy, new ones are empty, removed ones go)."""
    cat = read_catalog(doc, lang)
    created = cat.creation_date
    previous = {(m.id, m.context): m.previous_id for m in cat if m.fuzzy and m.previous_id}
    cat.update(template(doc), no_fuzzy_matching=False, update_header_comment=False)
    for m in cat:  # Catalog.update keeps a still-fuzzy entry's translation, not its previous English
        if m.fuzzy and not m.previous_id and (m.id, m.context) in previous:
            m.previous_id = previous[(m.id, m.context)]
    cat.creation_date = created  # a date that changes at every run would make every catalog differ
    return write_catalog(doc, cat, lang)


@dataclass
class Status:
    """How far a document's translation is.

    Attributes:
        doc: the document (path under ``notebooks/``).
        total: its translatable strings.
        missing: English strings with no translation (no entry, or an empty one).
        fuzzy: English strings whose translation is marked fuzzy (the English changed).
    """

    doc: str
    total: int
    missing: list[str] = field(default_factory=list)
    fuzzy: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return not self.missing and not self.fuzzy


def status(doc: str, lang: str = "ko") -> Status:
    """Compare the document's English with its catalog (nothing is written)."""
    cat = read_catalog(doc, lang)
    msgs = messages(doc)
    st = Status(doc, len(msgs))
    for m in msgs:
        entry = cat.get(m.text, context=m.context)
        if entry is None or not entry.string:
            st.missing.append(m.text)
        elif entry.fuzzy:
            st.fuzzy.append(m.text)
    return st


def lookup(cat, text: str, context: str | None = None) -> str | None:
    """The current translation of ``text`` in ``cat`` (None if missing, empty or fuzzy)."""
    entry = cat.get(text, context=context)
    if entry is None or not entry.string or entry.fuzzy:
        return None
    return entry.string


def unique_messages(doc: str) -> list[Message]:
    """``messages(doc)`` without repeats (a catalog has one entry per English string and context):
    the numbering ``show`` prints and ``fill`` reads."""
    seen: set[tuple[str | None, str]] = set()
    out = []
    for m in messages(doc):
        if (m.context, m.text) not in seen:
            seen.add((m.context, m.text))
            out.append(m)
    return out


#: The separator line of the work-file format of ``show`` and ``fill``: ``=== N``, N from 1,
#: ``(quiz)`` for a quiz string, ``(comment)`` for a code comment (its lines become ``# `` lines), and ``#`` + ``english_check`` of the English it was shown with.
_SEP = re.compile(r"^=== (\d+)(?:\s+\((?:quiz|comment)\))?(?:\s+#([0-9a-f]{8}))?\s*$", re.M)


def english_check(text: str) -> str:
    """8 hex digits of the SHA-1 of an English string: ``show`` writes them after each ``=== N``
    and ``fill`` compares them with the string N is now."""
    import hashlib

    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def show(doc: str, lang: str = "ko", only_todo: bool = False) -> str:
    """The document's strings as a work file: ``=== N  #check`` then the English, for each string
    (``only_todo``: only those missing or fuzzy)."""
    cat = read_catalog(doc, lang)
    parts = []
    for n, m in enumerate(unique_messages(doc), 1):
        if only_todo and lookup(cat, m.text, m.context) is not None:
            continue
        tag = f"  ({m.context})" if m.context else ""
        parts.append(f"=== {n}{tag}  #{english_check(m.text)}\n{m.text}\n")
    return "\n".join(parts)


def fill(doc: str, work: str, lang: str = "ko") -> int:
    """Set translations from a work file (``=== N  #check`` then the translation of string N, as
    ``show`` numbers and checks them; blank lines around a translation are dropped) and clear
    their fuzzy mark. Nothing is written unless every string of the file is accepted.

    Returns:
        How many strings were set.

    Raises:
        ValueError: a number that is not a string of the document, an empty translation, a
            string without its check, or one whose English is no longer the one ``show`` wrote
            (the English changed, or strings were inserted or removed before it: the numbers
            moved, and the translation would land on another string).
    """
    msgs = unique_messages(doc)
    cat = read_catalog(doc, lang)
    pieces = _SEP.split(work)
    count = 0
    for num, check, body in zip(pieces[1::3], pieces[2::3], pieces[3::3]):
        n = int(num)
        if not 1 <= n <= len(msgs):
            raise ValueError(f"{doc}: string {n} does not exist (1..{len(msgs)})")
        text = body.strip("\n")
        if not text.strip():
            raise ValueError(f"{doc}: string {n} has an empty translation")
        if check is None:
            raise ValueError(f"{doc}: string {n} has no check of its English (`=== {n}  #xxxxxxxx`): fill from a "
                             f"work file that `kafkalab i18n show {doc}` wrote")
        if check != english_check(msgs[n - 1].text):
            raise ValueError(f"{doc}: string {n} is no longer the English the work file was made from (it changed, "
                             f"or strings were added or removed before it): nothing was set; run "
                             f"`kafkalab i18n show {doc} --todo` again and move the translations over")
        m = msgs[n - 1]
        entry = cat.get(m.text, context=m.context)
        if entry is None:
            cat.add(m.text, string=text, locations=[(doc, m.where)], context=m.context)
        else:
            entry.string = text
            entry.flags.discard("fuzzy")
            entry.previous_id = []
        count += 1
    write_catalog(doc, cat, lang)
    return count


# ----------------------------------------------------------------------------- the edition

def _relink(markdown: str, doc: str, lang: str) -> str:
    """Point relative links that leave the translated set at the English files they name: a
    link from ``notebooks/ko/x.ipynb`` to ``../src/...`` needs one more ``../``."""
    translated = set(documents())
    here = Path(doc).parent

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)
        path, _, anchor = target.partition("#")
        norm = os.path.normpath(here / path).replace(os.sep, "/")
        if not path or norm in translated or any(d.startswith(norm.rstrip("/") + "/") for d in translated):
            return m.group(0)
        new = os.path.relpath(notebooks_dir() / norm, notebooks_dir() / lang / here).replace(os.sep, "/")
        return f"{m.group(1)}{new}{'#' + anchor if anchor else ''}{m.group(3)}"

    return _LINK.sub(fix, markdown)


def translate_markdown(markdown: str, cat, doc: str, lang: str = "ko", missing: list[str] | None = None) -> str:
    """``markdown`` with each translatable block (each item of a list, ``list_items``) replaced by
    its translation in ``cat``; one without a translation stays English and is appended to
    ``missing``."""
    out = []
    for text, ok in blocks(markdown):
        if not ok:
            out.append(text)
            continue
        units = []
        for unit in list_items(text):
            t = lookup(cat, unit) if _translatable(unit) else unit
            if t is None:
                if missing is not None:
                    missing.append(unit)
                t = unit
            units.append(t)
        out.append("\n".join(units))
    return _relink("\n\n".join(out), doc, lang)


def generated_note(doc: str, lang: str = "ko") -> str:
    """The comment every generated document carries below its title (invisible when rendered):
    where its text comes from, so that a fix goes into the catalog and not into the copy."""
    po = catalog_path(doc, lang).relative_to(notebooks_dir().parent)
    return (f"<!-- generated by `kafkalab i18n build` (make ko) from {po}: edit the .po, not this file. "
            f"이 파일은 생성된 것이다. 고칠 곳은 {po}이고, 고친 뒤 make ko를 실행한다. -->")


def _with_note(markdown: str, doc: str, lang: str) -> str:
    """``markdown`` with ``generated_note`` after its first line if that is a ``#`` title (the
    title stays first: the book takes it as the page title), else before it."""
    note = generated_note(doc, lang)
    title, sep, rest = markdown.partition("\n")
    if title.startswith("# "):
        return f"{title}\n\n{note}" + (f"\n{rest}" if sep else "")
    return f"{note}\n\n{markdown}"


def render(doc: str, lang: str = "ko") -> tuple[str, list[str]]:
    """The translated document as file text, and the English blocks left untranslated.

    A notebook: the English notebook with its markdown cells translated; code cells, outputs
    (none: notebooks are kept stripped) and metadata are copied unchanged.
    """
    cat = read_catalog(doc, lang)
    path = notebooks_dir() / doc
    missing: list[str] = []
    if path.suffix == ".ipynb":
        import nbformat

        nb = nbformat.read(path, as_version=4)
        out = copy.deepcopy(nb)
        noted = False
        for cell in out.cells:
            if cell.cell_type == "code":
                cell.source = translate_comments(cell.source, cat, missing)
            if cell.cell_type == "markdown":
                cell.source = translate_markdown(cell.source, cat, doc, lang, missing)
                if not noted:
                    cell.source, noted = _with_note(cell.source, doc, lang), True
        return nbformat.writes(out) + "\n", missing
    text = _with_note(translate_markdown(path.read_text(encoding="utf-8"), cat, doc, lang, missing), doc, lang)
    return text.rstrip("\n") + "\n", missing


def build(lang: str = "ko", docs: list[str] | None = None) -> dict[str, list[str]]:
    """Write every document of the edition (or only ``docs``) under ``notebooks/<lang>/``.

    Returns:
        ``{doc: [untranslated English block, ...]}`` for the documents with any.
    """
    gaps: dict[str, list[str]] = {}
    for doc in docs or documents():
        text, missing = render(doc, lang)
        target = edition_path(doc, lang)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        if missing:
            gaps[doc] = missing
    return gaps


def language_of(path: str | Path | None = None) -> str:
    """The edition a notebook runs in, from its folder: ``"ko"`` under ``notebooks/ko/``,
    else ``"en"``. ``path`` defaults to the working directory (a kernel's is its notebook's)."""
    p = Path(path or Path.cwd()).resolve()
    try:
        rel = p.relative_to(notebooks_dir().resolve())
    except ValueError:
        return "en"
    return rel.parts[0] if rel.parts and rel.parts[0] in LANGUAGES else "en"


_quiz_cache: dict[str, dict[str, str]] = {}


def quiz_text(text: str, lang: str) -> str:
    """``text`` (a quiz question or choice) in ``lang``, from any catalog that has it; the
    English when none does (or ``lang`` is ``"en"``)."""
    if lang not in LANGUAGES:
        return text
    if lang not in _quiz_cache:
        table: dict[str, str] = {}
        for doc in documents():
            if not doc.endswith(".ipynb") or not catalog_path(doc, lang).exists():
                continue
            for entry in read_catalog(doc, lang):
                if entry.context == QUIZ_CONTEXT and entry.string and not entry.fuzzy:
                    table[entry.id] = entry.string
        _quiz_cache[lang] = table
    return _quiz_cache[lang].get(text, text)


# ----------------------------------------------------------------------------- command line

# The command line, beside its module as ``kafkalab fault``'s is (registered in cli.py).

def _docs(docs: tuple[str, ...]) -> list[str]:
    """``docs``, or every document when none is given; a name that is not one is a usage error."""
    unknown = sorted(set(docs) - set(documents()))
    if unknown:
        raise click.BadParameter(f"not a translated document: {unknown}; one of {documents()}", param_hint="DOC")
    return list(docs) or documents()


_LANG = click.option("--lang", default="ko", show_default=True, type=click.Choice(LANGUAGES))


@click.group("i18n")
def cli_group() -> None:
    """The Korean edition's catalogs (notebooks/locale/ko/) and notebooks/ko/ (make ko = update + build)."""


@cli_group.command("update")
@click.argument("docs", nargs=-1)
@_LANG
def update_command(docs: tuple[str, ...], lang: str) -> None:
    """Merge the English of DOCS (default: all) into their catalogs: changed strings turn fuzzy."""
    docs_ = _docs(docs)
    for doc in docs_:
        update(doc, lang)
    click.echo(f"updated {len(docs_)} catalogs under notebooks/locale/{lang}/LC_MESSAGES")


@cli_group.command("build")
@click.argument("docs", nargs=-1)
@_LANG
def build_command(docs: tuple[str, ...], lang: str) -> None:
    """Write notebooks/<lang>/ from the English and the catalogs (blocks without a current
    translation stay English and are counted)."""
    docs_ = _docs(docs)
    for doc, missing in build(lang, docs_).items():
        click.echo(f"{doc}: {len(missing)} blocks still English")
    click.echo(f"wrote notebooks/{lang}/ ({len(docs_)} documents)")


@cli_group.command("status")
@click.argument("docs", nargs=-1)
@_LANG
def status_command(docs: tuple[str, ...], lang: str) -> None:
    """Translated / total, missing and fuzzy strings per document; exit 1 if any is not done."""
    bad = 0
    for doc in _docs(docs):
        st = status(doc, lang)
        bad += not st.done
        click.echo(f"{doc:<55} {st.total - len(st.missing) - len(st.fuzzy):>4}/{st.total:<4}"
                   f" missing {len(st.missing):>3}  fuzzy {len(st.fuzzy):>3}")
    sys.exit(1 if bad else 0)


@cli_group.command("show")
@click.argument("doc")
@click.option("--todo", is_flag=True, help="Only the strings missing or fuzzy.")
@_LANG
def show_command(doc: str, todo: bool, lang: str) -> None:
    """Print DOC's strings as a work file (``=== N  #check`` then the English of string N)."""
    click.echo(show(_docs((doc,))[0], lang, todo))


@cli_group.command("fill")
@click.argument("doc")
@click.argument("work", type=click.Path(exists=True, dir_okay=False))
@_LANG
def fill_command(doc: str, work: str, lang: str) -> None:
    """Store the translations of a work file (``=== N  #check`` then the translation of string N, as
    ``show`` wrote it) in DOC's catalog; refuse it all if a string's English changed since."""
    try:
        n = fill(_docs((doc,))[0], Path(work).read_text(encoding="utf-8"), lang)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{doc}: {n} strings set")


@cli_group.command("slug")
@click.argument("heading", nargs=-1, required=True)
def slug_command(heading: tuple[str, ...]) -> None:
    """The anchor MyST (and the book) gives a heading, for ``](#anchor)`` links."""
    from myst_parser.slugs import github_slugify

    click.echo(github_slugify(" ".join(heading)))
