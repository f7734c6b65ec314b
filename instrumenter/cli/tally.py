"""Counting what each command did and choosing its exit code, in black's spirit (its ``report.py``).

0: success (written, or nothing to do); 1: a check failed (``--check`` found a
script that would change, ``compare --fail-if-slower`` found NEW slower); 2: bad usage or input (missing file, syntax error, a file in
the way); 123: an internal error. Messages go to stderr, so stdout carries
only what was asked for (a diff, JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import click

from ..profile.console import printable


class ExitCode(IntEnum):
    OK = 0
    CHECK_FAILED = 1
    WOULD_CHANGE = 1  # ``--check``'s name for it
    INPUT_ERROR = 2
    INTERNAL_ERROR = 123


@dataclass
class Tally:
    """Outcomes of one command run; ``exit_code`` is derived from them."""

    check: bool = False
    quiet: bool = False
    changed: int = 0
    unchanged: int = 0
    input_errors: int = 0
    internal_errors: int = 0
    failed_checks: int = 0

    def changed_file(self, message: str) -> None:
        self.changed += 1
        self._say(message)

    def unchanged_file(self, message: str) -> None:
        self.unchanged += 1
        self._say(message)

    def failed_check(self, message: str) -> None:
        """A check the user asked for failed (exit 1), said on stderr even with ``--json``."""
        self.failed_checks += 1
        click.echo(click.style("check failed: ", fg="yellow", bold=True) + _lines(message), err=True)

    def note(self, message: str) -> None:
        self._say(message, dim=True)

    def input_error(self, message: str) -> None:
        self.input_errors += 1
        click.echo(click.style("error: ", fg="red", bold=True) + _lines(message), err=True)

    def internal_error(self, message: str) -> None:
        self.internal_errors += 1
        click.echo(
            click.style("internal error: ", fg="red", bold=True)
            + _lines(message)
            + "\nThis is a bug in autoitt, not in your script; nothing was written.",
            err=True,
        )

    def _say(self, message: str, dim: bool = False) -> None:
        if not self.quiet:
            shown = _lines(message)
            click.echo(click.style(shown, dim=dim) if dim else shown, err=True)

    @property
    def exit_code(self) -> ExitCode:
        if self.internal_errors:
            return ExitCode.INTERNAL_ERROR
        if self.input_errors:
            return ExitCode.INPUT_ERROR
        if (self.check and self.changed) or self.failed_checks:
            return ExitCode.CHECK_FAILED
        return ExitCode.OK


def _lines(message: str) -> str:
    """A message's lines, each printable (a file name's escape sequence or carriage return shown escaped,
    not run by the terminal); a message of several lines keeps them."""
    return "\n".join(printable(line) for line in message.split("\n"))
