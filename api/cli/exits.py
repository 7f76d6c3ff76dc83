"""How a ``commest`` command ends: its exit codes, and the one-line messages on stderr.

Exit codes::

    0  success (a check that passed)
    1  a check that failed (predicted iteration time over the limit)
    2  bad input: a usage error, an unreadable file, or a 4xx problem-details answer
    3  the server or a dependency is unavailable (5xx, connection refused, missing module)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from estimator.errors import CommestError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3


def exit_code_for_status(status: int) -> int:
    """2 for a 4xx (the caller's input), 3 otherwise (the server's side)."""
    return EXIT_BAD_INPUT if 400 <= status < 500 else EXIT_UNAVAILABLE


class Died(typer.Exit):
    """The exit :func:`die` raises: it keeps the message, so that a command can still report
    why it ended (``commest check`` writes it into its JUnit report)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(code)
        self.message = message


def die(message: str, code: int) -> NoReturn:
    """``error: message`` on stderr, then exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise Died(message, code)


def note(message: str) -> None:
    """``note: message`` on stderr (the command goes on)."""
    typer.echo(f"note: {message}", err=True)


def die_of(exc: CommestError) -> NoReturn:
    """Exit on a domain error the command itself raised (not a service answer)."""
    from estimator.errors import ValidationError

    line = f"{exc.title}: {exc.message}"
    if isinstance(exc, ValidationError) and exc.value is None:  # something missing
        line = f"{exc.title}: {exc.field}: {exc.rule}"
    die(line, exit_code_for_status(exc.status))
