"""``commest estimate``: one layout's iteration time, from a request file or Megatron flags."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_BAD_INPUT, die, die_of, note
from api.cli.inputs import read_request
from api.cli.options import FormatOpt, OutputFormat, RequestOpt, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_app()


@app.command()
def estimate(
    ctx: typer.Context,
    request: RequestOpt = None,
    megatron_args: Annotated[
        str | None,
        typer.Option(
            "--megatron-args",
            help="A Megatron-LM launch line (flags or torchrun ...); - reads it from stdin.",
            show_default=False,
        ),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(min=1, help="World size, for --megatron-args.")
    ] = None,
    vocab_size: Annotated[
        int | None,
        typer.Option(min=1, help="Vocabulary size when the Megatron line has none."),
    ] = None,
    cluster_profile: Annotated[
        str | None, typer.Option(help="Cluster profile name (sets cluster.profile).")
    ] = None,
    fidelity: Annotated[str | None, typer.Option(help="paper or detailed (sets fidelity).")] = None,
    output_format: FormatOpt = OutputFormat.JSON,
) -> None:
    """Estimate one iteration: POST /v1/estimates; the response JSON, or a table."""
    if request is None and megatron_args is None:
        die('give --request FILE or --megatron-args "..."', EXIT_BAD_INPUT)
    if request == "-" and megatron_args == "-":
        die("only one of --request and --megatron-args can read stdin", EXIT_BAD_INPUT)
    body = read_request(request)
    if megatron_args is not None:
        from api.megatron_args import parse_megatron_args
        from estimator.errors import CommestError

        line = sys.stdin.read() if megatron_args == "-" else megatron_args
        try:
            parsed = parse_megatron_args(line, gpus=gpus, vocab_size=vocab_size)
        except CommestError as exc:
            die_of(exc)
        for text in parsed.notes:
            note(text)
        body.update(parsed.request)
    if cluster_profile:
        body["cluster"] = {"profile": cluster_profile}
    if fidelity:
        body["fidelity"] = fidelity
    with open_client(options(ctx)) as client:
        result = client.estimate(body)
    if output_format is OutputFormat.TABLE:
        from api.cli.tables import print_estimate_table, stdout_console

        print_estimate_table(result, stdout_console())
    else:
        emit_json(result)
