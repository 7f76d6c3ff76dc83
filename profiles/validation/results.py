"""What `commest validate` scored, as the service serves it without re-running the report.

``results.json`` (beside this module) holds every scored row with what identifies and cites it,
and the report's summaries, rounded; ``python -m profiles.validation.report`` writes it and a
test checks that it says what the report says today. Reading it costs a JSON parse, once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

import numpy as np

from estimator.errors import ValidationError

RESULTS_FILE = "results.json"
SECONDS_DIGITS = 4  # rounding of the seconds in results.json (the table prints 3)
PCT_DIGITS = 2  # and of its percentages


@functools.cache
def published_results() -> dict[str, Any]:
    """The scored rows and summaries of ``results.json`` (parsed once per process)."""
    text = resources.files("profiles.validation").joinpath(RESULTS_FILE).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def check_names(field: str, asked: Sequence[str], known: Iterable[str]) -> None:
    """ValidationError naming the known values when a name asked for is not one of them."""
    names = sorted(set(known))
    for name in asked:
        if name not in names:
            raise ValidationError(field, name, f"must be one of: {', '.join(names)}")


def row_matches(
    source: str,
    model: str,
    kinds: Iterable[str],
    *,
    sources: Sequence[str] = (),
    models: Sequence[str] = (),
    wanted_kinds: Sequence[str] = (),
) -> bool:
    """Whether a row is of any of ``sources`` and of any of ``models`` (each: all when empty)
    and has every one of ``wanted_kinds``."""
    return (
        (not sources or source in sources)
        and (not models or model in models)
        and set(wanted_kinds) <= set(kinds)
    )


def error_stats(errors: Sequence[float]) -> tuple[int, float, float, float]:
    """Rows, mean |error|, max |error| and mean signed error (%) of some rows' errors."""
    if not errors:
        return 0, 0.0, 0.0, 0.0
    magnitudes = [abs(e) for e in errors]
    return len(errors), float(np.mean(magnitudes)), max(magnitudes), float(np.mean(errors))


def rounded_stats(
    rows: int, mean_abs_error_pct: float, max_abs_error_pct: float, mean_error_pct: float
) -> dict[str, float | int]:
    """``error_stats`` as results.json keeps them (percentages to ``PCT_DIGITS``)."""
    return {
        "rows": rows,
        "mean_abs_error_pct": round(mean_abs_error_pct, PCT_DIGITS),
        "max_abs_error_pct": round(max_abs_error_pct, PCT_DIGITS),
        "mean_error_pct": round(mean_error_pct, PCT_DIGITS),
    }


def error_summary(errors: Sequence[float]) -> dict[str, float | int]:
    """``error_stats`` of some rows' errors, rounded as results.json keeps them."""
    return rounded_stats(*error_stats(errors))
