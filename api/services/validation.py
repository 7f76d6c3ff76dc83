"""The published runs commest was scored on, as ``commest validate`` scored them (read from
``profiles/validation/results.json``, never re-run per request)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from api.schemas import ValidationOut
from profiles.validation.results import (
    check_names,
    error_summary,
    published_results,
    row_matches,
)

RowOrder = Literal["file", "error"]


def validation_results(
    *,
    sources: Sequence[str] = (),
    models: Sequence[str] = (),
    kinds: Sequence[str] = (),
    order: RowOrder = "file",
) -> ValidationOut:
    """GET /v1/validation: the rows of any of ``sources`` and of any of ``models`` that have
    every one of ``kinds`` (all when none is given), with their own accuracy beside every
    row's; ``order`` "error" lists the largest |error| first. Unknown names: ValidationError."""
    data = published_results()
    rows = data["rows"]
    names = {
        "source": sorted({r["source"] for r in rows}),
        "model": sorted({r["model"] for r in rows}),
        "kind": sorted(data["by_kind"]),
    }
    for field, asked in (("source", sources), ("model", models), ("kind", kinds)):
        check_names(field, asked, names[field])
    picked = [
        r
        for r in rows
        if row_matches(
            r["source"], r["model"], r["kinds"], sources=sources, models=models, wanted_kinds=kinds
        )
    ]
    if order == "error":
        picked = sorted(picked, key=lambda r: -abs(r["error_pct"]))
    return ValidationOut.model_validate(
        {
            "summary": data["summary"],
            "selection": error_summary([r["error_pct"] for r in picked]),
            "by_source": data["by_source"],
            "by_kind": data["by_kind"],
            "sources": names["source"],
            "models": names["model"],
            "kinds": names["kind"],
            "rows": picked,
        }
    )
