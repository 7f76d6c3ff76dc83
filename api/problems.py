"""Errors as RFC 9457 problem-details answers (``application/problem+json``) of the app.

Every domain error (``estimator.errors``) keeps its ``status`` and ``title``; this module adds
``type`` (a URN per error class), ``detail`` (the error's message), ``instance`` (the request
path) and, where the error knows them, ``field``, ``value`` and ``rule``. Request validation
errors of pydantic become 422 problems with one entry per failing field in ``errors``;
database outages become 503; unknown routes and methods keep their HTTP status (a 405
lists in ``Allow`` every method the path answers). A response model that refuses a number
that is not finite, outside ``api.schemas.finite_answer``, is still a 422, never a 500.
What each error becomes is decided once, in ``api.problem_details`` (the command line answers
in process with the same bodies); this module sends them and adds the HTTP-only cases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from functools import lru_cache
from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.problem_details import ProblemDetails, problem, problem_of, request_problem
from estimator.errors import CommestError

PROBLEM_JSON = "application/problem+json"


def send(request: Request, problem: ProblemDetails) -> JSONResponse:
    """The problem as the answer to ``request`` (its path as ``instance``)."""
    body = {**problem.body, "instance": request.url.path}
    return JSONResponse(
        body,
        status_code=problem.status,
        media_type=PROBLEM_JSON,
        headers=problem.headers or None,
    )


def _where(request: Request) -> str:
    return f"{request.method} {request.url.path}"


def _exception_problem(request: Request, exc: Exception) -> JSONResponse:
    return send(request, problem_of(exc, _where(request)))


def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    return send(request, request_problem(exc.errors()))


_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@lru_cache(maxsize=256)
def _path_regex(template: str) -> re.Pattern[str]:
    """``/v1/profiles/{name}`` as a regex matching concrete paths."""
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


def allowed_methods(request: Request) -> list[str]:
    """Every method the app's OpenAPI document serves on the request's path.

    Starlette's own 405 names the methods of the first route that matched the path only; a
    path served by several routes (``GET`` and ``POST /v1/profiles``) answers for all of them.
    """
    path, root = request.scope["path"], request.scope.get("root_path", "")
    path = path.removeprefix(root) if root and path.startswith(root) else path
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if _path_regex(template).fullmatch(path):
            methods |= {m.upper() for m in operations if m in _OPERATIONS}
    if "GET" in methods:
        methods.add("HEAD")  # Starlette answers HEAD wherever it answers GET
    return sorted(methods)


_UNPARSED_BODY = "There was an error parsing the body"


def _unparsed_body_detail(cause: BaseException | None) -> str:
    """Why a JSON body FastAPI could not parse was refused (beyond a syntax error, a 422)."""
    if isinstance(cause, RecursionError):
        why = "it nests arrays or objects deeper than the parser allows"
    elif isinstance(cause, ValueError) and "digits" in str(cause):
        why = "it holds an integer too long to convert (over 4300 digits)"
    else:
        why = f"it is not readable JSON ({type(cause).__name__ if cause else 'no cause given'})"
    return (
        f"the body could not be parsed: {why}; send one JSON object with "
        "content-type: application/json"
    )


def _http_problem(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    try:
        title = HTTPStatus(exc.status_code).phrase
    except ValueError:
        title = "Error"
    detail = exc.detail if isinstance(exc.detail, str) else title
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route {request.method} {request.url.path}"
    if exc.status_code == 405:
        given = [m for m in headers.get("Allow", "").split(", ") if m]
        allowed = allowed_methods(request) or sorted(given)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} {request.url.path} is not served; it answers {headers['Allow']}"
    if exc.status_code == 400 and detail == _UNPARSED_BODY:  # FastAPI's words, cause chained
        detail = _unparsed_body_detail(exc.__cause__)
    return send(
        request, problem(status=exc.status_code, title=title, detail=detail, headers=headers)
    )


E = TypeVar("E", bound=Exception)


def _handler(
    kind: type[E], render: Callable[[Request, E], JSONResponse]
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """A Starlette exception handler that renders ``kind`` with ``render``."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, kind)
        return render(request, exc)

    return handle


def install(app: FastAPI) -> None:
    """Register every problem-details handler on ``app``."""
    handlers: list[tuple[type[Exception], Callable[..., Awaitable[JSONResponse]]]] = [
        (RequestValidationError, _handler(RequestValidationError, _request_validation)),
        (StarletteHTTPException, _handler(StarletteHTTPException, _http_problem)),
    ]
    # Everything else a request may end with: one mapping (api.problem_details). Each kind is
    # registered by name so Starlette answers it as an exception it handles; only the last,
    # Exception, is a server error (logged, and re-raised for the server to see).
    handlers += [
        (kind, _handler(kind, _exception_problem))
        for kind in (
            CommestError,
            DBAPIError,
            OperationalError,
            PoolTimeoutError,
            ArithmeticError,  # extreme input
            PydanticValidationError,
            Exception,
        )
    ]
    for kind, handle in handlers:
        app.add_exception_handler(kind, handle)
    app.openapi = _documented_problems(app.openapi)  # type: ignore[method-assign]


def _documented_problems(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` that documents the problems every route may answer with.

    FastAPI's own 422 entry (``application/json``, ``HTTPValidationError``) is replaced by the
    problem details this module sends; operations with a JSON request body declare the 400
    FastAPI answers when the body cannot be decoded at all (bytes that are not UTF-8), and
    every operation with a body the 413 of ``api.app.BodyCap``.
    """
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if done:
            return done[0]
        spec = build()
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if "422" in responses and PROBLEM_JSON not in responses["422"].get("content", {}):
                    responses["422"] = problem_responses(422)[422]
                body = operation.get("requestBody", {}).get("content", {})
                if "application/json" in body and "400" not in responses:
                    responses["400"] = problem_responses(400)[400]
                if body and "413" not in responses:
                    responses["413"] = problem_responses(413)[413]
        schemas = spec.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's, now unreferenced
            if f'"#/components/schemas/{unused}"' not in json.dumps(spec):
                schemas.pop(unused, None)
        done.append(spec)
        return spec

    return openapi


#: OpenAPI description of a problem-details response, for ``responses=`` on routes.
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "instance"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "field": {"type": "string"},
        "value": {},
        "rule": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
}


#: Headers a problem of that status always carries.
_PROBLEM_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "the bearer challenge (RFC 6750)",
            "schema": {"type": "string"},
            "required": True,
        }
    },
    503: {
        "Retry-After": {
            "description": "seconds to wait before retrying",
            "schema": {"type": "string"},
            "required": True,
        }
    },
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting problem-details answers for ``statuses``."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "description": HTTPStatus(status).phrase,
            "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA}},
        }
        if status in _PROBLEM_HEADERS:
            entry["headers"] = _PROBLEM_HEADERS[status]
        out[status] = entry
    return out
