"""``commest serve``: the REST API with uvicorn, started as the app starts itself."""

from __future__ import annotations

from typing import Annotated

import typer

from api.cli.commands import verb_app
from api.cli.exits import EXIT_UNAVAILABLE, die, die_of
from api.cli.transport import load_settings

app = verb_app()


def _log_level(value: str) -> str:
    """One of uvicorn's log levels (any case), as uvicorn spells it."""
    from uvicorn.config import LOG_LEVELS

    level = value.lower()
    if level not in LOG_LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface (default: COMMEST_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: COMMEST_PORT).")] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes (each write is seen by all at once).")
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="One log line per request.")] = True,
    log_level: Annotated[
        str,
        typer.Option(
            callback=_log_level,
            help="Server log level: critical, error, warning, info, debug or trace.",
        ),
    ] = "info",
) -> None:
    """Apply migrations, add the nominal profiles and serve the REST API with uvicorn."""
    import uvicorn

    from api.runtime import Runtime
    from api.serverlog import log_config
    from api.tokens import configured_token, token_path
    from estimator.errors import CommestError, UnavailableError

    settings = load_settings()
    try:
        runtime = Runtime(settings)  # the app's own start-up, run once before the server
    except CommestError as exc:  # e.g. a COMMEST_DATABASE_URL that is no database URL
        die_of(exc)
    try:
        runtime.start()
    except UnavailableError as exc:
        die(exc.message, EXIT_UNAVAILABLE)
    except CommestError as exc:
        die_of(exc)
    finally:
        runtime.close()
    bind_host = host or settings.host
    bind_port = port or settings.port
    shown = "localhost" if bind_host in ("0.0.0.0", "::") else bind_host
    base = f"http://{shown}:{bind_port}"
    if runtime.inserted:
        typer.echo(f"added nominal profiles: {', '.join(runtime.inserted)}")
    typer.echo(f"commest API:  {base}")
    typer.echo(f"API docs:     {base}/docs")
    if configured_token(settings) is not None:
        typer.echo("write token:  from COMMEST_API_TOKEN")
    else:
        typer.echo(f"write token:  {token_path(settings)} (created on first start)")
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=bind_host,
        port=bind_port,
        workers=workers,
        access_log=access_log,
        log_level=log_level,
        log_config=log_config(log_level),
    )
