"""The FastAPI application: ``create_app(settings)`` and a lazily built ``app`` for uvicorn.

Startup (lifespan): migrate the database, insert the nominal profiles, load or generate the
write token. A database that is down at startup does not stop the server: ``/healthz`` keeps
answering, ``/readyz`` and database-backed routes answer 503 until it is back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from commest.api import problems
from commest.api.deps import Runtime
from commest.api.routes import ROUTERS
from commest.api.routes.health import VERSION
from commest.errors import UnavailableError
from commest.settings import Settings, get_settings

log = logging.getLogger("commest.api")

DESCRIPTION = """\
Closed-form iteration-time and communication estimates for GPT-style training layouts.

Reads (estimates, traffic matrices, plans, checks, presets, profiles) need no token; writes
(profiles, benchmark uploads, calibrations, baselines) need `Authorization: Bearer <token>`
(`COMMEST_API_TOKEN`, or the token the server generated in `<data_dir>/api-token`).
Errors are RFC 9457 problem details (`application/problem+json`).
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new application over ``settings`` (default: ``get_settings()``)."""
    runtime = Runtime(settings or get_settings())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        runtime.token()
        try:
            await run_in_threadpool(runtime.start)
        except UnavailableError as exc:
            log.warning("starting without the database: %s", exc)
        try:
            yield
        finally:
            runtime.close()

    app = FastAPI(
        title="commest",
        version=VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)
    return app


_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    """``app``: built on first access from ``get_settings()`` (so importing stays cheap)."""
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
