"""Options several verbs share, and the global options as a command reads them."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from api.cli.transport import Options


class OutputFormat(StrEnum):
    """How a verb prints its answer: the service's JSON, or tables for people (the CLI's own)."""

    JSON = "json"
    TABLE = "table"


RequestOpt = Annotated[
    str | None,
    typer.Option("--request", "-r", help="Request JSON file, or - for stdin.", show_default=False),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="json or table.")]
OutputOpt = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
]


def options(ctx: typer.Context) -> Options:
    """The global options (``--server``, ``--token``) of this invocation."""
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()
