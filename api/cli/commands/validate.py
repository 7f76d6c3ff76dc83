"""``commest validate``: the estimator against the published runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_UNAVAILABLE, die
from api.cli.options import OutputFormat

app = verb_app()


class RowOrder(StrEnum):
    """How the table lists the rows: as the published-runs file holds them, or worst first."""

    FILE = "file"
    ERROR = "error"


Names = list[str] | None


def _names(flag: str, what: str) -> Any:
    """A repeatable option that narrows the rows the table lists."""
    return typer.Option(flag, help=f"List only {what}.", show_default=False, metavar="NAME")


@app.command()
def validate(
    output_format: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table or json.")
    ] = OutputFormat.TABLE,
    sources: Annotated[
        Names,
        _names("--source", "this source's rows (repeat for several), e.g. megatron_bridge_perf"),
    ] = None,
    models: Annotated[
        Names, _names("--model", "this model's rows (repeat for several), e.g. qwen3-30b-a3b")
    ] = None,
    kinds: Annotated[
        Names, _names("--kind", "rows of this kind (repeat: rows of every kind given), e.g. moe")
    ] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="Table only: the summaries, not the row lists.")
    ] = False,
    order: Annotated[
        RowOrder, typer.Option("--sort", help="file order, or error: the largest |error| first.")
    ] = RowOrder.FILE,
) -> None:
    """Compare the estimator against the published runs (the validation report)."""
    if summary and output_format is OutputFormat.JSON:
        raise typer.BadParameter(
            "it shapes the table; the JSON always carries every section", param_hint="--summary"
        )
    from estimator.errors import ValidationError

    try:
        from profiles.validation.report import run_validation
    except ImportError as exc:
        die(f"the validation report is not available in this install: {exc}", EXIT_UNAVAILABLE)
    report = run_validation()
    if sources or kinds or models:
        try:
            report = report.select(sources=sources or (), kinds=kinds or (), models=models or ())
        except ValidationError as exc:
            raise typer.BadParameter(
                f"{exc.value!r}: {exc.rule}", param_hint=f"--{exc.field}"
            ) from exc
    if order is RowOrder.ERROR:
        report.rows.sort(key=lambda row: -abs(row.error_pct))
    if output_format is OutputFormat.JSON:
        rendered = report.to_json()
    else:
        rendered = report.to_table(summary_only=summary)
    typer.echo(rendered.rstrip("\n"))
