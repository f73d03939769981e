"""The README's two commands, as make would run them (``make -n``: printed, not run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Every test here runs make (and make its recipes' shells): Python and make are all they need.
pytestmark = pytest.mark.subprocess


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


# --- check-tools: which Python and Java make takes, and what it says when they are missing -----

def stub(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)


def stub_python(folder: Path, name: str, version: str) -> None:
    """A ``python3.X`` that answers ``-V`` with ``version`` and whose version check (``-c``)
    passes exactly when ``version`` is 3.11-3.13; ``version=""``: a broken one (a pyenv shim of a
    version not selected), which fails whatever it is asked."""
    if not version:
        stub(folder, name, f'echo "pyenv: {name}: command not found" >&2; exit 127')
        return
    ok = 0 if version.split(".")[:2] in (["3", "11"], ["3", "12"], ["3", "13"]) else 1
    stub(folder, name, f'[ "$1" = -V ] && {{ echo "Python {version}"; exit 0; }}; exit {ok}')


def stub_java(folder: Path, spec: str) -> None:
    """A ``java`` whose ``-XshowSettings:properties -version`` names ``java.specification.version = spec``."""
    stub(folder, "java", f'echo "    java.specification.version = {spec}" >&2; echo \'openjdk version "{spec}"\' >&2')


def check_tools(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``make check-tools`` with only ``folder`` (the stubs) and the system's own tools on PATH,
    no JAVA_HOME; ``folder`` shadows every python3.X and java of the system."""
    stub(folder, "mvn", "exit 0")
    for name in ("python3.11", "python3.12", "python3.13", "java"):
        if not (folder / name).exists():
            stub(folder, name, "exit 127")  # hides the system's own, if it has one
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON", "JAVA_HOME", "MAKEFLAGS", "MAKELEVEL", "KAFKALAB_JARS", "KAFKALAB_VENV")}
    env["PATH"] = f"{folder}:/usr/bin:/bin"
    return subprocess.run(["make", "--no-print-directory", "check-tools", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_make_takes_the_newest_python_of_311_to_313_that_runs(tmp_path: Path) -> None:
    stub_python(tmp_path, "python3.13", "")  # on PATH but broken: skipped
    stub_python(tmp_path, "python3.12", "3.12.3")
    stub_python(tmp_path, "python3.11", "3.11.2")
    stub_java(tmp_path, "21")
    cp = check_tools(tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "using python3.12 (Python 3.12.3)\nusing Java 21 (" in cp.stdout, cp.stdout
    stub_python(tmp_path, "python3.13", "3.13.5")
    assert "using python3.13 (Python 3.13.5)" in check_tools(tmp_path).stdout, "3.13 is the newest that runs"
    override = check_tools(tmp_path, "PYTHON=python3.11")
    assert "using python3.11 (Python 3.11.2)" in override.stdout, "PYTHON= chooses, whatever else is there"


def test_make_names_all_three_pythons_when_none_is_found(tmp_path: Path) -> None:
    stub_python(tmp_path, "python3.10", "3.10.12")
    stub_java(tmp_path, "21")
    cp = check_tools(tmp_path)
    assert cp.returncode != 0
    assert "none of python3.13, python3.12, python3.11 found" in cp.stdout, cp.stdout
    assert "apt install python3 python3-venv" in cp.stdout and "brew install python@3.13" in cp.stdout, cp.stdout
    old = check_tools(tmp_path, "PYTHON=python3.10")
    assert old.returncode != 0 and "PYTHON=python3.10 is not Python 3.11, 3.12 or 3.13 (Python 3.10.12)" in old.stdout, \
        old.stdout


def test_make_wants_java_17_or_newer_and_says_how_to_install_it(tmp_path: Path) -> None:
    from kafkalab.errors import JAVA_INSTALL

    stub_python(tmp_path, "python3.11", "3.11.2")
    for spec in ("1.8", "11"):
        stub_java(tmp_path, spec)
        cp = check_tools(tmp_path)
        assert cp.returncode != 0, f"Java {spec} was accepted"
        assert f"is Java {spec}: Kafka 4 and Spark 4 need a JDK 17 or newer ({JAVA_INSTALL})" in cp.stdout, cp.stdout
    for spec in ("17", "21", "25"):
        stub_java(tmp_path, spec)
        cp = check_tools(tmp_path)
        assert cp.returncode == 0 and f"using Java {spec} (" in cp.stdout, f"Java {spec}: {cp.stdout}{cp.stderr}"
    stub(tmp_path, "java", "exit 127")  # a java that does not run (a macOS /usr/bin/java without a JDK)
    cp = check_tools(tmp_path)
    assert cp.returncode != 0 and f"is Java of unknown version: Kafka 4 and Spark 4 need a JDK 17 or newer " \
        f"({JAVA_INSTALL})" in cp.stdout, cp.stdout


def test_make_takes_java_from_java_home_first(tmp_path: Path) -> None:
    stub_python(tmp_path, "python3.11", "3.11.2")
    stub_java(tmp_path, "11")
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    stub_java(home / "bin", "21")
    cp = check_tools(tmp_path, f"JAVA_HOME={home}")
    assert cp.returncode == 0 and f"using Java 21 ({home}/bin/java)" in cp.stdout, cp.stdout + cp.stderr


# --- make check: Python alone (issue 35) ---------------------------------------------------------

#: What the Makefile's recipes and $(shell) calls run, apart from Python, java and mvn.
SYSTEM_TOOLS = ("make", "bash", "sh", "sed", "head", "find", "id", "test", "touch")


def without_java(folder: Path) -> dict[str, str]:
    """An environment whose PATH holds ``folder`` (the stubs) and links to ``SYSTEM_TOOLS``
    alone: no java, no mvn, no JAVA_HOME (a machine without them). A ``java`` or ``mvn`` stub put
    in ``folder`` later leaves a mark in ``folder/ran`` when it runs."""
    tools = folder / "system"
    tools.mkdir(exist_ok=True)
    for name in SYSTEM_TOOLS:
        if (found := shutil.which(name)) and not (tools / name).exists():
            (tools / name).symlink_to(found)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON", "JAVA_HOME", "MAKEFLAGS", "MAKELEVEL", "KAFKALAB_JARS", "KAFKALAB_VENV")}
    env["PATH"] = f"{folder}:{tools}"
    return env


def make(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_make_check_needs_python_alone(tmp_path: Path) -> None:
    stub_python(tmp_path, "python3.11", "3.11.2")
    env = without_java(tmp_path)
    cp = make(env, "check-python")
    assert cp.returncode == 0 and cp.stdout == "using python3.11 (Python 3.11.2)\n", cp.stdout + cp.stderr
    # -B: as on a fresh clone, the venv built too
    dry = make(env, "-n", "-B", "check")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert not re.search(r"\b(java|javac|mvn|MVN|JAVA_HOME)\b|\.fetched|jars", dry.stdout), \
        f"make check runs Java or Maven, or fetches jars:\n{dry.stdout}"
    lines = dry.stdout.splitlines()
    assert "python3.11 -m venv .venv" in "\n".join(lines) and "pip install" in "\n".join(lines), lines
    assert lines[-1] == '.venv/bin/pytest tests -m "not cluster and not spark and not jvm" -p no:cacheprovider -q'
    stub(tmp_path, "java", f'echo java >> {tmp_path / "ran"}; exit 1')
    stub(tmp_path, "mvn", f'echo mvn >> {tmp_path / "ran"}; exit 1')
    assert make(env, "check-python").returncode == 0 and not (tmp_path / "ran").exists(), \
        "check-python ran java or mvn"


def test_setup_and_all_that_set_up_still_want_java_and_maven(tmp_path: Path) -> None:
    from kafkalab.errors import JAVA_INSTALL

    stub_python(tmp_path, "python3.11", "3.11.2")
    env = without_java(tmp_path)
    for target in ("setup", "jars", "lab", "test", "book"):
        dry = make(env, "-n", "-B", target).stdout
        assert "error: java not found" in dry and "mvn -q -B -s kafka/maven-settings.xml" in dry, (target, dry)
    cp = make(env, "setup")
    assert cp.returncode != 0 and cp.stdout == "using python3.11 (Python 3.11.2)\nerror: java not found: Kafka 4 " \
        f"and Spark 4 need a JDK 17 or newer ({JAVA_INSTALL})\n", "said before the venv is built: " + cp.stdout
    stub_java(tmp_path, "21")
    cp = make(env, "check-tools")
    assert cp.returncode != 0 and f"error: mvn not found: Maven fetches the Kafka jars ({JAVA_INSTALL})" in cp.stdout, \
        cp.stdout


def test_jars_fetched_elsewhere_are_used_and_maven_does_not_run(tmp_path: Path) -> None:
    # the lab image (.devcontainer/Dockerfile) sets KAFKALAB_JARS to the jars it fetched and
    # KAFKALAB_VENV to its venv: make lab and make check in a Dev Container use both
    stub_python(tmp_path, "python3.11", "3.11.2")
    env = without_java(tmp_path)
    jars = tmp_path / "jars"
    for part in ("broker", "spark"):
        (jars / part).mkdir(parents=True)
        (jars / part / ".fetched").touch()
    env.update(KAFKALAB_JARS=str(jars), KAFKALAB_VENV=str(tmp_path / "venv"))
    dry = make(env, "-n", "-B", "setup").stdout
    assert "mvn -q" not in dry and f"using the jars in {jars} (KAFKALAB_JARS)" in dry, dry
    assert f"{tmp_path / 'venv'}/bin/pip install" in dry, dry
    (jars / "spark" / ".fetched").unlink()
    assert "mvn -q -B -s kafka/maven-settings.xml" in make(env, "-n", "-B", "jars").stdout, \
        "jars only half fetched: Maven runs as on a fresh clone"


# --- README for day one ------------------------------------------------------------------------

def readme_block(after: str) -> list[str]:
    """The lines of the first fenced block after the line ``after`` in README.md."""
    text = (ROOT / "README.md").read_text().split(after, 1)[1]
    return text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()


def test_readme_tells_each_platform_what_to_install_and_then_two_commands() -> None:
    install = readme_block("Install them once:")
    for platform, command in (("# Debian 13", "sudo apt install python3 python3-venv openjdk-21-jdk-headless maven make git"),
                              ("# Ubuntu 24.04", "sudo apt install python3 python3-venv openjdk-21-jdk-headless maven make git"),
                              ("# macOS", "brew install python@3.13 openjdk@21 maven")):
        at = next(i for i, line in enumerate(install) if line.startswith(platform))
        assert install[at + 1] == command, f"README, {platform}: {install[at + 1]!r}"
    commands = [line.split("#")[0].strip() for line in readme_block("one of two commands:")]
    assert commands == ["make lab", "make test"], commands
    assert (ROOT / "benchmarks" / "README.md").exists() and "](benchmarks/README.md)" in (ROOT / "README.md").read_text()
