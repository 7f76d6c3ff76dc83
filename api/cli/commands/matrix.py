"""``commest matrix``: the traffic matrix of one layout as CSV, JSON or a PNG heatmap."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_BAD_INPUT, die
from api.cli.inputs import picture_request
from api.cli.options import OutputOpt, RequestOpt, options
from api.cli.render import emit_bytes
from api.cli.transport import open_client
from estimator.traffic import Algorithm

app = verb_app()


@app.command()
def matrix(
    ctx: typer.Context,
    request: RequestOpt = None,
    # format and level are the request's own fields, checked by the service like any other
    output_format: Annotated[str, typer.Option("--format", "-f", help="csv, json or png.")] = "csv",
    level: Annotated[str, typer.Option(help="gpu or node.")] = "gpu",
    algorithm: Annotated[Algorithm | None, typer.Option(help="ring (default) or direct.")] = None,
    view: Annotated[
        str | None,
        typer.Option(help="all (default) or network: only traffic between different nodes."),
    ] = None,
    output: OutputOpt = None,
) -> None:
    """Traffic matrix (bytes per iteration, GPU or node level): POST /v1/traffic-matrices."""
    body = picture_request(request, output_format, output)
    body["format"] = output_format
    body["level"] = level
    if algorithm is not None:
        body["algorithm"] = algorithm.value
    if view is not None:  # checked by the service like format and level
        body["view"] = view
    with open_client(options(ctx)) as client:
        content = client.traffic_matrix(body)
    if output is None:
        emit_bytes(content)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(content)
    except OSError as exc:
        die(f"--output {output}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT)
    typer.echo(f"wrote {len(content)} bytes to {output}", err=True)
