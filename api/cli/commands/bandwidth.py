"""``commest bandwidth``: the effective bus bandwidth a profile gives one collective."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.inputs import parse_size
from api.cli.options import FormatOpt, OutputFormat, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_app()


@app.command()
def bandwidth(
    ctx: typer.Context,
    profile: Annotated[str, typer.Option(help="Profile name.")],
    op: Annotated[str, typer.Option(help="Collective: all_reduce, all_gather, ...")],
    ranks: Annotated[int, typer.Option(min=1, help="Ranks in the collective.")],
    nodes: Annotated[int, typer.Option(min=1, help="Nodes the ranks span.")] = 1,
    size: Annotated[
        str, typer.Option("--bytes", help="Message size: 1048576, 64K, 256MiB ...")
    ] = "1G",
    output_format: FormatOpt = OutputFormat.JSON,
) -> None:
    """Effective bus bandwidth of a collective: GET /v1/profiles/{name}/bandwidth."""
    try:
        size_bytes = parse_size(size)
    except typer.BadParameter as exc:
        exc.param_hint = "'--bytes'"  # parsed here, not by click: name the flag
        raise
    params = {"op": op, "ranks": ranks, "nodes": nodes, "bytes": size_bytes}
    with open_client(options(ctx)) as client:
        result = client.bandwidth(profile, params)
    if output_format is OutputFormat.TABLE and isinstance(result, Mapping):
        from api.cli.tables import flat, mapping_table, stdout_console

        stdout_console().print(mapping_table(f"Bandwidth of {profile}", flat(result)))
    else:
        emit_json(result)
