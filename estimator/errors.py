"""The one domain error hierarchy of commest.

Every layer raises these; only ``api`` maps them to HTTP problem details
(RFC 9457) and to CLI exit codes.

    CommestError                      base; never raised itself
    ├── ValidationError               an input breaks a rule (field, value, rule)      -> 422
    │   ├── LayoutError               p·t·d, divisibility, micro-batch rules            -> 422
    │   └── CalibrationError          an ill-posed fit (no compute-bound run, u ∉ (0,1]) -> 422
    ├── ParseError                    benchmark text that holds no readable table       -> 422
    ├── NotFoundError                 unknown profile, baseline, preset, run            -> 404
    ├── ConflictError                 a name that is taken, a concurrent write          -> 409
    ├── LimitError                    a request beyond a configured cap                 -> 413
    ├── AuthError                     missing or wrong bearer token                     -> 401
    └── UnavailableError              the database (or another dependency) is down      -> 503
"""

from __future__ import annotations

from typing import Any


class CommestError(Exception):
    """Base of every domain error; carries a message a user can act on."""

    status: int = 500
    title: str = "Internal error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context: dict[str, Any] = context

    def __str__(self) -> str:
        return self.message


class ValidationError(CommestError):
    """An input value breaks a rule; names the field, the value and the rule."""

    status = 422
    title = "Invalid input"

    def __init__(self, field: str, value: Any, rule: str, *, hint: str | None = None) -> None:
        message = f"{field}={value!r}: {rule}"
        if hint:
            message = f"{message} ({hint})"
        super().__init__(message, field=field, value=value, rule=rule)
        self.field = field
        self.value = value
        self.rule = rule


class LayoutError(ValidationError):
    """A parallel layout that cannot run (p·t·d, divisibility, micro-batch rules)."""

    title = "Invalid layout"


class CalibrationError(ValidationError):
    """A fit of u that is ill-posed or gives a value outside (0, 1]."""

    title = "Calibration failed"


class ParseError(CommestError):
    """Benchmark text that holds no table commest can read."""

    status = 422
    title = "Unreadable benchmark output"

    def __init__(self, message: str, *, lines: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message, lines=lines or [])
        self.lines = lines or []


class TrainingLogParseError(ParseError):
    """A training log (Megatron-LM, Megatron-DeepSpeed, NeMo) commest cannot read: its own
    title and problem ``type`` (``training-log-parse``), so it is not mistaken for benchmark
    output; a ``ParseError`` still, for code that catches either."""

    title = "Unreadable training log"


class NotFoundError(CommestError):
    """A named thing (profile, baseline, preset, run) that does not exist."""

    status = 404
    title = "Not found"


class ConflictError(CommestError):
    """A write that conflicts with what is stored (a taken name)."""

    status = 409
    title = "Conflict"


class LimitError(CommestError):
    """A request beyond a configured cap (body size, files, matrix size, plan space)."""

    status = 413
    title = "Request too large"


class AuthError(CommestError):
    """A write without a valid bearer token."""

    status = 401
    title = "Unauthorized"


class UnavailableError(CommestError):
    """A dependency (the database) is not reachable now; retry later."""

    status = 503
    title = "Service unavailable"
