"""Benchmark-output parsers: nccl-tests / rccl-tests and OSU micro-benchmarks.

``parse_benchmark_text`` reads an uploaded text into runs (one per table, and per data type,
reduction op or root where one table mixes them); ``apply_hints`` fills what the text did not
say from the user's query parameters. Both raise only ``ParseError`` and ``ValidationError``.
"""

from __future__ import annotations

import re

from estimator.errors import ParseError
from profiles.parsed import ParsedRun, ParseResult
from profiles.parsers._common import EXPECTED, MAX_LINE_CHARS, Line, quote, split_lines
from profiles.parsers.hints import apply_hints
from profiles.parsers.nccl import NcclReader
from profiles.parsers.osu import OsuReader

__all__ = ["apply_hints", "parse_benchmark_text"]

_QUOTED = 5
# Lines by which NCCL / RCCL and nccl-tests report that a run failed (nccl-tests common.cu
# "Test NCCL failure <file>:<line> '<ncclGetErrorString>'", NCCL's "NCCL WARN ..." and the
# error strings of ncclResult_t), most specific first.
_FAILURES = (
    re.compile(r"Test (?:NCCL|CUDA|RCCL|HIP) failure"),
    re.compile(r"\b[NR]CCL failure\b|\bnccl\w*Error\b"),
    re.compile(r"unhandled (?:system|cuda|hip) error|internal error|invalid usage|remote process"),
    re.compile(r"\b[NR]CCL WARN\b"),
)
_FAILURE_HINT = (
    "the benchmark failed before printing results: fix the failure (NCCL_DEBUG=INFO shows "
    "more) and upload the output of a run that completes"
)


def failure_lines(lines: list[Line], limit: int = 2) -> list[Line]:
    """The lines reporting an NCCL/RCCL failure, most specific kind first (at most ``limit``)."""
    for pattern in _FAILURES:
        found = [(n, t) for n, t in lines if pattern.search(t)]
        if found:
            return found[:limit]
    return []


def parse_benchmark_text(text: str) -> ParseResult:
    """Every benchmark table in ``text``, or ``ParseError`` quoting the lines not understood."""
    if not isinstance(text, str):
        raise ParseError(f"the upload is not text; {EXPECTED}")
    lines, warnings = split_lines(text)
    runs: list[ParsedRun] = []
    unread: list[Line] = []
    headers = 0
    if "busbw" in text:
        nccl = NcclReader()
        nccl.read(lines)
        runs.extend(nccl.runs)
        warnings.extend(nccl.warnings)
        unread.extend(nccl.unread)
        headers += nccl.headers_seen
    if "Size" in text:
        osu = OsuReader()
        osu.read(lines)
        runs.extend(osu.runs)
        warnings.extend(osu.warnings)
        unread.extend(osu.unread)
        headers += osu.headers_seen
    failed = failure_lines(lines) if ("CCL" in text or "failure" in text) else []
    if runs:
        runs.sort(key=lambda r: r.first_line or 0)
        if failed:
            shown = "; ".join(f"line {n}: {quote(t)!r}" for n, t in failed)
            warnings.append(f"the log reports a failure, results may be incomplete: {shown}")
        return ParseResult(runs=runs, warnings=warnings)
    raise _no_table(text, lines, sorted(set(unread)) if headers else [], warnings, failed)


def _no_table(
    text: str, lines: list[Line], unread: list[Line], warnings: list[str], failed: list[Line]
) -> ParseError:
    if not text.strip():
        return ParseError(f"the text is empty; {EXPECTED}")
    if failed:
        quoted = [(n, quote(t)) for n, t in failed]
        shown = "; ".join(f"line {n}: {t!r}" for n, t in quoted)
        return ParseError(
            f"the log holds no benchmark results but reports a failure: {shown}; {_FAILURE_HINT}",
            lines=quoted,
        )
    if unread:
        what = "found a benchmark table header but no readable rows"
        bad = unread[:_QUOTED]
    elif lines:
        what = "found no benchmark table"
        bad = lines[:_QUOTED]
    else:
        what = f"every line is longer than {MAX_LINE_CHARS} characters"
        bad = [(n, raw) for n, raw in enumerate(text.split("\n"), 1) if raw.strip()][:_QUOTED]
    quoted = [(n, quote(t)) for n, t in bad]
    shown = "; ".join(f"line {n}: {t!r}" for n, t in quoted)
    extra = f" ({'; '.join(warnings)})" if warnings else ""
    return ParseError(f"{what}; {EXPECTED}; could not read {shown}{extra}", lines=quoted)
