"""What an error becomes as RFC 9457 problem details, without any web framework.

:func:`problem_of` maps every exception a request may end with (a domain error of
``estimator.errors``, a response model refusing a non-finite number, a database or numeric
failure, anything else) to a :class:`ProblemDetails`: its status, body and headers;
:func:`request_problem` does the same for a request that failed validation. ``api.problems``
sends them as HTTP answers (adding ``instance``, the request path); the command line, which
answers in process, prints the same bodies (``api.cli.local``). One mapping for both.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from estimator.errors import (
    AuthError,
    CommestError,
    ConflictError,
    UnavailableError,
    ValidationError,
)

log = logging.getLogger("api")

TYPE_PREFIX = "urn:commest:problem:"
_VALUE_CHARS = 200

#: error class -> the last part of its problem ``type`` URN
_SLUGS: dict[type[CommestError], str] = {}


@dataclass(frozen=True, slots=True)
class ProblemDetails:
    """A problem-details answer: status, body (without ``instance``) and headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def problem_type(error: type[CommestError] | None, status: int) -> str:
    """The ``type`` URN of a problem: per domain error class, else per HTTP status."""
    if error is not None and error is not CommestError:
        slug = _SLUGS.get(error)
        if slug is None:
            name = error.__name__.removesuffix("Error") or error.__name__
            slug = "".join(f"-{c.lower()}" if c.isupper() else c for c in name).lstrip("-")
            _SLUGS[error] = slug
        return TYPE_PREFIX + slug
    from http import HTTPStatus  # an error path: not imported on the way to an answer

    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "about:blank"
    return TYPE_PREFIX + phrase.lower().replace(" ", "-").replace("'", "")


def safe_value(value: Any) -> Any:
    """A JSON-safe, bounded rendering of an offending value."""
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and len(value) > _VALUE_CHARS:
            return value[:_VALUE_CHARS] + "…"
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping | Sequence) and not isinstance(value, bytes | bytearray):
        text = repr(value)
        if len(text) <= _VALUE_CHARS:
            try:
                json.dumps(value, allow_nan=False)
                return value
            except (TypeError, ValueError):
                return text
        return text[:_VALUE_CHARS] + "…"
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS] + "…"


def problem(
    *,
    status: int,
    title: str,
    detail: str,
    type_: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> ProblemDetails:
    """A problem; ``extra`` members are added when not None."""
    body: dict[str, Any] = {
        "type": type_ or problem_type(None, status),
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update({k: v for k, v in extra.items() if v is not None})
    return ProblemDetails(status, body, dict(headers or {}))


def _error_members(exc: CommestError) -> dict[str, Any]:
    members: dict[str, Any] = {}
    if isinstance(exc, ValidationError):
        members.update(field=exc.field, value=safe_value(exc.value), rule=exc.rule)
    for key, value in exc.context.items():
        if key in ("field", "value", "rule") or key in members:
            continue
        if key == "lines":
            members["lines"] = [{"line": n, "text": t} for n, t in value]
        else:
            members[key] = safe_value(value)
    return members


def domain_problem(exc: CommestError) -> ProblemDetails:
    """The problem of a domain error: its status and title, its message as ``detail``."""
    headers: dict[str, str] = {}
    if isinstance(exc, AuthError):
        headers = {"WWW-Authenticate": exc.context.get("challenge", "Bearer")}
    if isinstance(exc, UnavailableError):
        headers = {"Retry-After": "5"}
    members = _error_members(exc)
    members.pop("challenge", None)
    return problem(
        status=exc.status,
        title=exc.title,
        detail=exc.message,
        type_=problem_type(type(exc), exc.status),
        headers=headers,
        **members,
    )


def _loc_field(loc: Sequence[int | str]) -> tuple[str, str]:
    """(where, dotted field) from a pydantic error location such as ('body', 'model', 'x')."""
    where = str(loc[0]) if loc else "body"
    parts = list(loc[1:]) if where in ("body", "query", "path", "header", "cookie") else list(loc)
    name = ""
    for part in parts:
        if isinstance(part, int):
            name += f"[{part}]"
        else:
            name += ("." if name else "") + str(part)
    return where, name or where


_SEND_JSON = "send one JSON object with the header content-type: application/json"


def _body_rule(err: Mapping[str, Any]) -> str | None:
    """What is wrong with a body that is not a JSON object at all, and how to send one.

    FastAPI reports unparseable JSON at ('body', <character offset>), and a body it did not
    read as JSON (another content type) as its raw bytes failing to be an object.
    """
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "json_invalid" and loc[:1] == ("body",):
        at = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
        reason = (err.get("ctx") or {}).get("error", "JSON decode error")
        return f"is not valid JSON ({reason}{at}): {_SEND_JSON}"
    if loc == ("body",) and isinstance(err.get("input"), bytes | bytearray):
        return f"was not read as JSON (is the content type application/json?): {_SEND_JSON}"
    return None


def request_problem(errors: Iterable[Mapping[str, Any]]) -> ProblemDetails:
    """The 422 of a request that failed validation: one entry per failing field.

    ``errors`` are pydantic's, each ``loc`` starting with where the value was (``body``,
    ``query``, ``path``), as FastAPI reports them.
    """
    entries = []
    for err in errors:
        where, name = _loc_field(err.get("loc", ()))
        rule = str(err.get("msg", "invalid"))
        value = None if err.get("type") == "missing" else safe_value(err.get("input"))
        body_rule = _body_rule(err)
        if body_rule is not None:  # the body as a whole, not a field of it
            where, name, rule, value = "body", "body", body_rule, None
        entries.append(
            {"in": where, "field": name, "value": value, "rule": rule, "code": err.get("type")}
        )
    first = entries[0] if entries else {"field": None, "value": None, "rule": "invalid"}
    detail = "; ".join(f"{e['field']}: {e['rule']}" for e in entries) or "invalid request"
    return problem(
        status=422,
        title=ValidationError.title,
        detail=detail,
        type_=problem_type(ValidationError, 422),
        field=first["field"],
        value=first["value"],
        rule=first["rule"],
        errors=entries,
    )


def _non_finite_answer(exc: PydanticValidationError, where: str) -> ProblemDetails:
    """A response model refused a number that is not finite, outside ``finite_answer``; any
    other failure to build a response is an internal error."""
    errors = exc.errors()
    if not errors or any(e["type"] != "finite_number" for e in errors):
        return internal_problem(exc, where)
    member = next((p for p in reversed(errors[0]["loc"]) if isinstance(p, str)), "answer")
    return problem(
        status=422,
        title=ValidationError.title,
        detail=f"the request gives a non-finite {member}, which no answer can carry: its "
        "figures are outside the range commest computes with",
        type_=problem_type(ValidationError, 422),
    )


def _database_problem(exc: Exception, where: str) -> ProblemDetails | None:
    """The problem of a database failure; None if ``exc`` is not one.

    SQLAlchemy is looked at only if it is loaded: a process that never imported it cannot
    have raised its errors (and the command line's fast path never imports it).
    """
    if "sqlalchemy.exc" not in sys.modules:
        return None
    from sqlalchemy.exc import DBAPIError, IntegrityError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    if isinstance(exc, IntegrityError):
        return domain_problem(ConflictError("the write conflicts with stored data"))
    if isinstance(exc, DBAPIError):
        log.warning("database error on %s: %s", where, exc)
        return domain_problem(
            UnavailableError(f"the database is not reachable ({type(exc).__name__})")
        )
    if isinstance(exc, PoolTimeoutError):
        return domain_problem(UnavailableError("the database connection pool is exhausted"))
    return None


def _numeric_problem(exc: ArithmeticError, where: str) -> ProblemDetails:
    log.warning("numeric error on %s: %r", where, exc)
    return problem(
        status=422,
        title=ValidationError.title,
        detail=f"a value is outside the range commest computes with ({exc})",
        type_=problem_type(ValidationError, 422),
    )


def internal_problem(exc: BaseException, where: str) -> ProblemDetails:
    """An unexpected error: logged with its traceback, answered without it."""
    log.error("unhandled error on %s", where, exc_info=exc)
    return problem(
        status=500,
        title="Internal error",
        detail="an unexpected error occurred; it has been logged",
    )


def problem_of(exc: Exception, where: str) -> ProblemDetails:
    """The problem a request that raised ``exc`` answers with (``where``: for the log)."""
    if isinstance(exc, CommestError):
        return domain_problem(exc)
    if isinstance(exc, PydanticValidationError):
        return _non_finite_answer(exc, where)
    database = _database_problem(exc, where)
    if database is not None:
        return database
    if isinstance(exc, ArithmeticError):  # extreme input
        return _numeric_problem(exc, where)
    return internal_problem(exc, where)
