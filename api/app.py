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

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import problems
from api.query_names import refuse_unknown_query
from api.routes import ROUTERS
from api.routes.health import VERSION
from api.runtime import Runtime
from api.settings import Settings, get_settings
from api.web import mount as mount_web_page
from estimator.errors import UnavailableError

log = logging.getLogger("api")

DOCS_ASSETS = "/static-offline-docs"  # Swagger UI and ReDoc files, served from the package

DESCRIPTION = """\
Closed-form iteration-time and communication estimates for GPT-style training layouts.

Reads (estimates, traffic matrices, plans, checks, presets, profiles) need no token; writes
(profiles, benchmark uploads, calibrations, baselines) need `Authorization: Bearer <token>`
(`COMMEST_API_TOKEN`, or the token the server generated in `<data_dir>/api-token`).
Errors are RFC 9457 problem details (`application/problem+json`).
"""


class BodyCap:
    """Every request body is capped at ``max_bytes`` (``COMMEST_MAX_UPLOAD_BYTES``), on any route.

    The declared ``Content-Length`` is refused before anything is read, a chunked body as soon
    as it streams past the cap: 413 problem details, the body never held whole in memory.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.max_bytes
        declared = Headers(scope=scope).get("content-length", "")
        seen = 0

        async def capped() -> Message:
            nonlocal seen
            if declared.isdigit() and int(declared) > cap:
                raise HTTPException(
                    413,
                    f"the request body is {declared} bytes, over the cap of {cap} bytes "
                    "(COMMEST_MAX_UPLOAD_BYTES)",
                )
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    raise HTTPException(
                        413,
                        f"the request body exceeds the cap of {cap} bytes "
                        "(COMMEST_MAX_UPLOAD_BYTES)",
                    )
            return message

        await self.app(scope, capped, send)


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

    # /docs and /redoc load Swagger UI and ReDoc from the installed package, never a CDN
    app = FastAPIOffline(
        title="commest",
        version=VERSION,
        description=DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(refuse_unknown_query)],  # no typo'd query parameter ignored
        static_url=DOCS_ASSETS,
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from swagger.io
    )
    app.state.runtime = runtime
    app.add_middleware(BodyCap, max_bytes=runtime.settings.max_upload_bytes)
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)
    mount_web_page(app)  # the planner's page at /, its files under /web
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
