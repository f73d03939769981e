"""requirements.lock: one version of every Python dependency for Python 3.11, 3.12 and 3.13 on
Linux and macOS, what pyproject.toml pins, and what this virtualenv has. Pure tests (no network).

The lock is made by ``make lock`` (uv's universal resolution, ``uv pip compile --universal``) and
installed with plain pip as constraints (``pip install -c requirements.lock -e '.[test,book]'``,
``make setup``). Where a dependency's newest version drops an older Python, a universal resolver
forks: two lines for one package, each with a ``python_full_version`` marker (soupsieve 3.0.2+
needs Python 3.11.5, so it forked at 3.11.5 until soupsieve was pinned at 2.10). Such a lock
installs different versions on different Pythons: the tests below fail on it.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
MAKEFILE = ROOT / "Makefile"

#: The Pythons and platforms the lock is for: (python_full_version, sys_platform, platform_system).
TARGETS = [(python, platform, system)
           for python in ("3.11.0", "3.11.4", "3.11.5", "3.11.99", "3.12.0", "3.12.99", "3.13.0", "3.13.99")
           for platform, system in (("linux", "Linux"), ("darwin", "Darwin"))]
#: Installed in a virtualenv but not dependencies: pip itself (setuptools only on 3.11's venvs).
NOT_DEPENDENCIES = {"pip", "setuptools", "wheel", "kafkalab"}


def lock_lines() -> list[str]:
    return [line.strip() for line in LOCK.read_text().splitlines() if line.strip() and not line.startswith("#")]


def lock() -> list[Requirement]:
    return [Requirement(line) for line in lock_lines()]


def environment(python: str, platform: str, system: str) -> dict[str, str]:
    env = default_environment()
    env.update(python_full_version=python, python_version=".".join(python.split(".")[:2]), sys_platform=platform,
               platform_system=system, os_name="posix", implementation_name="cpython",
               platform_python_implementation="CPython")
    return env


def pinned(req: Requirement) -> str:
    specs = list(req.specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"{req}: every lock line pins one exact version"
    return specs[0].version


def test_lock_header_says_how_to_regenerate_it_and_the_makefile_does_so_with_a_pinned_uv() -> None:
    header = [line for line in LOCK.read_text().splitlines() if line.startswith("#")]
    assert any("make lock" in line for line in header), f"requirements.lock's header should name `make lock`: {header}"
    recipe = MAKEFILE.read_text().split("\nlock:", 1)[1].split("\n\n", 1)[0]
    uv = re.search(r"^UV_VERSION := (\S+)$", MAKEFILE.read_text(), re.M)
    assert uv and re.fullmatch(r"\d+\.\d+\.\d+", uv.group(1)), "the Makefile pins uv's version (UV_VERSION)"
    assert "uv==$(UV_VERSION)" in recipe, recipe
    for flag in ("--universal", "--python-version 3.11", "--extra test", "--extra book", "-o requirements.lock"):
        assert flag in recipe, f"make lock should run uv pip compile with {flag}: {recipe}"


def test_every_lock_line_pins_one_exact_version() -> None:
    for req in lock():
        pinned(req)


def test_each_package_has_one_line_so_every_python_gets_the_same_version() -> None:
    names = [canonicalize_name(req.name) for req in lock()]
    forks = sorted({n for n in names if names.count(n) > 1})
    assert not forks, (f"requirements.lock has more than one version of {forks} (a fork on a marker): pin one "
                       "version that installs on Python 3.11-3.13 in pyproject.toml or the lock, then make lock")


def test_the_lock_installs_the_same_versions_on_every_supported_python_and_platform() -> None:
    installed: dict[tuple[str, str, str], dict[str, str]] = {}
    for target in TARGETS:
        env = environment(*target)
        installed[target] = {canonicalize_name(r.name): pinned(r) for r in lock()
                             if r.marker is None or r.marker.evaluate(env)}
    union: dict[str, set[str]] = {}
    for versions in installed.values():
        for name, version in versions.items():
            union.setdefault(name, set()).add(version)
    assert all(len(v) == 1 for v in union.values()), {n: v for n, v in union.items() if len(v) > 1}
    for target, versions in installed.items():
        assert "numpy" in versions and "pyspark" in versions, f"{target}: the lock installs nothing there"


def test_the_lock_pins_exactly_what_pyproject_pins_and_installs_it_everywhere() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    wanted = [Requirement(d) for d in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        wanted += [Requirement(d) for d in extra]
    locked = {canonicalize_name(r.name): r for r in lock()}
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is in pyproject.toml but not in requirements.lock: make lock"
        assert pinned(locked[name]) == pinned(req), (
            f"pyproject.toml pins {req}, requirements.lock {locked[name]}: make lock")
        assert locked[name].marker is None, f"{locked[name]}: a direct dependency is installed everywhere"


def test_this_virtualenv_has_exactly_the_locked_versions() -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("not in a virtualenv (make setup makes .venv): the installed packages are not the project's")
    env = default_environment()
    locked = {canonicalize_name(r.name): pinned(r) for r in lock() if r.marker is None or r.marker.evaluate(env)}
    have = {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    differ = {n: (have.get(n), v) for n, v in locked.items() if have.get(n) != v}
    assert not differ, f"installed vs locked (make setup installs the lock): {differ}"
    unlocked = sorted(set(have) - set(locked) - NOT_DEPENDENCIES)
    assert not unlocked, (f"installed but not in requirements.lock (on Python {sys.version.split()[0]}): "
                          f"{unlocked}: make lock")
