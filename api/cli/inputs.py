"""What commands read: JSON request files (or stdin) and human-written sizes."""

from __future__ import annotations

import json
import math
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import typer

from api.cli.exits import EXIT_BAD_INPUT, die


def read_json(source: str, what: str = "--request") -> Any:
    """The JSON in file ``source`` (``-``: stdin); exit 2 naming the problem."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        die(f"{what} {source}: cannot read ({exc.strerror or exc})", EXIT_BAD_INPUT)
    except UnicodeDecodeError as exc:  # JSON is UTF-8 (RFC 8259 §8.1)
        die(
            f"{what} {source}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); save the JSON as UTF-8",
            EXIT_BAD_INPUT,
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        die(
            f"{what} {source}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            EXIT_BAD_INPUT,
        )
    # Python's json reads NaN and Infinity, which JSON (RFC 8259) has not: refuse them here,
    # naming the field, rather than let the request fail to encode (--server) or differ by path.
    where = non_finite(value)
    if where is not None:
        path, number = where
        die(
            f"{what} {source}: {path or 'the document'} is {number!r}, which JSON cannot "
            "carry (RFC 8259 has no NaN or Infinity): write a finite number",
            EXIT_BAD_INPUT,
        )
    return value


def non_finite(value: Any) -> tuple[str, float] | None:
    """The path and value of a NaN or infinite number in ``value``, if any (no recursion)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, item
        if isinstance(item, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
    return None


def read_request(source: str | None) -> dict[str, Any]:
    """The request object from a file, or an empty one when no file is given."""
    if source is None:
        return {}
    body = read_json(source)
    if not isinstance(body, dict):
        die(f"--request {source}: must hold a JSON object", EXIT_BAD_INPUT)
    return body


def require_request(source: str | None) -> dict[str, Any]:
    """The request object of ``--request``, which this command cannot do without."""
    if source is None:
        die("--request FILE is required", EXIT_BAD_INPUT)
    return read_request(source)


def picture_request(source: str | None, output_format: str, output: Path | None) -> dict[str, Any]:
    """``require_request`` for a verb that can answer a PNG: never binary onto a terminal."""
    if source is None:
        die("--request FILE is required", EXIT_BAD_INPUT)
    if output_format == "png" and output is None and sys.stdout.isatty():
        die("--format png writes binary: give --output FILE or redirect stdout", EXIT_BAD_INPUT)
    return read_request(source)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\+?\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)
_MAX_SIZE_BYTES = 10**15  # what GET /v1/profiles/{name}/bandwidth takes as `bytes`


def parse_size(text: str) -> int:
    """Bytes from ``1048576``, ``1e8``, ``64K``, ``256MiB`` or ``1GB`` (K = 1024, as nccl-tests'
    -b); exact (no float rounding or overflow) and at most 10^15."""
    match = _SIZE.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 1048576, 1e8, 64K, 256MiB)")
    unit = match.group(2).lower()
    scale = 1024 ** ("kmgt".index(unit) + 1) if unit else 1
    exact = Decimal(match.group(1)) * scale
    if exact > _MAX_SIZE_BYTES:
        raise typer.BadParameter(f"{text!r}: a size must be at most 10^15 bytes")
    value = int(exact)
    if value <= 0:
        raise typer.BadParameter(f"{text!r}: a size must be at least 1 byte")
    return value
