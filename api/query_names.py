"""Query parameters a route does not declare are refused, on every route (docs/design.md §15).

A typo (``?rank=16`` for ``ranks``) must not fall back to a default unnoticed. The names a route
accepts are read from the app's OpenAPI document (the ``in: query`` parameters of the
operation, query models expanded, aliases as sent), so a route declares its names once, in its
signature; :func:`refuse_unknown_query` is an app-wide dependency that compares them with the
request's. The answer is a 422 naming the parameter, the names accepted and, where one is
close, the likely intended one (``difflib``).
"""

from __future__ import annotations

import difflib
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute

from estimator.errors import ValidationError

_SUGGEST_CUTOFF = 0.6  # difflib's default ratio: "rank" -> "ranks", "bogus" -> nothing


def _names_by_operation(spec: dict[str, Any]) -> dict[tuple[str, str], frozenset[str]]:
    """(path template, METHOD) -> the query parameter names the operation declares."""
    out: dict[tuple[str, str], frozenset[str]] = {}
    for template, operations in spec.get("paths", {}).items():
        shared = operations.get("parameters", [])
        for method, operation in operations.items():
            if not isinstance(operation, dict) or method == "parameters":
                continue
            params = [*shared, *operation.get("parameters", [])]
            out[(template, method.upper())] = frozenset(
                str(p["name"]) for p in params if p.get("in") == "query" and "name" in p
            )
    return out


def accepted_query_names(request: Request, route: APIRoute) -> frozenset[str] | None:
    """The query names ``route`` declares for the request's method; None when the route is
    not in the OpenAPI document (then nothing is checked)."""
    state = request.app.state
    table: dict[tuple[str, str], frozenset[str]] | None = getattr(state, "query_names", None)
    if table is None:
        table = _names_by_operation(request.app.openapi())
        state.query_names = table
    method = "GET" if request.method == "HEAD" else request.method
    return table.get((route.path_format, method))


def unknown_query_error(unknown: str, accepted: frozenset[str]) -> ValidationError:
    """The 422 of a query parameter the route does not take."""
    names = sorted(accepted)
    close = difflib.get_close_matches(unknown, names, n=1, cutoff=_SUGGEST_CUTOFF)
    hint = f"did you mean {close[0]!r}?" if close else None
    takes = ", ".join(names) if names else "no query parameters"
    error = ValidationError(
        unknown,
        "<query parameter>",
        f"is not a query parameter of this route; it accepts: {takes}",
        hint=hint,
    )
    error.context.update({"in": "query", "accepted": names})
    if close:
        error.context["suggestion"] = close[0]
    return error


async def refuse_unknown_query(request: Request) -> None:
    """App-wide dependency: 422 for the first query parameter the matched route does not
    declare (the request is refused before anything else of it is read)."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    accepted = accepted_query_names(request, route)
    if accepted is None:
        return
    for name in request.query_params:
        if name not in accepted:
            raise unknown_query_error(name, accepted)
