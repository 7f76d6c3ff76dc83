"""The capacity planner's web page: ``/`` and its static files, served by the API's own app.

Everything the page loads is in this package (no CDN: it works offline). The page's own files
are revalidated on every load (``no-cache``: an ETag answers 304 when nothing changed); the
vendored library carries its version in its name and is cached for a year. See docs/design.md,
"The web page".
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = "/web"  # the page's files: /web/app.js, /web/vendor/...

#: The page runs no inline script, no eval and talks to its own origin only.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
REVALIDATE = "no-cache"
IMMUTABLE = "public, max-age=31536000, immutable"


class _Assets(StaticFiles):
    """StaticFiles with cache headers: versioned vendor files for a year, the rest revalidated."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        vendored = Path(full_path).parent.name == "vendor"
        response.headers["Cache-Control"] = IMMUTABLE if vendored else REVALIDATE
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def _index() -> Response:
    response = FileResponse(STATIC / "index.html", media_type="text/html")
    response.headers["Cache-Control"] = REVALIDATE
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def mount(app: FastAPI) -> None:
    """Serve the page at ``/`` and its files under ``/web`` (both outside the OpenAPI schema)."""
    app.add_api_route("/", _index, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount(ASSETS, _Assets(directory=STATIC), name="web")
