"""The package's layers, read from the source (``ast``, nothing imported): no import cycle, the
shared layer never imports ``experiments``, and no experiment family imports another's modules.

Every import counts, wherever it is written (module level, inside a function, under
``if TYPE_CHECKING:``): a lazy or type-only import is still an arrow between two modules.

A family is one notebook's modules: ``NAME.py`` (run it), ``NAME_analysis.py`` (Spark),
``NAME_plots.py`` (matplotlib), all of family ``NAME``. ``kafkalab.cli`` is the entry point above
both layers (``kafkalab run NAME`` imports the experiments), so it is in neither.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "kafkalab"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

#: Modules above both layers, allowed to import anything.
ENTRY_POINTS = {f"{PACKAGE}.cli"}

#: Cross-family imports being removed in parallel branches of issue 12; the coordinator empties
#: this after merging them. Each pair is (importing family, imported family).
KNOWN_CROSS_FAMILY: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (``from X import Y`` counts as ``X.Y`` when that
    is a module, else as ``X``)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                out.add(f"{target}.{a.name}" if f"{target}.{a.name}" in known else target)
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def family(module: str) -> str | None:
    """Family of an ``experiments`` module, None for any other module."""
    prefix = f"{PACKAGE}.experiments."
    if not module.startswith(prefix):
        return None
    short = module[len(prefix):]
    for suffix in ("_analysis", "_plots"):
        if short.endswith(suffix):
            short = short[: -len(suffix)]
    return short


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_the_import_reader_resolves_relative_and_absolute_imports(tmp_path: Path) -> None:
    known = {"kafkalab.spark", "kafkalab.experiments", "kafkalab.experiments.tour", "kafkalab.experiments.x"}
    src = tmp_path / "x.py"
    src.write_text("from .. import spark as kspark\nfrom . import tour\nfrom .tour import TourRun\n"
                   "def f():\n    import kafkalab.spark\n")
    assert imports_of("kafkalab.experiments.x", src, known) == {"kafkalab.spark", "kafkalab.experiments.tour"}


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == [], "modules that import each other, directly or around a loop"


def test_the_shared_layer_imports_nothing_from_experiments() -> None:
    bad = {m: sorted(d for d in deps if family(d)) for m, deps in graph().items()
           if family(m) is None and m not in ENTRY_POINTS and m != f"{PACKAGE}.experiments"}
    assert {m: d for m, d in bad.items() if d} == {}, "the shared layer points down only"


def test_no_experiment_family_imports_another_familys_module() -> None:
    pairs: dict[tuple[str, str], list[str]] = {}
    for m, deps in graph().items():
        for d in deps:
            fm, fd = family(m), family(d)
            if fm and fd and fm != fd:
                pairs.setdefault((fm, fd), []).append(f"{m} -> {d}")
    unknown = {k: v for k, v in pairs.items() if k not in KNOWN_CROSS_FAMILY}
    assert unknown == {}, "a helper two families need belongs in the shared layer"
    stale = sorted(set(KNOWN_CROSS_FAMILY) - set(pairs))
    assert stale == [], f"fixed since: remove {stale} from KNOWN_CROSS_FAMILY"
