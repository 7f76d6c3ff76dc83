"""The write token: ``COMMEST_API_TOKEN``, else the one kept in ``<data_dir>/api-token``.

The server loads it (and makes the file on first start); the command line reads it to
authenticate its writes, to a local server or in process. No web framework in here.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from pathlib import Path

from api.settings import Settings
from estimator.errors import AuthError

log = logging.getLogger("api")

TOKEN_FILE = "api-token"


def token_path(settings: Settings) -> Path:
    """Where a generated API token is kept: ``<data_dir>/api-token``."""
    return settings.data_dir.expanduser() / TOKEN_FILE


def configured_token(settings: Settings) -> str | None:
    """``COMMEST_API_TOKEN`` when set (and not empty)."""
    if settings.api_token is not None and settings.api_token.get_secret_value():
        return settings.api_token.get_secret_value()
    return None


def read_token(settings: Settings) -> str | None:
    """The token if there is one (configured, or in the file); never makes one."""
    configured = configured_token(settings)
    if configured is not None:
        return configured
    try:
        return token_path(settings).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def load_or_create_token(settings: Settings) -> str:
    """The bearer token for writes: ``COMMEST_API_TOKEN``, else the token file (made once).

    The file is created with mode 0600 and its path (never the token) is logged.
    """
    configured = configured_token(settings)
    if configured is not None:
        return configured
    path = token_path(settings)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if token:
        return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    log.warning("generated an API token for writes; it is in %s (mode 0600)", path)
    return token


def authorize(given: str | None, expected: bytes) -> None:
    """A write needs the token: AuthError when none is given or it is not ``expected``
    (compared in constant time)."""
    if given is None:
        raise AuthError("this write needs an Authorization: Bearer <token> header")
    if not hmac.compare_digest(given.strip().encode("utf-8"), expected):
        raise AuthError("the bearer token is not valid", challenge='Bearer error="invalid_token"')
