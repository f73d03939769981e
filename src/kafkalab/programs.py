"""Client programs: the Kafka code a notebook shows, and the code its experiment runs.

A *program* is a short Python script of plain confluent-kafka code (a consumer loop, a
producer, a share consumer...), written in a notebook cell that starts with ``%%program NAME``.
Running that cell does not run the program: it checks that it compiles and binds a
``Program`` to ``NAME`` in the notebook. An experiment takes that object and runs its text, as
it is, in a worker process (``kafkalab.worker.ProgramSpec``): the code on screen is the code
that runs, and a learner who edits the cell and reruns the experiment runs the edited code.

The notebook is the one home of its programs: ``kafkalab run NAME`` and the tests read the
same cells (``from_notebook``), and edit them the way a learner would (``Program.replace``).

Inside a program, ``from kafkalab.instruments import lab`` is the only line that is not Kafka
code: ``lab`` is the lab's instruments for this process (``kafkalab.instruments``): the
settings the harness adds (``lab.conf``: bootstrap servers, client id, group id), the run's
topic, the ledger (``lab.consumed(msg)``...), the side effect's simulated work and the crash
point. Everything else (every Kafka setting that changes what happens, the loop, the
commits) is in the program.

Java clients are shown from their source (``java_source``): they are compiled by
``make jars`` and run by the same worker entry point (``worker.ExecSpec``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from . import config
from .errors import KafkalabError

#: The cell magic that marks a notebook cell as a program.
MAGIC = "%%program"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


class ProgramError(KafkalabError):
    """A program that cannot be found, compiled or edited as asked."""


@dataclass(frozen=True)
class Program:
    """One client program: its ``name`` (a Python identifier), its ``source`` (the script, as
    shown) and where it came from (``origin``: a notebook and cell, or ``edited``).

    Raises:
        ProgramError: ``name`` is not an identifier, or ``source`` does not compile (the message
            gives the line).
    """

    name: str
    source: str
    origin: str = "notebook cell"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ProgramError(f"a program's name must be a Python identifier, not {self.name!r}")
        try:
            compile(self.source, self.filename, "exec")
        except SyntaxError as e:
            raise ProgramError(f"program {self.name} does not compile: line {e.lineno}: {e.msg}: "
                               f"{(e.text or '').strip()}") from e

    @property
    def filename(self) -> str:
        """The file name tracebacks of the running program show (``<program NAME>``)."""
        return f"<program {self.name}>"

    @property
    def lines(self) -> int:
        """Lines of source."""
        return len(self.source.splitlines())

    def replace(self, old: str, new: str, name: str | None = None) -> "Program":
        """A copy with ``old`` replaced by ``new``: how a test or a worked solution edits a
        shown program (the learner edits the cell instead). ``name``: the copy's name
        (default: the same).

        Raises:
            ProgramError: ``old`` does not occur exactly once (the message says how often).
        """
        n = self.source.count(old)
        if n != 1:
            raise ProgramError(f"program {self.name}: this cell edits the line {old.strip()!r} as the notebook "
                               f"wrote it, but it occurs {n} times in the program, not once (was it edited? "
                               "the comment at the top of the program lists the lines later cells need); "
                               "nothing replaced")
        return Program(name or self.name, self.source.replace(old, new), origin=f"edited from {self.origin}")

    def _repr_markdown_(self) -> str:
        return f"program `{self.name}` ({self.lines} lines, {self.origin}):\n\n```python\n{self.source}\n```"

    def __repr__(self) -> str:
        return f"Program({self.name!r}, {self.lines} lines, {self.origin})"


def notebooks_dir() -> Path:
    """``notebooks/`` of the project (``config.repo_root``)."""
    return config.repo_root() / "notebooks"


def _cells(notebook: Path) -> list[str]:
    nb = json.loads(notebook.read_text())
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


def parse_cell(cell: str, origin: str = "notebook cell") -> Program | None:
    """The program of one code cell's text, or None if the cell is not a ``%%program`` cell.

    Raises:
        ProgramError: a ``%%program`` line without one identifier, or a program that does not
            compile.
    """
    first, _, body = cell.partition("\n")
    if first.split()[:1] != [MAGIC]:
        return None
    args = first.split()[1:]
    if len(args) != 1:
        raise ProgramError(f"usage: {MAGIC} NAME (one Python identifier), not {first!r}")
    return Program(args[0], body.rstrip() + "\n", origin)


def notebook_programs(notebook: str | Path) -> dict[str, Program]:
    """Every program of a notebook, by name. ``notebook``: a path, or a name in
    ``notebooks/`` (``"03_offset_commit"``): in a Korean notebook (run from ``notebooks/ko/``,
    ``i18n.language_of``) the Korean edition's copy, so that a program edited there is the one
    its solutions run (the code is the English's; only comments are Korean).

    Raises:
        ProgramError: no such notebook, or two programs with one name.
    """
    path = Path(notebook)
    if not path.suffix:
        from . import i18n

        lang = i18n.language_of()
        edition = notebooks_dir() / lang / f"{notebook}.ipynb"
        path = edition if lang != "en" and edition.exists() else notebooks_dir() / f"{notebook}.ipynb"
    if not path.exists():
        raise ProgramError(f"no notebook {path}")
    out: dict[str, Program] = {}
    for i, cell in enumerate(_cells(path)):
        p = parse_cell(cell, origin=f"{path.name}, code cell {i}")
        if p is None:
            continue
        if p.name in out:
            raise ProgramError(f"{path.name} defines program {p.name} twice")
        out[p.name] = p
    return out


def from_notebook(notebook: str | Path, name: str) -> Program:
    """The program ``name`` as written in ``notebook`` (as saved on disk).

    Raises:
        ProgramError: no such notebook or program (the message lists the programs it has).
    """
    progs = notebook_programs(notebook)
    if name not in progs:
        raise ProgramError(f"{notebook} has no program {name!r}; it has: {', '.join(progs) or 'none'}")
    return progs[name]


def java_source(relative: str, start: str | None = None, end: str | None = None) -> "JavaSource":
    """The source of a Java client in ``kafka/src/main/java`` (``relative``, e.g.
    ``"kafkalab/clients/OffsetCommitConsumer.java"``), whole or from the first line containing
    ``start`` to the first following line containing ``end`` (both included).

    Raises:
        ProgramError: no such file, or a marker not found.
    """
    path = config.repo_root() / "kafka" / "src" / "main" / "java" / relative
    if not path.exists():
        raise ProgramError(f"no Java source {path}")
    lines = path.read_text().splitlines()
    lo, hi = 0, len(lines)
    if start is not None:
        found = [i for i, line in enumerate(lines) if start in line]
        if not found:
            raise ProgramError(f"{relative}: no line contains {start!r}")
        lo = found[0]
    if end is not None:
        found = [i for i, line in enumerate(lines) if end in line and i >= lo]
        if not found:
            raise ProgramError(f"{relative}: no line after {start!r} contains {end!r}")
        hi = found[0] + 1
    return JavaSource(relative, "\n".join(lines[lo:hi]) + "\n", lo + 1)


@dataclass(frozen=True)
class JavaSource:
    """Lines of a Java client's source, shown highlighted in a notebook."""

    relative: str
    text: str
    first_line: int

    def _repr_markdown_(self) -> str:
        return f"`kafka/src/main/java/{self.relative}`, from line {self.first_line}:\n\n```java\n{self.text}```"


def load_ipython_extension(ipython) -> None:
    """``%load_ext kafkalab.programs``: registers the ``%%program NAME`` cell magic, which
    compiles the cell and binds ``Program(NAME, cell)`` to ``NAME`` in the notebook (it does
    not run the program)."""

    def program(line: str, cell: str) -> None:
        p = parse_cell(f"{MAGIC} {line}\n{cell}")
        assert p is not None
        ipython.user_ns[p.name] = p

    ipython.register_magic_function(program, magic_kind="cell", magic_name="program")


#: The confluent-kafka client constructors whose settings ``program_settings`` reads.
CLIENTS = ("Producer", "Consumer", "ShareConsumer", "AdminClient", "SerializingProducer", "DeserializingConsumer")


def program_settings(source: str) -> dict:
    """The settings a program's text gives its clients, read with ``ast`` (nothing runs): every
    string key of the dict literals inside the first argument of each client constructor
    (``CLIENTS``: ``Producer(lab.conf | {...})``, ``Consumer(...)``...), merged in the order the
    calls appear (a later client's key wins). A name in that argument stands for the dict
    literals assigned to it at the top level (``conf = {...}``; ``Producer(conf)``). Values are
    Python values where they are literals (``True``, ``1000``, ``"all"``), else the expression's
    source text (``"lab.statistics"``). ``lab.conf`` (the harness's addresses and names) is not
    in the text, so not in the result. How an experiment names the settings a row ran with, so
    a learner's edit of the program flows into the result.

    Raises:
        ProgramError: ``source`` does not parse.

    >>> program_settings('p = Producer(lab.conf | {"acks": "all", "linger.ms": 5})')
    {'acks': 'all', 'linger.ms': 5}
    """
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ProgramError(f"a program that does not parse: line {e.lineno}: {e.msg}") from e
    assigned: dict[str, list[ast.AST]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)

    def dicts(expr: ast.AST, seen: frozenset[str] = frozenset()):
        for n in ast.walk(expr):
            if isinstance(n, ast.Dict):
                yield n
            elif isinstance(n, ast.Name) and n.id in assigned and n.id not in seen:
                for value in assigned[n.id]:
                    yield from dicts(value, seen | {n.id})

    out: dict = {}
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
                    and getattr(n.func, "id", getattr(n.func, "attr", None)) in CLIENTS),
                   key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        for d in dicts(call.args[0]):
            for k, v in zip(d.keys, d.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    try:
                        out[k.value] = ast.literal_eval(v)
                    except ValueError:
                        out[k.value] = ast.unparse(v)
    return out
