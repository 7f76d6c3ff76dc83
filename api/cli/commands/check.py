"""``commest check``: the CI gate (a budget or a baseline, the GPU memory less a headroom, and
optional ratio thresholds), with a JUnit report written whatever the outcome."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from api.cli.commands import verb_app
from api.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    Died,
    die,
    note,
)
from api.cli.inputs import read_request
from api.cli.options import RequestOpt, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_app()

Properties = tuple[tuple[str, str], ...]


def _flat(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    """``value`` as ``prefix.key`` = text pairs (nested objects flattened, lists skipped)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif not isinstance(value, list):
        out.append(
            (
                prefix,
                ""
                if value is None
                else str(value).lower()
                if isinstance(value, bool)
                else str(value),
            )
        )


def _properties(result: Mapping[str, Any], given: Properties) -> Properties:
    """The figures of the answer for the JUnit report: every term, the ratios, the memory."""
    out: list[tuple[str, str]] = list(given)
    for key in ("passed", "criterion", "predicted_iteration_time_s", "limit_s", "margin_s"):
        _flat(key, result.get(key), out)
    estimate = result.get("estimate") or {}
    for key in ("breakdown_s", "ratios", "throughput", "memory"):
        _flat(key, estimate.get(key), out)
    _flat("check_memory", result.get("memory"), out)
    for comparison in result.get("comparisons") or []:
        if isinstance(comparison, Mapping):
            verdict = {True: "pass", False: "fail", None: "not checked"}.get(
                comparison.get("passed"), "?"
            )
            out.append(
                (
                    f"comparison.{comparison.get('name')}",
                    f"{comparison.get('value')} {comparison.get('relation')} "
                    f"{comparison.get('limit')}: {verdict}",
                )
            )
    return tuple(out)


def _verdict_line(result: Mapping[str, Any], passed: bool) -> str:
    """``PASS: ...`` or ``FAIL: ...`` naming every comparison made, value against limit."""
    verdict = "PASS" if passed else "FAIL"
    details = [
        str(c.get("detail"))
        for c in result.get("comparisons") or []
        if isinstance(c, Mapping) and c.get("detail")
    ]
    if details:
        return f"{verdict}: {'; '.join(details)}"
    predicted = float(result.get("predicted_iteration_time_s", float("nan")))
    limit = float(result.get("limit_s", float("nan")))
    margin = float(result.get("margin_s", limit - predicted))
    relation = "<=" if predicted <= limit else ">"
    return (
        f"{verdict}: predicted iteration time {predicted:.4g} s {relation} limit {limit:.4g} s"
        f" (margin {margin:+.4g} s)"
    )


def _junit_path(args: list[str]) -> Path | None:
    """The ``--junit-xml`` value among raw arguments (before they are parsed)."""
    for i, arg in enumerate(args):
        if arg.startswith("--junit-xml="):
            return Path(arg.split("=", 1)[1])
        if arg == "--junit-xml" and i + 1 < len(args):
            return Path(args[i + 1])
    return None


def _request_name(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg in ("--request", "-r") and i + 1 < len(args):
            return "stdin" if args[i + 1] == "-" else Path(args[i + 1]).stem
        if arg.startswith("--request="):
            value = arg.split("=", 1)[1]
            return "stdin" if value == "-" else Path(value).stem
    return "check"


class _ReportingCommand(TyperCommand):
    """``check``'s command: a usage error (a malformed flag value, an unknown option), which
    comes before the command's own code runs, still writes the JUnit report it asked for."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Any = None,
        **extra: Any,
    ) -> Any:
        raw = list(args)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as exc:
            # click's UsageError (typer may vendor click, so it is told by its exit code 2)
            message = getattr(exc, "format_message", None)
            usage = callable(message) and getattr(exc, "exit_code", None) == EXIT_BAD_INPUT
            path = _junit_path(raw)
            if usage and path is not None and "--help" not in raw:
                from api.junit import errored, write_junit_xml

                outcome = errored(
                    _request_name(raw),
                    str(message()) if callable(message) else str(exc),
                    error_type="BadInput",
                    properties=(("arguments", " ".join(raw)), ("exit_code", str(EXIT_BAD_INPUT))),
                )
                try:
                    write_junit_xml(path, outcome)
                except OSError as err:
                    note(f"--junit-xml {path}: cannot write ({err.strerror or err})")
            raise


@app.command(cls=_ReportingCommand)
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
    memory_headroom: Annotated[
        float | None,
        typer.Option(
            help="Fraction of GPU memory kept free (server default 0.10).", show_default=False
        ),
    ] = None,
    allow_memory_overflow: Annotated[
        bool, typer.Option("--allow-memory-overflow", help="Do not fail on memory.")
    ] = False,
    max_communication_ratio: Annotated[
        float | None,
        typer.Option(help="Fail above this exposed-communication share.", show_default=False),
    ] = None,
    max_bubble_ratio: Annotated[
        float | None, typer.Option(help="Fail above this bubble share.", show_default=False)
    ] = None,
    min_mfu: Annotated[
        float | None, typer.Option(help="Fail below this model FLOPs utilization.")
    ] = None,
    junit_xml: Annotated[
        Path | None,
        typer.Option("--junit-xml", help="Write a JUnit XML report here (every outcome)."),
    ] = None,
    output_format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
) -> None:
    """CI gate: exit 0 when the iteration fits the budget/baseline, 1 when it does not."""
    started = time.perf_counter()
    name = "check" if request is None else ("stdin" if request == "-" else Path(request).stem)
    given: list[tuple[str, str]] = [("request", str(request))]
    for key, value in (
        ("max_iteration_time_s", max_iteration_time),
        ("baseline", baseline),
        ("tolerance", tolerance),
        ("memory_headroom", memory_headroom),
        ("max_communication_ratio", max_communication_ratio),
        ("max_bubble_ratio", max_bubble_ratio),
        ("min_mfu", min_mfu),
    ):
        if value is not None:
            given.append((f"given.{key}", str(value)))
    if allow_memory_overflow:
        given.append(("given.allow_memory_overflow", "true"))
    try:
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
        optional = {
            "memory_headroom": memory_headroom,
            "max_communication_ratio": max_communication_ratio,
            "max_bubble_ratio": max_bubble_ratio,
            "min_mfu": min_mfu,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        if allow_memory_overflow:
            body["allow_memory_overflow"] = True
        with open_client(options(ctx)) as client:
            result = client.check(body)
    except Died as exc:
        if junit_xml is not None and exc.exit_code >= EXIT_BAD_INPUT:
            from api.junit import errored, write_junit_xml

            kind = "Unavailable" if exc.exit_code == EXIT_UNAVAILABLE else "BadInput"
            outcome = errored(
                name,
                exc.message,
                error_type=kind,
                elapsed_s=time.perf_counter() - started,
                properties=(*given, ("exit_code", str(exc.exit_code))),
            )
            try:
                write_junit_xml(junit_xml, outcome)
            except OSError as err:
                note(f"--junit-xml {junit_xml}: cannot write ({err.strerror or err})")
        raise
    elapsed = time.perf_counter() - started
    passed = bool(result.get("passed"))
    if junit_xml is not None:
        from api.junit import CheckOutcome, write_junit_xml

        predicted = float(result.get("predicted_iteration_time_s", float("nan")))
        limit = float(result.get("limit_s", float("nan")))
        against = f"baseline {baseline!r}" if baseline else "budget"
        comparisons = result.get("comparisons") or []
        outcome = CheckOutcome(
            name=name,
            passed=passed,
            predicted_s=predicted,
            limit_s=limit,
            margin_s=float(result.get("margin_s", limit - predicted)),
            detail=f"request {request}, against the {against}",
            elapsed_s=elapsed,
            comparisons=tuple(str(c.get("detail", "")) for c in comparisons),
            reasons=tuple(str(r) for r in result.get("reasons") or []),
            properties=_properties(result, tuple(given)),
        )
        try:
            write_junit_xml(junit_xml, outcome)
        except OSError as exc:
            die(f"--junit-xml {junit_xml}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT)
    if output_format == "json":
        emit_json(result)
    else:
        typer.echo(_verdict_line(result, passed))
    raise typer.Exit(EXIT_OK if passed else EXIT_CHECK_FAILED)
