"""What the lab can do without, and says so: the parts that need root to install (Chromium, a CJK
font, strace) or Linux (strace, ``/proc/<pid>/io``).

``make lab``, ``make check`` and ``make test`` run as a plain user on Linux or macOS. Where one of
these is missing, what depends on it is skipped, and one line (``note()``, printed by ``kafkalab
extras`` before ``make test`` and ``make lab``) says what is skipped here and the command that
installs the rest on this platform. On CI (``CI=true``) nothing may be skipped: ``.ci/run``
installs them as root, and a missing one is an error there (``available`` raises), because a
skip on CI would hide a failure.

Sources: strace(1) and ptrace(2) (``PTRACE_ATTACH`` needs the same uid and, under Yama's
``kernel.yama.ptrace_scope`` 1, as on Ubuntu, the tracer to be an ancestor of the tracee or hold
``CAP_SYS_PTRACE``); proc(5) (``/proc/<pid>/io``); Playwright's ``executable_path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import KafkalabError

#: Where Chromium is looked for when ``KAFKALAB_CHROMIUM`` is not set: Debian's package, Ubuntu's
#: snap, Homebrew's cask on macOS.
CHROMIUM_PATHS = ("/usr/bin/chromium", "/snap/bin/chromium", "/Applications/Chromium.app/Contents/MacOS/Chromium")


class OptionalMissing(KafkalabError):
    """Something optional is missing where it must not be (on CI, ``CI=true``)."""


@dataclass(frozen=True)
class Extra:
    """One optional part of the machine.

    Attributes:
        name: the key (``chromium``, ``cjk-font``, ``strace``, ``proc``).
        what: what it is, as the note names it when it is missing.
        enables: what is skipped without it.
        install: the install command per platform (``debian``, ``ubuntu``, ``macos``); absent:
            cannot be had there (Linux only).
    """

    name: str
    what: str
    enables: str
    install: dict[str, str]


EXTRAS = (
    Extra("chromium", "Chromium", "the browser tests (tests/test_browser.py)",
          {"debian": "sudo apt install chromium", "ubuntu": "sudo snap install chromium",
           "macos": "brew install --cask chromium"}),
    Extra("cjk-font", "CJK font", "the Korean edition's glyph checks in the browser tests",
          {"debian": "sudo apt install fonts-noto-cjk", "ubuntu": "sudo apt install fonts-noto-cjk"}),
    Extra("strace", "strace, or no right to trace the brokers",
          "notebook 10's system-call counts (sendfile against TLS)",
          {"debian": "sudo apt install strace", "ubuntu": "sudo apt install strace && "
           "sudo sysctl kernel.yama.ptrace_scope=0"}),
    Extra("proc", "/proc/<pid>/io", "notebook 10's page-cache check (the leader's disk reads)", {}),
)


def platform_name() -> str:
    """``macos``, ``ubuntu``, ``debian`` (any other Linux is told Debian's commands), or
    ``sys.platform`` elsewhere. Read from ``sys.platform`` and ``/etc/os-release`` (``ID``)."""
    if sys.platform == "darwin":
        return "macos"
    if not sys.platform.startswith("linux"):
        return sys.platform
    try:
        fields = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    except OSError:
        fields = {}
    return "ubuntu" if fields.get("ID", "").strip('"') == "ubuntu" else "debian"


def chromium() -> Path | None:
    """The Chromium binary the browser tests drive: ``$KAFKALAB_CHROMIUM`` if set, else the first
    of :data:`CHROMIUM_PATHS` that exists; None if there is none."""
    if os.environ.get("KAFKALAB_CHROMIUM"):
        path = Path(os.environ["KAFKALAB_CHROMIUM"])
        return path if path.exists() else None
    return next((Path(p) for p in CHROMIUM_PATHS if Path(p).exists()), None)


def _has_cjk_font() -> bool:
    if sys.platform == "darwin":
        return True  # macOS ships Apple SD Gothic Neo
    if not shutil.which("fc-list"):
        return False
    out = subprocess.run(["fc-list", ":lang=ko", "family"], capture_output=True, text=True, timeout=30).stdout
    return bool(out.strip())


def _ptrace_allowed() -> bool:
    """Whether this user may attach strace to a process it did not start: root, or Yama's
    ``ptrace_scope`` 0 (or no Yama). Another user's process is never allowed without root."""
    if os.geteuid() == 0:
        return True
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text()) == 0
    except (OSError, ValueError):
        return True


def is_missing(name: str) -> bool:
    """Whether the extra ``name`` (see :data:`EXTRAS`) is missing on this machine.

    Raises:
        KeyError: no such extra.
    """
    linux = sys.platform.startswith("linux")
    checks = {
        "chromium": lambda: chromium() is None,
        "cjk-font": lambda: not _has_cjk_font(),
        "strace": lambda: not (linux and shutil.which("strace") and _ptrace_allowed()),
        "proc": lambda: not (linux and Path(f"/proc/{os.getpid()}/io").exists()),
    }
    return checks[name]()


def missing() -> list[Extra]:
    """The extras missing here, in :data:`EXTRAS` order."""
    return [e for e in EXTRAS if is_missing(e.name)]


def on_ci() -> bool:
    """``CI=true`` (or 1): the run where nothing may be skipped."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def note(extras: list[Extra] | None = None, platform: str | None = None) -> str:
    """One line: what is skipped here and how to install what can be installed on ``platform``
    (default: this one); "" when nothing is missing."""
    extras = missing() if extras is None else extras
    if not extras:
        return ""
    platform = platform or platform_name()
    skipped = "; ".join(f"{e.enables} (no {e.what})" for e in extras)
    steps = [step for e in extras if platform in e.install for step in e.install[platform].split(" && ")]
    apt = [step.removeprefix("sudo apt install ") for step in steps if step.startswith("sudo apt install ")]
    commands = ([f"sudo apt install {' '.join(apt)}"] if apt else []) + [
        step for step in steps if not step.startswith("sudo apt install ")]
    out = f"note: skipped here: {skipped}."
    if commands:
        out += f" To install: {' && '.join(commands)}."
    unavailable = [e.name for e in extras if platform not in e.install]
    if unavailable:
        out += f" Linux only (not on {platform}): {', '.join(unavailable)}."
    return out


def available(name: str) -> bool:
    """True when the extra ``name`` is here. When it is not: prints why and what is skipped
    (one line) and returns False; on CI raises instead, since CI installs everything.

    Raises:
        OptionalMissing: missing on CI (``CI=true``).
        KeyError: no such extra.
    """
    if not is_missing(name):
        return True
    extra = next(e for e in EXTRAS if e.name == name)
    line = note([extra])
    if on_ci():
        raise OptionalMissing(f"on CI nothing may be skipped, and {extra.what} is missing. {line}")
    print(line)
    return False
