"""What every kafkalab command group shares."""

from __future__ import annotations

import functools
import re
import sys
from typing import Callable, Union

import click

from . import programs
from .errors import KafkalabError


class KafkalabGroup(click.Group):
    """A click group that prints a KafkalabError as one red line and exits with code 1
    (bad input and cluster faults are expected; a traceback would bury the message)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KafkalabError as e:
            click.secho(f"kafkalab: {e}", fg="red", err=True)
            sys.exit(1)


# ----------------------------------------------------------------------------- --show

#: What ``Program.origin`` says of a notebook cell (``programs.notebook_programs``), edited or not.
_ORIGIN = re.compile(r"^(?P<edited>(?:edited from )*)(?P<file>(?P<nn>\d+)_\w+\.ipynb), code cell (?P<cell>\d+)$")

#: A client program a run executes: a ``%%program`` cell (``programs.Program``) or the part of a
#: Java client's source a notebook shows (``programs.JavaSource``).
Shown = Union[programs.Program, programs.JavaSource]


def shows_programs(callback: Callable) -> Callable:
    """Give a ``kafkalab run`` command the ``--show`` flag. The callback does not see the flag:
    it hands the programs it is about to run to ``show_programs``, which prints them only
    when ``--show`` was given. Put it below ``@click.command`` and above the options it
    should follow in ``--help``."""
    @functools.wraps(callback)
    def flagged(*args, show: bool = False, **kwargs):
        return callback(*args, **kwargs)  # show_programs reads the flag from the context

    return click.option("--show", is_flag=True,
                        help="Print the source of each client program this run executes (a notebook's %%program "
                             "cell, or the part of a Java client's source the notebook shows) before running it; "
                             "on stderr with --json.")(flagged)


def program_heading(shown: Shown) -> str:
    """The line ``--show`` prints above a program: ``notebook 05 %%program processor
    (05_transactions.ipynb, code cell 12)``; an edited program (``Program.replace``) names the
    program it was edited from (``notebook 05 %%program reader, edited as uncommitted_reader
    (05_transactions.ipynb, code cell 14)``); a Java client, its file under the project and the
    first line shown."""
    if isinstance(shown, programs.JavaSource):
        return f"Java kafka/src/main/java/{shown.relative}, from line {shown.first_line}"
    m = _ORIGIN.match(shown.origin)
    if m is None:
        return f"%%program {shown.name} ({shown.origin})"
    cell = f"{m['file']}, code cell {m['cell']}"
    name = shown.name
    if m["edited"]:
        try:
            saved = programs.notebook_programs(programs.notebooks_dir() / m["file"]).values()
        except programs.ProgramError:
            saved = []
        original = next((p.name for p in saved if p.origin == cell), "a program")
        name = f"{original}, edited" + ("" if original == shown.name else f" as {shown.name}")
    return f"notebook {m['nn']} %%program {name} ({cell})"


def show_programs(*shown: Shown | None, also: str | None = None) -> None:
    """Print each program (``None``s skipped, a program given twice printed once), under its
    ``program_heading``, if the running command was given ``--show`` (``shows_programs``);
    else nothing. ``also``: one more line, for what runs besides (Kafka's own tools) or why
    nothing is shown. On stderr when the command prints JSON (its ``--json``), so stdout
    stays JSON.

    Raises:
        RuntimeError: called outside a click command.
    """
    ctx = click.get_current_context()
    if not ctx.params.get("show"):
        return
    to_stderr = bool(ctx.params.get("as_json"))
    seen = []
    for item in shown:
        if item is None or item in seen:
            continue
        seen.append(item)
        text = item.text if isinstance(item, programs.JavaSource) else item.source
        click.echo(f"# {program_heading(item)}\n{text.rstrip()}\n", err=to_stderr)
    if also:
        click.echo(f"# {also}", err=to_stderr)
