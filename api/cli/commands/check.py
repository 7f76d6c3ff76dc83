"""``commest check``: the CI gate (a budget or a baseline), with an optional JUnit report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, die
from api.cli.inputs import read_request
from api.cli.options import RequestOpt, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_app()


@app.command()
def check(
    ctx: typer.Context,
    request: RequestOpt = None,
    max_iteration_time: Annotated[
        float | None,
        typer.Option(help="Budget in seconds per iteration.", show_default=False),
    ] = None,
    baseline: Annotated[
        str | None, typer.Option(help="Compare against this named baseline.")
    ] = None,
    tolerance: Annotated[
        float | None, typer.Option(help="Allowed slowdown over the baseline (0.05 = 5%).")
    ] = None,
    junit_xml: Annotated[
        Path | None, typer.Option("--junit-xml", help="Write a JUnit XML report here.")
    ] = None,
    output_format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """CI gate: exit 0 when the iteration fits the budget/baseline, 1 when it does not."""
    if request is None:
        die("--request FILE is required", EXIT_BAD_INPUT)
    if (max_iteration_time is None) == (baseline is None):
        die("give exactly one of --max-iteration-time S or --baseline NAME", EXIT_BAD_INPUT)
    if tolerance is not None and baseline is None:
        die("--tolerance applies to --baseline only", EXIT_BAD_INPUT)
    if output_format not in ("text", "json"):
        die(f"--format {output_format}: must be text or json", EXIT_BAD_INPUT)
    body = read_request(request)
    if max_iteration_time is not None:
        body["max_iteration_time_s"] = max_iteration_time
    else:
        body["baseline"] = baseline
        body["tolerance"] = 0.05 if tolerance is None else tolerance
    started = time.perf_counter()
    with open_client(options(ctx)) as client:
        result = client.check(body)
    elapsed = time.perf_counter() - started
    passed = bool(result.get("passed"))
    predicted = float(result.get("predicted_iteration_time_s", float("nan")))
    limit = float(result.get("limit_s", float("nan")))
    margin = float(result.get("margin_s", limit - predicted))
    if junit_xml is not None:
        from api.junit import CheckOutcome, write_junit_xml

        against = f"baseline {baseline!r}" if baseline else "budget"
        outcome = CheckOutcome(
            name=Path(request).stem if request != "-" else "stdin",
            passed=passed,
            predicted_s=predicted,
            limit_s=limit,
            margin_s=margin,
            detail=f"request {request}, against the {against}",
            elapsed_s=elapsed,
        )
        try:
            write_junit_xml(junit_xml, outcome)
        except OSError as exc:
            die(f"--junit-xml {junit_xml}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT)
    if output_format == "json":
        emit_json(result)
    else:
        verdict = "PASS" if passed else "FAIL"
        relation = "<=" if passed else ">"
        typer.echo(
            f"{verdict}: predicted iteration time {predicted:.4g} s {relation} limit {limit:.4g} s"
            f" (margin {margin:+.4g} s)"
        )
    raise typer.Exit(EXIT_OK if passed else EXIT_CHECK_FAILED)
