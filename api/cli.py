"""The ``commest`` command line: the service's verbs, through its REST contract only.

With ``--server URL`` every verb is an HTTP call to that server (``httpx``); without it the
same calls go in-process to ``create_app(get_settings())`` through FastAPI's ``TestClient``,
against the configured database, so a local and a remote run behave identically.

Exit codes::

    0  success (a check that passed)
    1  a check that failed (predicted iteration time over the limit)
    2  bad input: a usage error, an unreadable file, or a 4xx problem-details answer
    3  the server or a dependency is unavailable (5xx, connection refused, missing module)

Problem-details answers (RFC 9457) become one line on stderr: title, detail and the
field/value/rule the server named.
"""

from __future__ import annotations

import json
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from api.settings import Settings
from estimator.errors import CommestError, ValidationError

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3

REMOTE_TIMEOUT_S = 120.0
PIPE_WIDTH = 132

app = typer.Typer(
    name="commest",
    help="Closed-form iteration-time and communication estimates for GPT-style training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
profile_app = typer.Typer(help="Cluster profiles: create, list, upload benchmarks, calibrate.")
baseline_app = typer.Typer(help="Named baselines for `commest check --baseline`.")
db_app = typer.Typer(help="The profiles database.")
app.add_typer(profile_app, name="profile", no_args_is_help=True)
app.add_typer(baseline_app, name="baseline", no_args_is_help=True)
app.add_typer(db_app, name="db", no_args_is_help=True)


def _stdout() -> Console:
    console = Console(soft_wrap=True)
    if not console.is_terminal:  # a file or a pipe: room for the wide tables
        console.width = max(console.width, PIPE_WIDTH)
    return console


def _stderr() -> Console:
    return Console(stderr=True, soft_wrap=True)


def _die(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _note(message: str) -> None:
    typer.echo(f"note: {message}", err=True)


# --------------------------------------------------------------------------- transport


@dataclass
class Options:
    """The global options: where the service is and the token for writes."""

    server: str | None = None
    token: str | None = None


def problem_line(response: httpx.Response) -> str:
    """One line from a problem-details answer: title, detail, field/value/rule."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = " ".join(response.text.split())[:200]
        return f"HTTP {response.status_code}: {text or response.reason_phrase}"
    title = str(body.get("title") or response.reason_phrase or f"HTTP {response.status_code}")
    detail = body.get("detail")
    parts = [title]
    if isinstance(detail, str) and detail:
        parts.append(detail)
    elif detail is not None:
        parts.append(json.dumps(detail, default=str))
    line = ": ".join(parts)
    named = []
    for key in ("field", "value", "rule"):
        if key in body and body[key] is not None:
            shown = body[key] if isinstance(body[key], str) else json.dumps(body[key])
            named.append(f"{key}={shown}")
    errors = body.get("errors")
    if not named and isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        named.append(f"field={loc}" if loc else "")
        named.append(f"rule={first.get('msg', '')}")
    named = [n for n in named if n]
    if named:
        line = f"{line} [{'; '.join(named)}]"
    return f"{line} (HTTP {response.status_code})"


def exit_code_for_status(status: int) -> int:
    """2 for a 4xx (the caller's input), 3 otherwise (the server's side)."""
    return EXIT_BAD_INPUT if 400 <= status < 500 else EXIT_UNAVAILABLE


class Service:
    """The REST contract, over HTTP or in-process; every failure exits with its code."""

    def __init__(self, client: httpx.Client, where: str) -> None:
        self.client = client
        self.where = where

    def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        files: Any = None,
        data: Mapping[str, Any] | None = None,
    ) -> httpx.Response:
        """The answer to one request; a 4xx/5xx or a transport error ends the command."""
        try:
            response = self.client.request(
                method, path, json=json_body, params=params, files=files, data=data
            )
        except httpx.TransportError as exc:
            _die(f"cannot reach the commest service at {self.where}: {exc}", EXIT_UNAVAILABLE)
        if response.status_code >= 400:
            line = problem_line(response)
            if response.status_code == 401 and "authorization" not in {
                k.lower() for k in self.client.headers
            }:
                line += (
                    "; pass --token or set COMMEST_API_TOKEN (a server without a configured "
                    "token keeps the one it made in <data_dir>/api-token)"
                )
            _die(line, exit_code_for_status(response.status_code))
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON body of the answer."""
        response = self.call(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            _die(f"{self.where} answered {path} with non-JSON content", EXIT_UNAVAILABLE)


def _local_token(settings: Settings) -> str | None:
    """The write token of the local service: COMMEST_API_TOKEN, else ``<data_dir>/api-token``."""
    from api.deps import token_path

    if settings.api_token is not None and settings.api_token.get_secret_value():
        return settings.api_token.get_secret_value()
    try:
        return token_path(settings).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _map_domain_error(exc: CommestError) -> NoReturn:
    line = f"{exc.title}: {exc.message}"
    if isinstance(exc, ValidationError) and exc.value is None:  # something missing
        line = f"{exc.title}: {exc.field}: {exc.rule}"
    _die(line, exit_code_for_status(exc.status))


def load_settings() -> Settings:
    """The process settings; exit 2 naming the COMMEST_* variable that is wrong."""
    from pydantic import ValidationError as SettingsError

    from api.settings import get_settings

    try:
        return get_settings()
    except SettingsError as exc:
        first = exc.errors()[0]
        name = "COMMEST_" + "_".join(str(p) for p in first["loc"]).upper()
        _die(f"{name}={first.get('input')!r}: {first['msg']}", EXIT_BAD_INPUT)


def _database_down(exc: Exception) -> NoReturn:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    _die(f"the database is not reachable ({type(exc).__name__}: {first})", EXIT_UNAVAILABLE)


@contextmanager
def open_service(options: Options) -> Iterator[Service]:
    """The service the options name: a remote server, or the app in this process."""
    if options.server:
        headers = {"Authorization": f"Bearer {options.token}"} if options.token else {}
        with httpx.Client(
            base_url=options.server, headers=headers, timeout=REMOTE_TIMEOUT_S
        ) as client:
            yield Service(client, options.server)
        return
    try:
        with warnings.catch_warnings():
            # Starlette >= 1.x nudges towards httpx2; httpx serves the in-process client fine.
            warnings.filterwarnings("ignore", message=r".*httpx2", category=UserWarning)
            from fastapi.testclient import TestClient

        from api.app import create_app
    except ImportError as exc:
        _die(f"the commest service is not available in this install: {exc}", EXIT_UNAVAILABLE)
    try:
        settings = load_settings()
        application = create_app(settings)
        with TestClient(
            application, base_url="http://commest.local", raise_server_exceptions=False
        ) as client:
            token = options.token or _local_token(settings)
            if token:
                client.headers["Authorization"] = f"Bearer {token}"
            yield Service(client, "the local service")
    except CommestError as exc:
        _map_domain_error(exc)
    except SQLAlchemyError as exc:
        _database_down(exc)


# --------------------------------------------------------------------------- input


def read_json(source: str, what: str = "--request") -> Any:
    """The JSON in file ``source`` (``-``: stdin); exit 2 naming the problem."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        _die(f"{what} {source}: cannot read ({exc.strerror or exc})", EXIT_BAD_INPUT)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        _die(
            f"{what} {source}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            EXIT_BAD_INPUT,
        )


def read_request(source: str | None) -> dict[str, Any]:
    """The request object from a file, or an empty one when no file is given."""
    if source is None:
        return {}
    body = read_json(source)
    if not isinstance(body, dict):
        _die(f"--request {source}: must hold a JSON object", EXIT_BAD_INPUT)
    return body


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``1048576``, ``64K``, ``256MiB`` or ``1GB`` (K = 1024, as nccl-tests' -b)."""
    match = _SIZE.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 1048576, 64K, 256MiB)")
    number, unit = float(match.group(1)), match.group(2).lower()
    scale = 1024 ** ("kmgt".index(unit) + 1) if unit else 1
    value = int(number * scale)
    if value <= 0:
        raise typer.BadParameter("must be > 0 bytes")
    return value


def emit_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    typer.echo(json.dumps(value, indent=2, sort_keys=False))


# --------------------------------------------------------------------------- tables


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def mapping_table(title: str, values: Mapping[str, Any]) -> Table:
    """A two-column table of a flat mapping."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("name", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in values.items():
        table.add_row(str(key), _fmt(value))
    return table


def rows_table(title: str, rows: Sequence[Mapping[str, Any]]) -> Table:
    """A table of records, one column per key seen (in first-seen order)."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_fmt(row.get(column)) for column in columns))
    return table


def breakdown_table(result: Mapping[str, Any]) -> Table:
    """The iteration time split into its named terms, in seconds and % of the iteration."""
    total = float(result.get("iteration_time_s") or 0.0)
    table = Table(title="Iteration time", title_justify="left")
    table.add_column("term", style="bold")
    table.add_column("seconds", justify="right")
    table.add_column("% of iteration", justify="right")
    for term, seconds in (result.get("breakdown_s") or {}).items():
        value = float(seconds)
        share = f"{100.0 * value / total:.1f}" if total > 0 else "-"
        table.add_row(str(term), f"{value:.4g}", share)
    table.add_section()
    table.add_row("iteration", f"{total:.4g}", "100.0", style="bold")
    return table


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


GB = 1e9

_COLLECTIVE_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("term", "term", str),
    ("kind", "traffic", str),
    ("op", "op", str),
    ("ranks", "ranks", str),
    ("nodes", "nodes", str),
    ("size_bytes", "MB", lambda v: f"{float(v) / 1e6:.4g}"),
    ("calls_per_iteration", "calls", lambda v: f"{float(v):.4g}"),
    ("busbw_gbps", "busbw GB/s", lambda v: f"{float(v):.4g}"),
    ("time_per_call_s", "s/call", lambda v: f"{float(v):.3g}"),
    ("method", "bw from", str),
)


def collectives_table(collectives: Sequence[Mapping[str, Any]]) -> tuple[Table, list[str]]:
    """The collectives with their bandwidth and its provenance (a footnote per source)."""
    present = [c for c in _COLLECTIVE_COLUMNS if any(c[0] in row for row in collectives)]
    table = Table(title="Collectives (bandwidth provenance)", title_justify="left")
    for _, header, _ in present:
        table.add_column(header, overflow="fold")
    table.add_column("src")
    sources: list[str] = []
    for row in collectives:
        cells = []
        for key, _, show in present:
            value = row.get(key)
            cells.append("" if value is None else show(value))
        source = row.get("source")
        if source:
            if source not in sources:
                sources.append(str(source))
            cells.append(f"[{sources.index(source) + 1}]")
        else:
            cells.append("")
        table.add_row(*cells)
    return table, sources


def _memory_rows(memory: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in memory.items():
        if key.endswith("_bytes") and isinstance(value, int | float):
            out[f"{key.removesuffix('_bytes')} (GB)"] = f"{value / GB:.4g}"
        else:
            out[key] = value
    return out


def print_estimate_table(result: Mapping[str, Any], console: Console) -> None:
    """The estimate for people: breakdown, ratios, throughput, memory, collectives."""
    console.print(breakdown_table(result))
    ratios = result.get("ratios")
    if isinstance(ratios, Mapping) and ratios:
        shown = {k: f"{100.0 * float(v):.1f} %" for k, v in ratios.items()}
        console.print(mapping_table("Ratios (of the iteration)", shown))
    throughput = result.get("throughput")
    if isinstance(throughput, Mapping) and throughput:
        console.print(mapping_table("Throughput", _flat(throughput)))
    memory = result.get("memory")
    if isinstance(memory, Mapping) and memory:
        console.print(mapping_table("Memory per GPU", _memory_rows(memory)))
    collectives = result.get("collectives")
    if isinstance(collectives, list) and collectives:
        table, sources = collectives_table([c for c in collectives if isinstance(c, Mapping)])
        console.print(table)
        for number, source in enumerate(sources, start=1):
            console.print(f"  [{number}] {source}", markup=False, highlight=False)
    for key, title in (("assumptions", "Assumptions"), ("warnings", "Warnings")):
        items = result.get(key)
        if isinstance(items, list) and items:
            console.print(f"[bold]{title}[/bold]")
            for item in items:
                console.print(f"  - {_fmt(item)}", markup=False, highlight=False)


def plan_rows(layouts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One compact row per ranked layout of a plan."""
    rows = []
    for entry in layouts:
        layout = entry.get("layout") or {}
        total = float(entry.get("iteration_time_s") or 0.0)
        breakdown = entry.get("breakdown_s") or {}
        comm = sum(
            float(v) for k, v in breakdown.items() if k not in ("compute", "bubble", "optimizer")
        )
        rows.append(
            {
                "rank": entry.get("rank"),
                "p": layout.get("pipeline"),
                "t": layout.get("tensor"),
                "d": layout.get("data"),
                "v": layout.get("virtual_stages"),
                "sp": layout.get("sequence_parallel"),
                "zero": layout.get("zero_stage"),
                "b": layout.get("micro_batch_size"),
                "recompute": layout.get("recompute"),
                "iteration s": total,
                "comm %": f"{100.0 * comm / total:.1f}" if total > 0 else "-",
                "bubble %": (
                    f"{100.0 * float(breakdown.get('bubble', 0.0)) / total:.1f}"
                    if total > 0
                    else "-"
                ),
                "memory GB": f"{float(entry.get('memory_bytes') or 0.0) / GB:.4g}",
                "fits": entry.get("fits"),
            }
        )
    return rows


# --------------------------------------------------------------------------- verbs


class OutputFormat(StrEnum):
    JSON = "json"
    TABLE = "table"


class MatrixFormat(StrEnum):
    CSV = "csv"
    JSON = "json"
    PNG = "png"


class MatrixLevel(StrEnum):
    GPU = "gpu"
    NODE = "node"


class Algorithm(StrEnum):
    RING = "ring"
    DIRECT = "direct"


class ServeLogLevel(StrEnum):  # uvicorn's levels
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    DEBUG = "debug"
    TRACE = "trace"


RequestOpt = Annotated[
    str | None,
    typer.Option("--request", "-r", help="Request JSON file, or - for stdin.", show_default=False),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="json or table.")]


def _options(ctx: typer.Context) -> Options:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()


@app.callback()
def _root(
    ctx: typer.Context,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="COMMEST_SERVER",
            help="Base URL of a commest server; without it, the service runs in-process.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="COMMEST_API_TOKEN",
            help="Bearer token for writes (default: COMMEST_API_TOKEN, or the local token).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Closed-form iteration-time and communication estimates for GPT-style training."""
    ctx.obj = Options(server=server.rstrip("/") if server else None, token=token or None)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface (default: COMMEST_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: COMMEST_PORT).")] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes (each write is seen by all at once).")
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="One log line per request.")] = True,
    log_level: Annotated[
        ServeLogLevel, typer.Option(case_sensitive=False, help="Server log level.")
    ] = ServeLogLevel.INFO,
) -> None:
    """Apply migrations, add the nominal profiles and serve the REST API with uvicorn."""
    import uvicorn

    from api.serverlog import log_config
    from profiles.db import make_engine, session_factory, transaction, upgrade_database
    from profiles.repository import ensure_nominal_profiles

    settings = load_settings()
    url = settings.resolved_database_url
    try:
        upgrade_database(url)
        engine = make_engine(url)
        try:
            with transaction(session_factory(engine)) as session:
                added = ensure_nominal_profiles(session=session)
        finally:
            engine.dispose()
    except CommestError as exc:
        _map_domain_error(exc)
    except SQLAlchemyError as exc:
        _database_down(exc)
    bind_host = host or settings.host
    bind_port = port or settings.port
    shown = "localhost" if bind_host in ("0.0.0.0", "::") else bind_host
    base = f"http://{shown}:{bind_port}"
    if added:
        typer.echo(f"added nominal profiles: {', '.join(added)}")
    typer.echo(f"commest API:  {base}")
    typer.echo(f"API docs:     {base}/docs")
    if settings.api_token is not None and settings.api_token.get_secret_value():
        typer.echo("write token:  from COMMEST_API_TOKEN")
    else:
        from api.deps import token_path

        typer.echo(f"write token:  {token_path(settings)} (created on first start)")
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=bind_host,
        port=bind_port,
        workers=workers,
        access_log=access_log,
        log_level=log_level.value,
        log_config=log_config(log_level.value),
    )


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
        _die('give --request FILE or --megatron-args "..."', EXIT_BAD_INPUT)
    if request == "-" and megatron_args == "-":
        _die("only one of --request and --megatron-args can read stdin", EXIT_BAD_INPUT)
    body = read_request(request)
    if megatron_args is not None:
        from api.megatron_args import parse_megatron_args

        line = sys.stdin.read() if megatron_args == "-" else megatron_args
        try:
            parsed = parse_megatron_args(line, gpus=gpus, vocab_size=vocab_size)
        except CommestError as exc:
            _map_domain_error(exc)
        for note in parsed.notes:
            _note(note)
        body.update(parsed.request)
    if cluster_profile:
        body["cluster"] = {"profile": cluster_profile}
    if fidelity:
        body["fidelity"] = fidelity
    with open_service(_options(ctx)) as service:
        result = service.json("POST", "/v1/estimates", json_body=body)
    if output_format is OutputFormat.TABLE:
        print_estimate_table(result, _stdout())
    else:
        emit_json(result)


@app.command()
def matrix(
    ctx: typer.Context,
    request: RequestOpt = None,
    output_format: Annotated[
        MatrixFormat, typer.Option("--format", "-f", help="csv, json or png.")
    ] = MatrixFormat.CSV,
    level: Annotated[MatrixLevel, typer.Option(help="gpu or node.")] = MatrixLevel.GPU,
    algorithm: Annotated[Algorithm | None, typer.Option(help="ring (default) or direct.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Traffic matrix (bytes per iteration, GPU or node level): POST /v1/traffic-matrices."""
    if request is None:
        _die("--request FILE is required", EXIT_BAD_INPUT)
    if output_format is MatrixFormat.PNG and output is None and sys.stdout.isatty():
        _die("--format png writes binary: give --output FILE or redirect stdout", EXIT_BAD_INPUT)
    body = read_request(request)
    body["format"] = output_format.value
    body["level"] = level.value
    if algorithm is not None:
        body["algorithm"] = algorithm.value
    with open_service(_options(ctx)) as service:
        response = service.call("POST", "/v1/traffic-matrices", json_body=body)
    content = response.content
    if output is not None:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_bytes(content)
        except OSError as exc:
            _die(f"--output {output}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT)
        typer.echo(f"wrote {len(content)} bytes to {output}", err=True)
        return
    sys.stdout.flush()
    stream = getattr(sys.stdout, "buffer", None)
    if stream is not None:
        stream.write(content)
        stream.flush()
    else:
        sys.stdout.write(content.decode("utf-8", errors="replace"))


@app.command()
def plan(
    ctx: typer.Context,
    request: RequestOpt = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="GPU count to plan for.")] = None,
    top_k: Annotated[int | None, typer.Option(min=1, help="How many layouts to return.")] = None,
    output_format: FormatOpt = OutputFormat.JSON,
) -> None:
    """Rank every valid layout for a GPU count: POST /v1/plans."""
    if request is None:
        _die("--request FILE is required", EXIT_BAD_INPUT)
    body = read_request(request)
    body.pop("layout", None)
    if gpus is not None:
        body["gpus"] = gpus
    if top_k is not None:
        body["top_k"] = top_k
    with open_service(_options(ctx)) as service:
        result = service.json("POST", "/v1/plans", json_body=body)
    if output_format is OutputFormat.JSON:
        emit_json(result)
        return
    console = _stdout()
    console.print(
        f"evaluated {result.get('evaluated')} layouts, {result.get('feasible')} feasible",
        highlight=False,
    )
    layouts = result.get("layouts") or []
    if layouts:
        console.print(rows_table("Best layouts", plan_rows(layouts)))


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
        _die("--request FILE is required", EXIT_BAD_INPUT)
    if (max_iteration_time is None) == (baseline is None):
        _die("give exactly one of --max-iteration-time S or --baseline NAME", EXIT_BAD_INPUT)
    if tolerance is not None and baseline is None:
        _die("--tolerance applies to --baseline only", EXIT_BAD_INPUT)
    if output_format not in ("text", "json"):
        _die(f"--format {output_format}: must be text or json", EXIT_BAD_INPUT)
    body = read_request(request)
    if max_iteration_time is not None:
        body["max_iteration_time_s"] = max_iteration_time
    else:
        body["baseline"] = baseline
        body["tolerance"] = 0.05 if tolerance is None else tolerance
    started = time.perf_counter()
    with open_service(_options(ctx)) as service:
        result = service.json("POST", "/v1/checks", json_body=body)
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
            _die(f"--junit-xml {junit_xml}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT)
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
    params = {"op": op, "ranks": ranks, "nodes": nodes, "bytes": parse_size(size)}
    with open_service(_options(ctx)) as service:
        result = service.json("GET", f"/v1/profiles/{profile}/bandwidth", params=params)
    if output_format is OutputFormat.TABLE and isinstance(result, Mapping):
        _stdout().print(mapping_table(f"Bandwidth of {profile}", _flat(result)))
    else:
        emit_json(result)


@app.command()
def validate(
    output_format: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table or json.")
    ] = OutputFormat.TABLE,
) -> None:
    """Compare the estimator against the published runs (the validation report)."""
    try:
        from profiles.validation.report import run_validation
    except ImportError as exc:
        _die(f"the validation report is not available in this install: {exc}", EXIT_UNAVAILABLE)
    report = run_validation()
    rendered = report.to_json() if output_format is OutputFormat.JSON else report.to_table()
    if isinstance(rendered, str):
        typer.echo(rendered.rstrip("\n"))
    else:
        _stdout().print(rendered)


# --------------------------------------------------------------------------- baselines


@baseline_app.command("set")
def baseline_set(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Baseline name.")],
    request: RequestOpt = None,
) -> None:
    """Store the request's estimate as a named baseline: PUT /v1/baselines/{name}."""
    if request is None:
        _die("--request FILE is required", EXIT_BAD_INPUT)
    body = read_request(request)
    with open_service(_options(ctx)) as service:
        emit_json(service.json("PUT", f"/v1/baselines/{name}", json_body=body))


@baseline_app.command("show")
def baseline_show(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Baseline name.")]
) -> None:
    """A stored baseline: GET /v1/baselines/{name}."""
    with open_service(_options(ctx)) as service:
        emit_json(service.json("GET", f"/v1/baselines/{name}"))


# --------------------------------------------------------------------------- profiles


@profile_app.command("create")
def profile_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
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
    with open_service(_options(ctx)) as service:
        emit_json(service.json("POST", "/v1/profiles", json_body=body))


def _items(result: Any) -> list[Mapping[str, Any]]:
    if isinstance(result, Mapping):
        for key in ("items", "profiles", "data"):
            if isinstance(result.get(key), list):
                return list(result[key])
        return []
    return list(result) if isinstance(result, list) else []


@profile_app.command("list")
def profile_list(ctx: typer.Context, output_format: FormatOpt = OutputFormat.TABLE) -> None:
    """Every profile: GET /v1/profiles."""
    with open_service(_options(ctx)) as service:
        result = service.json("GET", "/v1/profiles")
    if output_format is OutputFormat.JSON:
        emit_json(result)
        return
    wanted = ("name", "gpu_model", "gpus_per_node", "peak_tflops", "utilization", "nominal")
    rows = [{k: row.get(k) for k in wanted if k in row} for row in _items(result)]
    _stdout().print(rows_table("Profiles", rows))


@profile_app.command("show")
def profile_show(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Profile name.")]
) -> None:
    """One profile: GET /v1/profiles/{name}."""
    with open_service(_options(ctx)) as service:
        emit_json(service.json("GET", f"/v1/profiles/{name}"))


@profile_app.command("delete")
def profile_delete(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="Profile name.")]
) -> None:
    """Delete a profile and its runs: DELETE /v1/profiles/{name}."""
    with open_service(_options(ctx)) as service:
        service.call("DELETE", f"/v1/profiles/{name}")
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


@profile_app.command("upload")
def profile_upload(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
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
    for path in files:
        if not path.is_file():
            _die(f"{path}: no such file", EXIT_BAD_INPUT)
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
    with (
        open_service(_options(ctx)) as service,
        Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=_stderr(),
            transient=True,
        ) as progress,
    ):
        task = progress.add_task(f"uploading to {name}", total=len(files))
        for path in files:
            progress.update(task, description=f"uploading {path.name}")
            with path.open("rb") as handle:
                result = service.json(
                    "POST",
                    f"/v1/profiles/{name}/runs",
                    files={"files": (path.name, handle, "text/plain")},
                    params=hints,
                )
            summaries.extend(upload_summary(path, result))
            progress.advance(task)
    for line in summaries:
        typer.echo(line)


@profile_app.command("uploads")
def profile_uploads(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Uploads per page.")] = 100,
    offset: Annotated[int, typer.Option(min=0, help="First upload of the page.")] = 0,
    output_format: FormatOpt = OutputFormat.TABLE,
) -> None:
    """A profile's uploads (file, label, flags, disabled): GET /v1/profiles/{name}/uploads."""
    params = {"limit": str(limit), "offset": str(offset)}
    with open_service(_options(ctx)) as service:
        result = service.json("GET", f"/v1/profiles/{name}/uploads", params=params)
    if output_format is OutputFormat.JSON:
        emit_json(result)
        return
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
    _stdout().print(rows_table(f"Uploads of {name} ({shown})", rows))


@profile_app.command("upload-remove")
def profile_upload_remove(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
    upload_id: Annotated[int, typer.Argument(min=1, help="Upload id (see profile uploads).")],
) -> None:
    """Delete an upload and its runs: DELETE /v1/profiles/{name}/uploads/{id}."""
    with open_service(_options(ctx)) as service:
        service.call("DELETE", f"/v1/profiles/{name}/uploads/{upload_id}")
    typer.echo(f"removed upload {upload_id} of profile {name}")


@profile_app.command("upload-disable")
def profile_upload_disable(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
    upload_id: Annotated[int, typer.Argument(min=1, help="Upload id (see profile uploads).")],
    enable: Annotated[bool, typer.Option("--enable", help="Enable it again instead.")] = False,
) -> None:
    """Stop an upload's runs answering (or, with --enable, let them answer again):
    PATCH /v1/profiles/{name}/uploads/{id}."""
    with open_service(_options(ctx)) as service:
        result = service.json(
            "PATCH",
            f"/v1/profiles/{name}/uploads/{upload_id}",
            json_body={"disabled": not enable},
        )
    state = "disabled" if result.get("disabled") else "enabled"
    typer.echo(f"upload {upload_id} of profile {name}: {state}")


# Query parameters of POST .../training-logs that --set may give (the others have options).
LOG_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_length",
    "ffn_hidden_size",
    "num_query_groups",
    "tensor",
    "pipeline",
    "context_parallel",
    "expert_parallel",
    "virtual_stages",
    "micro_batch_size",
    "global_batch_size",
    "recompute",
)


@profile_app.command("upload-log")
def profile_upload_log(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
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
            help=f"FIELD=VALUE for another field the log lacks ({', '.join(LOG_FIELDS)}).",
        ),
    ] = None,
) -> None:
    """Store a training run read from its log: POST /v1/profiles/{name}/training-logs.

    Prints the answer (steady-state iteration time, the iterations used and left out, the
    request read); `profile calibrate NAME --use-stored-runs` then fits u on stored runs."""
    if not file.is_file():
        _die(f"{file}: no such file", EXIT_BAD_INPUT)
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
    for item in set_fields or []:
        key, eq, value = item.partition("=")
        if not eq or key not in LOG_FIELDS:
            _die(
                f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(LOG_FIELDS)}",
                EXIT_BAD_INPUT,
            )
        params[key] = value
    with open_service(_options(ctx)) as service, file.open("rb") as handle:
        result = service.json(
            "POST",
            f"/v1/profiles/{name}/training-logs",
            files={"file": (file.name, handle, "text/plain")},
            params=params,
        )
    for warning in result.get("warnings") or [] if isinstance(result, dict) else []:
        _note(f"warning: {warning}")
    emit_json(result)


@profile_app.command("calibrate")
def profile_calibrate(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Profile name.")],
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
) -> None:
    """Fit the utilization u from measured iterations: POST /v1/profiles/{name}/calibrations."""
    if measurements is None and not use_stored_runs:
        _die("give --measurements FILE or --use-stored-runs", EXIT_BAD_INPUT)
    body: dict[str, Any] = {}
    if measurements is not None:
        data = read_json(measurements, "--measurements")
        body = dict(data) if isinstance(data, dict) else {"runs": data}
    if use_stored_runs:
        body["use_stored_runs"] = True
    body["apply"] = apply
    with open_service(_options(ctx)) as service:
        emit_json(service.json("POST", f"/v1/profiles/{name}/calibrations", json_body=body))


# --------------------------------------------------------------------------- database


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations to the configured database; print its revision."""
    from profiles.db import current_revision, normalise_url, upgrade_database

    url = load_settings().resolved_database_url
    try:
        upgrade_database(url)
        revision = current_revision(url)
    except CommestError as exc:
        _map_domain_error(exc)
    except SQLAlchemyError as exc:
        _database_down(exc)
    shown = normalise_url(url).render_as_string(hide_password=True)
    typer.echo(f"{shown} at revision {revision}")


GLOBAL_OPTIONS = ("--server", "--token")


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move ``--server``/``--token`` given after the verb to the front.

    Both are options of the root command, but users write them where they read naturally
    (``commest estimate --request f.json --server URL``); accept both places.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS and i > 0:
            if "=" in arg:
                front.append(arg)
            elif i + 1 < len(argv):
                front += [arg, argv[i + 1]]
                i += 1
            else:
                rest.append(arg)  # a dangling option: let typer name the error
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main() -> None:
    """The console-script entry point."""
    app(args=hoist_global_options(sys.argv[1:]))


if __name__ == "__main__":
    main()
