"""What a command calls: a ``Client`` of the REST contract, and how a call is refused.

``Client`` names every operation the verbs use, one method per REST call (the docstring of
each says which). ``api.cli.remote.HttpClient`` makes the call over HTTP (``--server URL``);
``api.cli.local.LocalClient`` answers it in this process. Either way a refusal is a
:class:`Problem` (an RFC 9457 problem-details body and its HTTP status) and an outage is
:class:`Unreachable`; ``api.cli.transport.open_client`` turns both into the one line on
stderr and the exit code.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

REMOTE_TIMEOUT_S = 120.0
NO_TOKEN_HINT = (
    "pass --token or set COMMEST_API_TOKEN (a server without a configured "
    "token keeps the one it made in <data_dir>/api-token)"
)


class Problem(Exception):
    """A refused call: its HTTP status and problem-details body (or the text of a non-JSON one)."""

    def __init__(self, status: int, body: Any, *, text: str = "", hint: str = "") -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body
        self.text = text
        self.hint = hint

    def line(self) -> str:
        """The one line shown for it (see :func:`problem_line`)."""
        line = problem_line(self.status, self.body, self.text)
        return f"{line}; {self.hint}" if self.hint else line


class Unreachable(Exception):
    """The service could not be reached (or answered something that is not the contract)."""


def _reason(status: int) -> str:
    from http import HTTPStatus  # an error path: not imported on the way to an answer

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def problem_line(status: int, body: Any, text: str = "") -> str:
    """One line from a problem-details answer: title, detail, field/value/rule, status."""
    if not isinstance(body, dict):
        shown = " ".join(text.split())[:200]
        return f"HTTP {status}: {shown or _reason(status)}"
    title = str(body.get("title") or _reason(status) or f"HTTP {status}")
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
    return f"{line} (HTTP {status})"


class Client(ABC):
    """The operations of the REST contract the verbs use; a refusal raises :class:`Problem`.

    JSON answers come back as the decoded JSON (exactly what the server sends).
    """

    where: str  # for messages: "http://host:port" or "the local service"

    @abstractmethod
    def estimate(self, body: Mapping[str, Any]) -> Any:
        """POST /v1/estimates."""

    @abstractmethod
    def check(self, body: Mapping[str, Any]) -> Any:
        """POST /v1/checks."""

    @abstractmethod
    def plan(self, body: Mapping[str, Any]) -> Any:
        """POST /v1/plans."""

    @abstractmethod
    def traffic_matrix(self, body: Mapping[str, Any]) -> bytes:
        """POST /v1/traffic-matrices: the body as sent (JSON, CSV or PNG bytes)."""

    @abstractmethod
    def timeline(self, body: Mapping[str, Any]) -> bytes:
        """POST /v1/timelines: the body as sent (JSON, PNG or SVG bytes)."""

    @abstractmethod
    def bandwidth(self, profile: str, params: Mapping[str, Any]) -> Any:
        """GET /v1/profiles/{profile}/bandwidth?op=&ranks=&nodes=&bytes=."""

    @abstractmethod
    def create_profile(self, body: Mapping[str, Any]) -> Any:
        """POST /v1/profiles (a write)."""

    @abstractmethod
    def list_profiles(self) -> Any:
        """GET /v1/profiles."""

    @abstractmethod
    def get_profile(self, name: str) -> Any:
        """GET /v1/profiles/{name}."""

    @abstractmethod
    def delete_profile(self, name: str) -> None:
        """DELETE /v1/profiles/{name} (a write)."""

    @abstractmethod
    def upload_runs(
        self, profile: str, filename: str, content: bytes, hints: Mapping[str, str]
    ) -> Any:
        """POST /v1/profiles/{profile}/runs with one file (a write); ``hints`` as query."""

    @abstractmethod
    def list_uploads(self, profile: str, *, limit: int, offset: int) -> Any:
        """GET /v1/profiles/{profile}/uploads?limit=&offset=."""

    @abstractmethod
    def remove_upload(self, profile: str, upload_id: int) -> None:
        """DELETE /v1/profiles/{profile}/uploads/{upload_id} (a write)."""

    @abstractmethod
    def set_upload_disabled(self, profile: str, upload_id: int, *, disabled: bool) -> Any:
        """PATCH /v1/profiles/{profile}/uploads/{upload_id} with ``{"disabled": ...}`` (a write)."""

    @abstractmethod
    def upload_training_log(
        self, profile: str, filename: str, content: bytes, hints: Mapping[str, str]
    ) -> Any:
        """POST /v1/profiles/{profile}/training-logs with one file (a write); ``hints`` as query."""

    @abstractmethod
    def calibrate(self, profile: str, body: Mapping[str, Any]) -> Any:
        """POST /v1/profiles/{profile}/calibrations (a write)."""

    @abstractmethod
    def put_baseline(self, name: str, body: Mapping[str, Any]) -> Any:
        """PUT /v1/baselines/{name} (a write)."""

    @abstractmethod
    def get_baseline(self, name: str) -> Any:
        """GET /v1/baselines/{name}."""


def database_down(exc: Exception) -> Unreachable:
    """The database could not be used (a driver or pool error)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Unreachable(f"the database is not reachable ({type(exc).__name__}: {first})")
