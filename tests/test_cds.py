"""Class-data sharing archives (``kafkalab.cds``): naming, flags, and the check before adoption."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kafkalab import cds, cluster


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("KAFKALAB_JARS", str(tmp_path / "jars-home"))
    return tmp_path


def test_an_archive_is_named_by_kind_java_and_the_jars_a_wildcard_names(state: Path) -> None:
    jars = state / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"a")
    cp = f"{jars}/*"
    first = cds.archive_path("node", "/bin/sh", cp)
    assert first.parent == state / "jars-home" / "cds" and first.name.startswith("node-") and first.suffix == ".jsa"
    assert cds.archive_path("tool", "/bin/sh", cp) != first, "a tool's archive is not a node's"
    assert cds.archive_path("node", "/bin/ls", cp) != first, "another java, another archive"
    (jars / "b.jar").write_bytes(b"b")
    assert cds.archive_path("node", "/bin/sh", cp) != first, "another jar in the wildcard folder, another archive"


def test_flags_use_an_archive_only_once_it_is_in_place(state: Path) -> None:
    assert cds.use_flags("tool", "/bin/sh", "x.jar") == []
    flags, tmp = cds.exit_dump_flags("tool", "/bin/sh", "x.jar")
    final = cds.archive_path("tool", "/bin/sh", "x.jar")
    assert flags[0] == f"-XX:ArchiveClassesAtExit={tmp}" and tmp.parent == final.parent and tmp != final
    assert "-Xlog:all=warning:stderr:uptime,level,tags" in flags, "the dump's warnings go to stderr, not the tool's stdout"
    final.write_bytes(b"archive")
    assert cds.use_flags("tool", "/bin/sh", "x.jar") == [f"-XX:SharedArchiveFile={final}"]
    assert cds.exit_dump_flags("tool", "/bin/sh", "x.jar") == ([], None), "nothing to write once it exists"


@pytest.mark.jvm
def test_a_truncated_archive_is_refused_and_a_whole_one_adopted(state: Path) -> None:
    java = cluster.java_executable()
    cp = str(state)
    flags, tmp = cds.exit_dump_flags("tool", java, cp)
    done = subprocess.run([java, *flags, "-cp", cp, "-version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and tmp.stat().st_size > 0, done.stderr
    whole = tmp.read_bytes()
    tmp.write_bytes(whole[: len(whole) // 3])   # a JVM that maps this one dies of SIGBUS
    assert not cds.adopt(tmp, "tool", java, cp), "a truncated archive is refused"
    assert not tmp.exists() and cds.use_flags("tool", java, cp) == []
    assert not list(Path.cwd().glob("hs_err_pid*.log")) and sorted(tmp.parent.iterdir()) == [], \
        "the crash of the check leaves no report behind"
    tmp.write_bytes(whole)
    assert cds.adopt(tmp, "tool", java, cp), "the whole archive maps with -Xshare:on"
    assert not tmp.exists() and cds.use_flags("tool", java, cp) == [f"-XX:SharedArchiveFile={cds.archive_path('tool', java, cp)}"]
