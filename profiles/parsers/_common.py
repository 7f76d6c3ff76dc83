"""Helpers shared by the nccl-tests and OSU readers: lines, numbers, data types, points."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from profiles.parsed import ParsedPoint

Line = tuple[int, str]  # (1-based line number, text without launcher prefix, stripped)

MAX_LINE_CHARS = 4096
MAX_SIZE_BYTES = 2**53  # beyond any real message; keeps sizes exact as floats
MAX_TIME_US = 1e15  # 31 years: beyond any real measurement; keeps time arithmetic finite
EXPECTED = (
    "expected an nccl-tests table (columns size count type redop root time algbw busbw "
    "#wrong ...) or OSU output (# Size  Avg Latency(us))"
)

# srun --label ("0: ", " 12: ") and Open MPI --tag-output ("[1,0]<stdout>:") prefixes.
_PREFIX = re.compile(r"\s*(?:\[\d{1,7},\d{1,7}\]<std(?:out|err)>:\s?|\d{1,7}:\s)")


def split_lines(text: str) -> tuple[list[Line], list[str]]:
    """Non-blank lines with launcher prefixes, fences and surrounding blanks removed."""
    out: list[Line] = []
    too_long: list[int] = []
    match = _PREFIX.match
    for number, raw in enumerate(text.split("\n"), 1):
        if len(raw) > MAX_LINE_CHARS:
            too_long.append(number)
            continue
        line = raw.strip()
        if not line:
            continue
        if ":" in line[:24]:
            for _ in range(2):
                m = match(line)
                if m is None:
                    break
                line = line[m.end() :].strip()
            if not line:
                continue
        if line.startswith(("```", "~~~")):
            continue
        out.append((number, line))
    warnings = []
    if too_long:
        warnings.append(
            f"skipped {len(too_long)} line(s) longer than {MAX_LINE_CHARS} characters as noise "
            f"({line_list(too_long)})"
        )
    return out, warnings


def line_list(numbers: Iterable[int], limit: int = 10) -> str:
    """``lines 3, 4, 9`` (at most ``limit`` numbers, then a count of the rest)."""
    items = list(numbers)
    shown = ", ".join(str(n) for n in items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    word = "line" if len(items) == 1 else "lines"
    return f"{word} {shown}{more}"


def quote(text: str, limit: int = 160) -> str:
    """A line made safe to quote in a message: control characters replaced, length capped."""
    cleaned = "".join(ch if ch >= " " or ch == "\t" else "?" for ch in text).replace("\x7f", "?")
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def to_int(token: str) -> int | None:
    """A non-negative decimal integer token, or None."""
    if not (token.isascii() and token.isdigit()) or len(token) > 18:
        return None
    return int(token)


def to_float(token: str) -> float | None:
    """A float token (``N/A`` and junk give None; nan and inf come back as floats)."""
    if len(token) > 40:
        return None
    try:
        return float(token.rstrip("*"))
    except ValueError:
        return None


# Data type names as nccl-tests prints them (current releases), with older and other spellings.
_DTYPE_ALIASES = {
    "int8": "int8",
    "char": "int8",
    "i8": "int8",
    "uint8": "uint8",
    "u8": "uint8",
    "byte": "uint8",
    "int32": "int32",
    "int": "int32",
    "i32": "int32",
    "uint32": "uint32",
    "uint": "uint32",
    "int64": "int64",
    "long": "int64",
    "uint64": "uint64",
    "half": "half",
    "float16": "half",
    "fp16": "half",
    "f16": "half",
    "float": "float",
    "float32": "float",
    "fp32": "float",
    "f32": "float",
    "double": "double",
    "float64": "double",
    "fp64": "double",
    "f64": "double",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "f8e4m3": "f8e4m3",
    "fp8_e4m3": "f8e4m3",
    "fp8e4m3": "f8e4m3",
    "e4m3": "f8e4m3",
    "f8e5m2": "f8e5m2",
    "fp8_e5m2": "f8e5m2",
    "fp8e5m2": "f8e5m2",
    "e5m2": "f8e5m2",
    # MPI datatypes as OSU prints them ("# Datatype: MPI_CHAR.")
    "mpi_char": "int8",
    "mpi_signed_char": "int8",
    "mpi_unsigned_char": "uint8",
    "mpi_byte": "uint8",
    "mpi_int": "int32",
    "mpi_unsigned": "uint32",
    "mpi_long": "int64",
    "mpi_long_long": "int64",
    "mpi_float": "float",
    "mpi_double": "double",
}
DTYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}


def canonical_dtype(name: str) -> str:
    """The nccl-tests spelling of a data type name (unknown names come back lower-cased)."""
    key = name.strip().strip(".").lower().replace("-", "_")
    return _DTYPE_ALIASES.get(key, key)


def make_point(
    size_bytes: int,
    count: int | None,
    time_us: float,
    busbw_gbps: float,
    *,
    in_place: bool,
    wrong: int | None = None,
) -> ParsedPoint | None:
    """A point with algbw = size / time, or None when size or time is not a positive number."""
    if not 0 < size_bytes <= MAX_SIZE_BYTES:
        return None
    if not 0.0 < time_us <= MAX_TIME_US:  # also refuses nan and inf
        return None
    algbw = size_bytes / time_us / 1e3  # bytes/us -> GB/s (GB = 1e9 bytes)
    if not math.isfinite(algbw):
        return None
    if not (math.isfinite(busbw_gbps) and busbw_gbps >= 0.0):
        busbw_gbps = math.nan
    return ParsedPoint(
        size_bytes=size_bytes,
        count=count,
        time_us=time_us,
        algbw_gbps=algbw,
        busbw_gbps=busbw_gbps,
        in_place=in_place,
        wrong=wrong,
    )
