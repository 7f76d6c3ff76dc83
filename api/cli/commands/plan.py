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
    memory_headroom: Annotated[
        float | None,
        typer.Option(
            help="Fraction of GPU memory kept free (server default 0.10).", show_default=False
        ),
    ] = None,
    tie_tolerance: Annotated[
        float | None,
        typer.Option(help="Times within this fraction are one group (default 0.03)."),
    ] = None,
    tensor_within_node: Annotated[
        bool, typer.Option("--tensor-within-node", help="Only t dividing the GPUs per node.")
    ] = False,
    context_parallel: Annotated[
        list[int] | None,
        typer.Option(help="A context-parallel size to sweep (repeat; default: automatic)."),
    ] = None,
    expert_parallel: Annotated[
        list[int] | None,
        typer.Option(help="An expert-parallel size to sweep (repeat; default: automatic)."),
    ] = None,
    experts_folded: Annotated[
        bool | None,
        typer.Option(
            "--experts-folded/--no-experts-folded",
            help="Also sweep (or never) a MoE model's experts folded over TP (expert TP 1); "
            "default: also, for a MoE model.",
            show_default=False,
        ),
    ] = None,
    recompute_num_layers: Annotated[
        list[int] | None,
        typer.Option(
            help="A block recompute to sweep beside full: layers replayed per pipeline chunk "
            "(repeat).",
        ),
    ] = None,
    output_format: FormatOpt = OutputFormat.JSON,
) -> None:
    """Rank every valid layout for a GPU count: POST /v1/plans."""
    body = require_request(request)
    body.pop("layout", None)
    if gpus is not None:
        body["gpus"] = gpus
    if top_k is not None:
        body["top_k"] = top_k
    # the filters go where the request file keeps its constraints (top level or grouped)
    where = body["constraints"] if isinstance(body.get("constraints"), dict) else body
    if memory_headroom is not None:
        where["memory_headroom"] = memory_headroom
    if tensor_within_node:
        where["tensor_within_node"] = True
    if context_parallel:
        where["context_parallel"] = context_parallel
    if expert_parallel:
        where["expert_parallel"] = expert_parallel
    if experts_folded is not None:
        where["experts_folded"] = [False, True] if experts_folded else [False]
    if recompute_num_layers:
        where["recompute_num_layers"] = recompute_num_layers
    if tie_tolerance is not None:
        body["tie_tolerance"] = tie_tolerance
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
    warnings = result.get("warnings")
    if isinstance(warnings, list) and warnings:  # e.g. why no layout is listed
        console.print("[bold]Warnings[/bold]")
        for item in warnings:
            console.print(f"  - {item}", markup=False, highlight=False)
