"""``notebooks/workshop_guide.md`` points an instructor at commands and notebook sections: each
must exist, and each agenda must fit its length."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from kafkalab.cli import main

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
GUIDE = (NOTEBOOK_DIR / "workshop_guide.md").read_text()


def agenda(title: str) -> list[tuple[int, str]]:
    """The (minute, part) rows of the agenda table under the heading starting with ``title``."""
    block = GUIDE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d):(\d\d) \| (.*?) \|", block, re.M)
    return [(int(h) * 60 + int(m), part) for h, m, part in rows]


def notebook_sections(number: str) -> set[str]:
    path = next(NOTEBOOK_DIR.glob(f"{number}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    return {line[3:].strip() for c in nb.cells if c.cell_type == "markdown"
            for line in c.source.splitlines() if line.startswith("## ")}


def test_every_kafkalab_command_the_guide_names_exists() -> None:
    named = set(re.findall(r"`kafkalab (\w[\w-]*)", GUIDE))
    assert named >= {"status", "restore", "logs", "up", "down", "wipe", "run"}
    assert named <= set(main.commands), f"unknown commands: {named - set(main.commands)}"
    experiments = set(re.findall(r"kafkalab run ([a-z][\w-]+)", GUIDE))
    assert experiments and experiments <= set(main.commands["run"].commands), experiments


@pytest.mark.parametrize("title,length", [("A 2-hour agenda", 120), ("A 3-hour agenda", 180)])
def test_each_agenda_runs_forward_ends_on_time_and_has_a_break(title: str, length: int) -> None:
    rows = agenda(title)
    minutes = [m for m, _ in rows]
    assert minutes == sorted(minutes) and len(set(minutes)) == len(minutes)
    assert minutes[0] == 0 and minutes[-1] == length and rows[-1][1] == "End"
    assert any("Break" in part for _, part in rows)


@pytest.mark.parametrize("title", ["A 2-hour agenda", "A 3-hour agenda"])
def test_every_section_an_agenda_names_is_in_its_notebook(title: str) -> None:
    checked = 0
    for _, part in agenda(title):
        for number, first, last in re.findall(r"\b(\d\d) sections? (\d+)(?:-(\d+))?", part):
            heads = notebook_sections(number)
            wanted = range(int(first), int(last or first) + 1)
            missing = [k for k in wanted if not any(h.startswith(f"{k}. ") for h in heads)]
            assert not missing, f"notebook {number} has no section {missing}: {sorted(heads)}"
            checked += 1
        for number, name in re.findall(r"\b(\d\d) \"([^\"]+)\"", part):
            assert name in notebook_sections(number), f"notebook {number} has no section {name!r}"
            checked += 1
    assert checked >= 5


def test_the_port_and_state_variables_the_guide_uses_are_the_ones_kafkalab_reads() -> None:
    config = (NOTEBOOK_DIR.parent / "src" / "kafkalab" / "config.py").read_text()
    for var in ("KAFKALAB_PORT_BASE", "KAFKALAB_STATE"):
        assert var in GUIDE and f'os.environ.get("{var}"' in config


def test_the_ways_in_the_guide_gives_are_the_readmes() -> None:
    readme = (NOTEBOOK_DIR.parent / "README.md").read_text()
    for command in ("make lab", "docker compose --profile lab up lab"):
        assert f"`{command}`" in GUIDE and f"`{command}`" in readme, command
