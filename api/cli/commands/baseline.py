"""``commest baseline set|show``: named baselines for ``commest check --baseline``."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.commands import verb_group
from api.cli.inputs import require_request
from api.cli.options import RequestOpt, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_group("baseline")

NameArg = Annotated[str, typer.Argument(help="Baseline name.")]


@app.command("set")
def baseline_set(ctx: typer.Context, name: NameArg, request: RequestOpt = None) -> None:
    """Store the request's estimate as a named baseline: PUT /v1/baselines/{name}."""
    body = require_request(request)
    with open_client(options(ctx)) as client:
        emit_json(client.put_baseline(name, body))


@app.command("show")
def baseline_show(ctx: typer.Context, name: NameArg) -> None:
    """A stored baseline: GET /v1/baselines/{name}."""
    with open_client(options(ctx)) as client:
        emit_json(client.get_baseline(name))
