"""kafkalab.optional: what is skipped without Chromium, a CJK font, strace or Linux, said in one
line with the install command of the platform; and on CI, nothing skipped. Pure tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kafkalab import optional
from kafkalab.cli import main

ALL = list(optional.EXTRAS)


def test_no_note_when_nothing_is_missing() -> None:
    assert optional.note([]) == ""


@pytest.mark.parametrize("platform", ["debian", "ubuntu", "macos"])
def test_the_note_is_one_line_naming_what_is_skipped(platform: str) -> None:
    line = optional.note(ALL, platform)
    assert "\n" not in line and line.startswith("note: skipped here: ")
    for extra in ALL:
        assert extra.enables in line, f"{extra.name}: the note should say what is skipped without it"


def test_debian_gets_one_apt_command_for_everything() -> None:
    line = optional.note(ALL[:3], "debian")
    assert "To install: sudo apt install chromium fonts-noto-cjk strace." in line, line
    assert line.count("apt install") == 1


def test_ubuntu_gets_the_chromium_snap_and_the_ptrace_setting() -> None:
    line = optional.note(ALL[:3], "ubuntu")
    assert "sudo apt install fonts-noto-cjk strace" in line and "sudo snap install chromium" in line, line
    assert "kernel.yama.ptrace_scope=0" in line, "Ubuntu's Yama setting stops strace -p of a broker it did not start"


def test_macos_gets_brew_and_is_told_what_is_linux_only() -> None:
    line = optional.note([optional.EXTRAS[0], optional.EXTRAS[2], optional.EXTRAS[3]], "macos")
    assert "To install: brew install --cask chromium." in line, line
    assert "Linux only (not on macos): strace, proc." in line, line
    assert "apt" not in line


def test_available_prints_the_note_and_says_no_off_ci(monkeypatch, capsys) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(optional, "is_missing", lambda name: name == "strace")
    assert optional.available("chromium") is True
    assert capsys.readouterr().out == ""
    assert optional.available("strace") is False
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "notebook 10's system-call counts" in out, out


def test_on_ci_a_missing_extra_is_an_error_not_a_skip(monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(optional, "is_missing", lambda name: True)
    with pytest.raises(optional.OptionalMissing, match="on CI nothing may be skipped, and Chromium is missing"):
        optional.available("chromium")


def test_kafkalab_chromium_names_the_browser(monkeypatch, tmp_path) -> None:
    browser = tmp_path / "chrome"
    monkeypatch.setenv("KAFKALAB_CHROMIUM", str(browser))
    assert optional.chromium() is None and optional.is_missing("chromium"), "a path that does not exist is no browser"
    browser.write_text("")
    assert optional.chromium() == browser and not optional.is_missing("chromium")


def test_strace_and_proc_are_missing_off_linux(monkeypatch) -> None:
    monkeypatch.setattr(optional.sys, "platform", "darwin")
    assert optional.is_missing("strace") and optional.is_missing("proc")
    assert optional.platform_name() == "macos" and not optional.is_missing("cjk-font")


def test_kafkalab_extras_prints_the_note_or_nothing(monkeypatch) -> None:
    monkeypatch.setattr(optional, "is_missing", lambda name: name == "cjk-font")
    result = CliRunner().invoke(main, ["extras"])
    assert result.exit_code == 0 and result.output.count("\n") == 1 and "no CJK font" in result.output, result.output
    monkeypatch.setattr(optional, "is_missing", lambda name: False)
    assert CliRunner().invoke(main, ["extras"]).output == ""


@pytest.mark.subprocess  # fc-list, strace -V, chromium --version: what `kafkalab extras` asks
def test_on_ci_nothing_optional_is_missing() -> None:
    if not optional.on_ci():
        pytest.skip("not CI: what is missing here is skipped with a note (kafkalab extras)")
    assert optional.missing() == [], f".ci/run installs everything as root: {optional.note()}"
