"""``commest validate``: the estimator against the published runs."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_UNAVAILABLE, die
from api.cli.options import OutputFormat

app = verb_app()


@app.command()
def validate(
    output_format: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table or json.")
    ] = OutputFormat.TABLE,
) -> None:
    """Compare the estimator against the published runs (the validation report)."""
    try:
        from profiles.validation.report import run_validation
    except ImportError as exc:
        die(f"the validation report is not available in this install: {exc}", EXIT_UNAVAILABLE)
    report = run_validation()
    rendered = report.to_json() if output_format is OutputFormat.JSON else report.to_table()
    typer.echo(rendered.rstrip("\n"))
