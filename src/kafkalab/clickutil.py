"""What every kafkalab command group shares."""

from __future__ import annotations

import sys

import click

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
