"""``commest profile ...``: cluster profiles, their benchmark uploads and calibrations."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from api.cli.commands import verb_group
from api.cli.exits import EXIT_BAD_INPUT, die
from api.cli.inputs import read_json
from api.cli.options import FormatOpt, OutputFormat, options
from api.cli.render import emit_json
from api.cli.transport import open_client

app = verb_group("profile")

NameArg = Annotated[str, typer.Argument(help="Profile name.")]


@app.command("create")
def profile_create(
    ctx: typer.Context,
    name: NameArg,
    gpu_model: Annotated[str, typer.Option(help="GPU model, e.g. A100-SXM4-80GB.")],
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node.")],
    peak_tflops: Annotated[
        float | None, typer.Option(help="Peak dense TFLOP/s of one GPU.")
    ] = None,
    utilization: Annotated[
        float | None, typer.Option(help="Fraction of peak reached on the layer math.")
    ] = None,
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
) -> None:
    """Create a cluster profile: POST /v1/profiles."""
    body: dict[str, Any] = {"name": name, "gpu_model": gpu_model, "gpus_per_node": gpus_per_node}
    for key, value in (
        ("peak_tflops", peak_tflops),
        ("utilization", utilization),
        ("description", description),
    ):
        if value is not None:
            body[key] = value
    with open_client(options(ctx)) as client:
        emit_json(client.create_profile(body))


def _items(result: Any) -> list[Mapping[str, Any]]:
    if isinstance(result, Mapping):
        for key in ("items", "profiles", "data"):
            if isinstance(result.get(key), list):
                return list(result[key])
        return []
    return list(result) if isinstance(result, list) else []


@app.command("list")
def profile_list(ctx: typer.Context, output_format: FormatOpt = OutputFormat.TABLE) -> None:
    """Every profile: GET /v1/profiles."""
    with open_client(options(ctx)) as client:
        result = client.list_profiles()
    if output_format is OutputFormat.JSON:
        emit_json(result)
        return
    from api.cli.tables import rows_table, stdout_console

    wanted = ("name", "gpu_model", "gpus_per_node", "peak_tflops", "utilization", "nominal")
    rows = [{k: row.get(k) for k in wanted if k in row} for row in _items(result)]
    stdout_console().print(rows_table("Profiles", rows))


@app.command("show")
def profile_show(ctx: typer.Context, name: NameArg) -> None:
    """One profile: GET /v1/profiles/{name}."""
    with open_client(options(ctx)) as client:
        emit_json(client.get_profile(name))


@app.command("delete")
def profile_delete(ctx: typer.Context, name: NameArg) -> None:
    """Delete a profile and its runs: DELETE /v1/profiles/{name}."""
    with open_client(options(ctx)) as client:
        client.delete_profile(name)
    typer.echo(f"deleted profile {name}")


def upload_summary(path: Path, result: Mapping[str, Any]) -> list[str]:
    """Lines for one uploaded file: each run found, and whether it was already stored."""
    runs = [r for r in result.get("runs") or [] if isinstance(r, Mapping)]
    fresh = sum(1 for r in runs if not r.get("already_stored"))
    lines = [f"{path}: {len(runs)} run(s), {fresh} new, {len(runs) - fresh} already stored"]
    for run in runs:
        what = " ".join(
            f"{key}={run[key]}"
            for key in ("collective", "ranks", "nodes", "backend", "dtype")
            if run.get(key) is not None
        )
        beta = run.get("beta_gbps")
        fit = f", fitted beta {float(beta):.4g} GB/s" if beta is not None else ""
        state = "already stored" if run.get("already_stored") else "stored"
        lines.append(f"  run {run.get('id')}: {what}{fit} ({state})")
    for warning in result.get("warnings") or []:
        lines.append(f"  warning: {warning}")
    return lines


@app.command("upload")
def profile_upload(
    ctx: typer.Context,
    name: NameArg,
    files: Annotated[list[Path], typer.Argument(help="nccl-tests / OSU output files.")],
    op: Annotated[str | None, typer.Option(help="Collective, when the text does not say.")] = None,
    ranks: Annotated[int | None, typer.Option(min=1, help="Ranks, when not in the text.")] = None,
    nodes: Annotated[int | None, typer.Option(min=1, help="Nodes, when not in the text.")] = None,
    backend: Annotated[str | None, typer.Option(help="nccl, rccl, mpi ...")] = None,
    dtype: Annotated[str | None, typer.Option(help="Data type, when not in the text.")] = None,
) -> None:
    """Upload benchmark outputs, one request per file: POST /v1/profiles/{name}/runs."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from api.cli.tables import stderr_console

    for path in files:
        if not path.is_file():
            die(f"{path}: no such file", EXIT_BAD_INPUT)
    hints = {
        k: str(v)
        for k, v in (
            ("op", op),
            ("ranks", ranks),
            ("nodes", nodes),
            ("backend", backend),
            ("dtype", dtype),
        )
        if v is not None
    }
    summaries: list[str] = []
    console = stderr_console()
    with (
        open_client(options(ctx)) as client,
        Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,  # no bar in a CI log
        ) as progress,
    ):
        task = progress.add_task(f"uploading to {name}", total=len(files))
        for path in files:
            progress.update(task, description=f"uploading {path.name}")
            try:
                content = path.read_bytes()
            except OSError as exc:
                die(f"{path}: cannot read ({exc.strerror or exc})", EXIT_BAD_INPUT)
            summaries.extend(
                upload_summary(path, client.upload_runs(name, path.name, content, hints))
            )
            progress.advance(task)
    for line in summaries:
        typer.echo(line)


@app.command("calibrate")
def profile_calibrate(
    ctx: typer.Context,
    name: NameArg,
    measurements: Annotated[
        str, typer.Option(help="JSON file of measured iteration times (- for stdin).")
    ],
    apply: Annotated[
        bool, typer.Option("--apply/--no-apply", help="Store the fitted u on the profile.")
    ] = False,
) -> None:
    """Fit the utilization u from measured iterations: POST /v1/profiles/{name}/calibrations."""
    data = read_json(measurements, "--measurements")
    body = dict(data) if isinstance(data, dict) else {"runs": data}
    body["apply"] = apply
    with open_client(options(ctx)) as client:
        emit_json(client.calibrate(name, body))
