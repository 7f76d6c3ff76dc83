"""``commest plan``: every valid layout for a GPU count, ranked."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.inputs import require_request
from api.cli.options import FormatOpt, OutputFormat, RequestOpt, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_app()


@app.command()
def plan(
    ctx: typer.Context,
    request: RequestOpt = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="GPU count to plan for.")] = None,
    top_k: Annotated[int | None, typer.Option(min=1, help="How many layouts to return.")] = None,
    output_format: FormatOpt = OutputFormat.JSON,
) -> None:
    """Rank every valid layout for a GPU count: POST /v1/plans."""
    body = require_request(request)
    body.pop("layout", None)
    if gpus is not None:
        body["gpus"] = gpus
    if top_k is not None:
        body["top_k"] = top_k
    with open_client(options(ctx)) as client:
        result = client.plan(body)
    if output_format is OutputFormat.JSON:
        emit_json(result)
        return
    from api.cli.tables import plan_rows, rows_table, stdout_console

    console = stdout_console()
    console.print(
        f"evaluated {result.get('evaluated')} layouts, {result.get('feasible')} feasible",
        highlight=False,
    )
    layouts = result.get("layouts") or []
    if layouts:
        console.print(rows_table("Best layouts", plan_rows(layouts)))
