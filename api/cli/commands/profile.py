"""``commest profile ...``: cluster profiles, their benchmark uploads and calibrations."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from api.cli.commands import verb_group
from api.cli.exits import EXIT_BAD_INPUT, die, note
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
        beta, bus = run.get("beta_gbps"), run.get("beta_busbw_gbps")
        fit = ""
        if beta is not None:
            fit = f", fitted beta {float(beta):.4g} GB/s algbw"
            fit += f" ({float(bus):.4g} busbw)" if bus is not None else ""
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
    label: Annotated[
        str | None, typer.Option(help="A label kept with the upload(s), named in answers.")
    ] = None,
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
            ("label", label),
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


@app.command("uploads")
def profile_uploads(
    ctx: typer.Context,
    name: NameArg,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Uploads per page.")] = 100,
    offset: Annotated[int, typer.Option(min=0, help="First upload of the page.")] = 0,
    output_format: FormatOpt = OutputFormat.TABLE,
) -> None:
    """A profile's uploads (file, label, flags, disabled): GET /v1/profiles/{name}/uploads."""
    with open_client(options(ctx)) as client:
        result = client.list_uploads(name, limit=limit, offset=offset)
    if output_format is OutputFormat.JSON:
        emit_json(result)
        return
    from api.cli.tables import rows_table, stdout_console

    rows = [
        {
            "id": u.get("id"),
            "file": u.get("filename"),
            "label": u.get("label"),
            "runs": u.get("run_count"),
            "disabled": u.get("disabled"),
            "flags": ", ".join(f.get("code", "") for f in u.get("flags") or []) or None,
            "created_at": u.get("created_at"),
        }
        for u in result.get("uploads") or []
        if isinstance(u, Mapping)
    ]
    shown = f"{offset + 1}-{offset + len(rows)} of {result.get('total')}" if rows else "none"
    stdout_console().print(rows_table(f"Uploads of {name} ({shown})", rows))


UploadIdArg = Annotated[int, typer.Argument(min=1, help="Upload id (see profile uploads).")]


@app.command("upload-remove")
def profile_upload_remove(ctx: typer.Context, name: NameArg, upload_id: UploadIdArg) -> None:
    """Delete an upload and its runs: DELETE /v1/profiles/{name}/uploads/{id}."""
    with open_client(options(ctx)) as client:
        client.remove_upload(name, upload_id)
    typer.echo(f"removed upload {upload_id} of profile {name}")


@app.command("upload-disable")
def profile_upload_disable(
    ctx: typer.Context,
    name: NameArg,
    upload_id: UploadIdArg,
    enable: Annotated[bool, typer.Option("--enable", help="Enable it again instead.")] = False,
) -> None:
    """Stop an upload's runs answering (or, with --enable, let them answer again):
    PATCH /v1/profiles/{name}/uploads/{id}."""
    with open_client(options(ctx)) as client:
        result = client.set_upload_disabled(name, upload_id, disabled=not enable)
    state = "disabled" if result.get("disabled") else "enabled"
    typer.echo(f"upload {upload_id} of profile {name}: {state}")


#: What ``profile upload-log`` gives with options of its own; ``--set`` gives the other query
#: parameters of POST .../training-logs (``api.schemas.TrainingLogHints``).
LOG_OPTIONS = ("label", "gpus", "gpus_per_node", "vocab_size", "precision", "warmup_iterations")


def _log_fields() -> tuple[str, ...]:
    from api.schemas import TrainingLogHints

    return tuple(name for name in TrainingLogHints.model_fields if name not in LOG_OPTIONS)


@app.command("upload-log")
def profile_upload_log(
    ctx: typer.Context,
    name: NameArg,
    file: Annotated[Path, typer.Argument(help="The text a Megatron-LM / NeMo run printed.")],
    label: Annotated[str | None, typer.Option(help="A name for the run.")] = None,
    gpus: Annotated[
        int | None, typer.Option(min=1, help="GPUs of the run, if the log does not say.")
    ] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(min=1, help="GPUs per node of the run.")
    ] = None,
    vocab_size: Annotated[
        int | None, typer.Option(min=1, help="Vocabulary before padding, if not in the log.")
    ] = None,
    precision: Annotated[
        str | None, typer.Option(help="fp32, bf16, fp16 or fp8, if not in the log.")
    ] = None,
    warmup_iterations: Annotated[
        int | None,
        typer.Option(min=0, help="Iterations after a (re)start left out (default 10)."),
    ] = None,
    set_fields: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help=f"FIELD=VALUE for another field the log lacks ({', '.join(_log_fields())}).",
        ),
    ] = None,
) -> None:
    """Store a training run read from its log: POST /v1/profiles/{name}/training-logs.

    Prints the answer (steady-state iteration time, the iterations used and left out, the
    request read); `profile calibrate NAME --use-stored-runs` then fits u on stored runs."""
    if not file.is_file():
        die(f"{file}: no such file", EXIT_BAD_INPUT)
    params: dict[str, str] = {
        k: str(v)
        for k, v in (
            ("label", label),
            ("gpus", gpus),
            ("gpus_per_node", gpus_per_node),
            ("vocab_size", vocab_size),
            ("precision", precision),
            ("warmup_iterations", warmup_iterations),
        )
        if v is not None
    }
    fields = _log_fields()
    for item in set_fields or []:
        key, eq, value = item.partition("=")
        if not eq or key not in fields:
            die(
                f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(fields)}",
                EXIT_BAD_INPUT,
            )
        params[key] = value
    try:
        content = file.read_bytes()
    except OSError as exc:
        die(f"{file}: cannot read ({exc.strerror or exc})", EXIT_BAD_INPUT)
    with open_client(options(ctx)) as client:
        result = client.upload_training_log(name, file.name, content, params)
    for warning in result.get("warnings") or [] if isinstance(result, dict) else []:
        note(f"warning: {warning}")
    emit_json(result)


@app.command("calibrate")
def profile_calibrate(
    ctx: typer.Context,
    name: NameArg,
    measurements: Annotated[
        str | None, typer.Option(help="JSON file of measured iteration times (- for stdin).")
    ] = None,
    use_stored_runs: Annotated[
        bool,
        typer.Option(help="Also fit on every run stored with `profile upload-log`."),
    ] = False,
    apply: Annotated[
        bool, typer.Option("--apply/--no-apply", help="Store the fitted u on the profile.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --apply: apply a fitted u outside the plausible range [0.15, 0.95] too.",
        ),
    ] = False,
) -> None:
    """Fit the utilization u from measured iterations: POST /v1/profiles/{name}/calibrations."""
    if measurements is None and not use_stored_runs:
        die("give --measurements FILE or --use-stored-runs", EXIT_BAD_INPUT)
    body: dict[str, Any] = {}
    if measurements is not None:
        data = read_json(measurements, "--measurements")
        body = dict(data) if isinstance(data, dict) else {"runs": data}
    if use_stored_runs:
        body["use_stored_runs"] = True
    body["apply"] = apply
    if force:
        body["force"] = True
    with open_client(options(ctx)) as client:
        result = client.calibrate(name, body)
    for warning in result.get("warnings") or [] if isinstance(result, dict) else []:
        note(f"warning: {warning}")
    emit_json(result)
