"""``commest timeline``: every pipeline stage's schedule of one iteration (JSON, PNG, SVG or a
table of time per kind and stage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_BAD_INPUT, die
from api.cli.inputs import picture_request
from api.cli.options import OutputOpt, RequestOpt, options
from api.cli.render import emit_bytes
from api.cli.transport import open_client

app = verb_app()


@app.command()
def timeline(
    ctx: typer.Context,
    request: RequestOpt = None,
    output_format: Annotated[
        str, typer.Option("--format", "-f", help="json, png, svg or table.")
    ] = "json",
    max_microbatches_shown: Annotated[
        int | None,
        typer.Option(help="Micro-batches drawn (the rest of the steady state is elided)."),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Schedule of one iteration per pipeline stage: POST /v1/timelines."""
    body = picture_request(request, output_format, output)
    # a table is drawn here from the JSON answer; other formats are the service's to check
    body["format"] = "json" if output_format == "table" else output_format
    if max_microbatches_shown is not None:
        body["max_microbatches_shown"] = max_microbatches_shown
    with open_client(options(ctx)) as client:
        content = client.timeline(body)
    if output_format == "table":
        _print_table(json.loads(content), output)
        return
    if output is None:
        emit_bytes(content)
        return
    _write(output, content)


def _write(output: Path, content: bytes) -> None:
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(content)
    except OSError as exc:
        die(f"--output {output}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT)
    typer.echo(f"wrote {len(content)} bytes to {output}", err=True)


def stage_rows(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """Milliseconds of each kind of event per stage (of the events shown)."""
    kinds = ("forward", "recompute", "backward", "tp_comm", "pp_comm", "dp_comm", "optimizer")
    rows: list[dict[str, Any]] = []
    for stage in range(answer["pipeline_stages"]):
        row: dict[str, Any] = {"stage": stage}
        row.update(dict.fromkeys([f"{k}_ms" for k in (*kinds, "idle")], 0.0))
        rows.append(row)
    for e in answer["events"]:
        rows[e["stage"]][f"{e['kind']}_ms"] += (e["end_s"] - e["start_s"]) * 1e3
    return rows


def _print_table(answer: dict[str, Any], output: Path | None) -> None:
    from api.cli.tables import mapping_table, rows_table, stdout_console

    head = {
        key: answer[key]
        for key in (
            "schedule",
            "pipeline_stages",
            "microbatches",
            "virtual_stages",
            "iteration_time_s",
            "makespan_s",
            "bubble_s",
            "bubble_ratio",
            "truncated",
            "elided_microbatches",
        )
    }
    title = "time per stage (ms, events shown" + (
        "; elided micro-batches not counted)" if answer["truncated"] else ")"
    )
    console = stdout_console()
    if output is not None:
        with console.capture() as capture:
            console.print(mapping_table("timeline", head))
            console.print(rows_table(title, stage_rows(answer)))
        _write(output, capture.get().encode("utf-8"))
        return
    console.print(mapping_table("timeline", head))
    console.print(rows_table(title, stage_rows(answer)))
    for line in answer["warnings"]:
        typer.echo(f"warning: {line}", err=True)
