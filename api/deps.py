"""What the routes depend on: the app's runtime (``api/runtime.py``) and the write token.

Typed aliases are declared once here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.runtime import Runtime as Runtime  # re-exported: its old home
from api.tokens import authorize
from api.tokens import token_path as token_path  # re-exported: its old home
from estimator.errors import AuthError


async def get_runtime(request: Request) -> Runtime:
    """The app's runtime."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]

_bearer = HTTPBearer(auto_error=False, description="COMMEST_API_TOKEN or <data_dir>/api-token")


async def require_token(
    request: Request,
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Writes need ``Authorization: Bearer <token>`` (compared in constant time)."""
    header = request.headers.get("authorization")
    if header is not None and (credentials is None or not credentials.credentials.strip()):
        raise AuthError(
            "malformed Authorization header; expected 'Bearer <token>'",
            challenge='Bearer error="invalid_request"',
        )
    authorize(None if credentials is None else credentials.credentials, runtime.token())


Writer = Depends(require_token)
