"""The REST contract over HTTP (``httpx``): ``commest --server URL ...``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from api.cli.client import NO_TOKEN_HINT, REMOTE_TIMEOUT_S, Client, Problem, Unreachable
from api.cli.inputs import non_finite


def segment(name: str) -> str:
    """``name`` as one path segment, percent-encoded; ``.`` and ``..`` too, so that the URL is
    not normalised away from it and the server itself answers for the name."""
    quoted = quote(name, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def server_url_problem(server: str) -> str | None:
    """Why ``server`` is not a base URL the client can call (None when it is one)."""
    try:
        url = httpx.URL(server)
    except httpx.InvalidURL as exc:
        return str(exc)
    if url.scheme not in ("http", "https"):
        return "needs an http:// or https:// scheme"
    if not url.host:
        return "names no host"
    return None


class HttpClient(Client):
    """Each operation is one HTTP request; a 4xx/5xx answer raises :class:`Problem`."""

    def __init__(self, http: httpx.Client, where: str, no_token_hint: str = NO_TOKEN_HINT) -> None:
        self.http = http
        self.where = where
        self.no_token_hint = no_token_hint

    @classmethod
    @contextmanager
    def connect(
        cls, base_url: str, token: str | None, *, token_file: Path | None = None
    ) -> Iterator[HttpClient]:
        """A client of the server at ``base_url``, sending ``token`` (if any) on every call;
        ``token_file``: where a token was looked for in vain (named when a write is refused)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        hint = NO_TOKEN_HINT
        if not token and token_file is not None:
            hint += (
                f"; no token was found in {token_file} (a server on this machine with another "
                "data directory: set COMMEST_DATA_DIR to it)"
            )
        with httpx.Client(base_url=base_url, headers=headers, timeout=REMOTE_TIMEOUT_S) as http:
            yield cls(http, base_url, hint)

    def send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        files: Any = None,
    ) -> httpx.Response:
        """The answer to one request; a 4xx/5xx raises Problem, a transport error Unreachable."""
        where = non_finite(json_body) if json_body is not None else None
        if where is not None:  # JSON cannot carry it (a flag such as --peak-tflops nan)
            field, value = where
            rule = "Input should be a finite number"  # what the server says of such a value
            raise Problem(
                422,
                {
                    "title": "Invalid input",
                    "detail": f"{field}: {rule}",
                    "field": field,
                    "value": str(value),
                    "rule": rule,
                },
            )
        try:
            response = self.http.request(method, path, json=json_body, params=params, files=files)
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach the commest service at {self.where}: {exc}") from exc
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            hint = ""
            if response.status_code == 401 and "authorization" not in {
                k.lower() for k in self.http.headers
            }:
                hint = self.no_token_hint
            raise Problem(response.status_code, body, text=response.text, hint=hint)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON body of the answer (None for an empty one)."""
        response = self.send(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise Unreachable(f"{self.where} answered {path} with non-JSON content") from None

    # -- the operations -------------------------------------------------------------------------

    def estimate(self, body: Mapping[str, Any]) -> Any:
        return self.json("POST", "/v1/estimates", json_body=body)

    def check(self, body: Mapping[str, Any]) -> Any:
        return self.json("POST", "/v1/checks", json_body=body)

    def plan(self, body: Mapping[str, Any]) -> Any:
        return self.json("POST", "/v1/plans", json_body=body)

    def traffic_matrix(self, body: Mapping[str, Any]) -> bytes:
        return self.send("POST", "/v1/traffic-matrices", json_body=body).content

    def timeline(self, body: Mapping[str, Any]) -> bytes:
        return self.send("POST", "/v1/timelines", json_body=body).content

    def bandwidth(self, profile: str, params: Mapping[str, Any]) -> Any:
        return self.json("GET", f"/v1/profiles/{segment(profile)}/bandwidth", params=params)

    def create_profile(self, body: Mapping[str, Any]) -> Any:
        return self.json("POST", "/v1/profiles", json_body=body)

    def list_profiles(self) -> Any:
        return self.json("GET", "/v1/profiles")

    def get_profile(self, name: str) -> Any:
        return self.json("GET", f"/v1/profiles/{segment(name)}")

    def delete_profile(self, name: str) -> None:
        self.send("DELETE", f"/v1/profiles/{segment(name)}")

    def upload_runs(
        self, profile: str, filename: str, content: bytes, hints: Mapping[str, str]
    ) -> Any:
        files = {"files": (filename, content, "text/plain")}
        return self.json("POST", f"/v1/profiles/{segment(profile)}/runs", files=files, params=hints)

    def list_uploads(self, profile: str, *, limit: int, offset: int) -> Any:
        params = {"limit": limit, "offset": offset}
        return self.json("GET", f"/v1/profiles/{segment(profile)}/uploads", params=params)

    def remove_upload(self, profile: str, upload_id: int) -> None:
        self.send("DELETE", f"/v1/profiles/{segment(profile)}/uploads/{upload_id}")

    def set_upload_disabled(self, profile: str, upload_id: int, *, disabled: bool) -> Any:
        path = f"/v1/profiles/{segment(profile)}/uploads/{upload_id}"
        return self.json("PATCH", path, json_body={"disabled": disabled})

    def upload_training_log(
        self, profile: str, filename: str, content: bytes, hints: Mapping[str, str]
    ) -> Any:
        files = {"file": (filename, content, "text/plain")}
        path = f"/v1/profiles/{segment(profile)}/training-logs"
        return self.json("POST", path, files=files, params=hints)

    def calibrate(self, profile: str, body: Mapping[str, Any]) -> Any:
        return self.json("POST", f"/v1/profiles/{segment(profile)}/calibrations", json_body=body)

    def put_baseline(self, name: str, body: Mapping[str, Any]) -> Any:
        return self.json("PUT", f"/v1/baselines/{segment(name)}", json_body=body)

    def get_baseline(self, name: str) -> Any:
        return self.json("GET", f"/v1/baselines/{segment(name)}")
