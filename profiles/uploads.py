"""Preparing a benchmark upload for storage: parse, fill hints, fit, digest, check.

Everything here is pure (no database session), so an upload is parsed before its write
transaction opens and the transaction only inserts rows (``profiles.repository.store_upload``).

- ``parse_upload`` reads one text (with its file name, label and placement hints) into a
  :class:`PreparedUpload`; errors name the file they are about.
- ``content_digest`` is the upload's identity: a SHA-256 of its runs as they will be stored
  (collective, tool, backend, ranks, nodes, dtype, redop and every point's size, time and half),
  so the same table pasted with CRLF line ends, launcher prefixes or inside a markdown fence is
  the same upload, and the same text with other hints is not.
- ``upload_flags`` says what does not match the profile: a GPU of another family named in the
  text, or a busbw beyond what the links of the profile's GPU family can carry
  (``profiles.nominal.hardware_limit_gbps`` × ``HARDWARE_MARGIN``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from estimator.bandwidth import parse_collective
from estimator.errors import CommestError, ParseError, ValidationError
from profiles.bandwidth import RunCurve
from profiles.models import FILENAME_LENGTH, LABEL_LENGTH, NAME_LENGTH
from profiles.nominal import HARDWARE_MARGIN, family_spec, gpu_family, hardware_limit_gbps
from profiles.parsed import ParsedPoint, ParsedRun

CONTENT_FORMAT = "commest-content-1"  # frozen copy in migration 2026_11_22_0004
_STRING_LIMITS = {
    "collective": 32,
    "tool": 32,
    "backend": 32,
    "gpu_model": NAME_LENGTH,
    "dtype": 16,
    "redop": 16,
    "tool_version": NAME_LENGTH,
}


@dataclass(frozen=True, slots=True)
class Hints:
    """What the uploader says about a text that the text may not say itself."""

    op: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    backend: str | None = None
    dtype: str | None = None

    def merged(self, other: Hints | None) -> Hints:
        """These hints with ``other``'s given fields taking precedence (per-file over global)."""
        if other is None:
            return self
        return Hints(
            op=other.op if other.op is not None else self.op,
            ranks=other.ranks if other.ranks is not None else self.ranks,
            nodes=other.nodes if other.nodes is not None else self.nodes,
            backend=other.backend if other.backend is not None else self.backend,
            dtype=other.dtype if other.dtype is not None else self.dtype,
        )


@dataclass(frozen=True, slots=True)
class UploadInput:
    """One uploaded text: its file name (multipart) and label, and the hints for it."""

    text: str
    filename: str | None = None
    label: str | None = None
    hints: Hints = field(default_factory=Hints)


@dataclass(frozen=True, slots=True)
class Flag:
    """Something about an upload that does not match its profile."""

    code: str  # "gpu_mismatch" or "exceeds_hardware"
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(slots=True)
class PreparedRun:
    """One run ready to insert: its column values, points and curve."""

    values: dict[str, Any]  # Run columns
    points: list[ParsedPoint]
    curve: RunCurve | None  # None when no point is usable for bandwidth answers

    @property
    def collective(self) -> str:
        return str(self.values["collective"])

    @property
    def ranks(self) -> int:
        return int(self.values["ranks"])

    @property
    def nodes(self) -> int:
        return int(self.values["nodes"])


@dataclass(slots=True)
class PreparedUpload:
    """An upload parsed and checked, ready for ``profiles.repository.store_upload``."""

    text: str
    sha256: str
    content_digest: str
    runs: list[PreparedRun]
    warnings: list[str]
    filename: str | None = None
    label: str | None = None


# --- digests --------------------------------------------------------------------------------


def text_digest(text: str) -> str:
    """SHA-256 of the text's UTF-8 bytes; ValidationError for non-text or NUL characters."""
    if not isinstance(text, str):
        raise ValidationError("text", type(text).__name__, "must be text")
    if "\x00" in text:
        raise ValidationError("text", "…\\x00…", "must not contain NUL characters")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_digest(runs: Sequence[PreparedRun]) -> str:
    """The canonical digest of an upload's runs as stored (module docstring)."""
    content = []
    for run in runs:
        v = run.values
        points = sorted([bool(p.in_place), int(p.size_bytes), float(p.time_us)] for p in run.points)
        content.append(
            [
                v["collective"],
                v["tool"],
                v["backend"],
                int(v["ranks"]),
                int(v["nodes"]),
                v["dtype"],
                v["redop"],
                points,
            ]
        )
    text = json.dumps([CONTENT_FORMAT, content], separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# --- runs -----------------------------------------------------------------------------------


def _clip(field_name: str, value: str | None, warnings: list[str]) -> str | None:
    if value is None:
        return None
    limit = _STRING_LIMITS[field_name]
    if len(value) > limit:
        warnings.append(f"{field_name} {value!r} cut to {limit} characters")
        return value[:limit]
    return value


def prepare_run(parsed: ParsedRun, index: int) -> PreparedRun:
    """A run's column values, points and curve from a parsed table; ValidationError if unusable."""
    where = f"runs[{index}]"
    if parsed.missing:
        raise ValidationError(
            f"{where}.{parsed.missing[0]}",
            None,
            "the benchmark text does not say it",
            hint=f"pass {parsed.missing[0]} as a query parameter",
        )
    assert parsed.collective is not None and parsed.ranks is not None
    assert parsed.nodes is not None
    op = parse_collective(parsed.collective)
    ranks, nodes = parsed.ranks, parsed.nodes
    if ranks < 1:
        raise ValidationError(f"{where}.ranks", ranks, "must be ≥ 1")
    if not 1 <= nodes <= ranks:
        raise ValidationError(f"{where}.nodes", nodes, f"must be in 1..ranks ({ranks})")
    if not parsed.points:
        raise ParseError(f"table {index + 1} ({op.value}) has no rows")
    for point in parsed.points:
        if point.size_bytes < 0 or not math.isfinite(point.time_us):
            raise ValidationError(
                f"{where}.points", (point.size_bytes, point.time_us), "sizes ≥ 0, finite times"
            )
    warnings = list(parsed.warnings)
    wrong = sum(1 for p in parsed.points if p.wrong)
    if wrong:
        warnings.append(f"{wrong} rows report #wrong > 0 (results not verified)")
    backend = _clip("backend", parsed.backend, warnings)
    curve = RunCurve.from_points(
        op=op,
        ranks=ranks,
        nodes=nodes,
        points=[(p.size_bytes, p.time_us, p.in_place) for p in parsed.points],
        label="",
        backend=backend,
    )
    fit = curve.fit if curve is not None else None
    if fit is None:
        warnings.append("no latency-bandwidth fit (needs two sizes with times growing with size)")
    per_node = parsed.ranks_per_node
    if per_node is None and ranks % nodes == 0:
        per_node = ranks // nodes
    values: dict[str, Any] = {
        "table_index": index,
        "collective": op.value,
        "tool": _clip("tool", parsed.tool, warnings) or "unknown",
        "backend": backend,
        "ranks": ranks,
        "nodes": nodes,
        "ranks_per_node": per_node,
        "gpu_model": _clip("gpu_model", parsed.gpu_model, warnings),
        "dtype": _clip("dtype", parsed.dtype, warnings),
        "redop": _clip("redop", parsed.redop, warnings),
        "tool_version": _clip("tool_version", parsed.tool_version, warnings),
        "warnings": warnings,
        "alpha_us": fit.alpha_us if fit else None,
        "beta_gbps": fit.beta_gbps if fit else None,
    }
    return PreparedRun(values=values, points=list(parsed.points), curve=curve)


def prepare_parsed(
    *,
    text: str,
    runs: Sequence[ParsedRun],
    warnings: Sequence[str] = (),
    filename: str | None = None,
    label: str | None = None,
) -> PreparedUpload:
    """An upload from runs already parsed (and hinted); the text is kept verbatim."""
    sha256 = text_digest(text)
    if not runs:
        raise ParseError("the text holds no benchmark table")
    prepared = [prepare_run(parsed, i) for i, parsed in enumerate(runs)]
    all_warnings = list(warnings)
    for run in prepared:
        all_warnings.extend(w for w in run.values["warnings"] if w not in all_warnings)
    return PreparedUpload(
        text=text,
        sha256=sha256,
        content_digest=content_digest(prepared),
        runs=prepared,
        warnings=all_warnings,
        filename=_filename(filename),
        label=_label(label),
    )


def _filename(name: str | None) -> str | None:
    if name is None:
        return None
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in base)
    return cleaned[:FILENAME_LENGTH] or None


def _label(label: str | None) -> str | None:
    if label is None:
        return None
    if not isinstance(label, str) or not label.strip():
        raise ValidationError("label", label, "must be a non-empty text")
    if len(label) > LABEL_LENGTH or not label.isprintable():
        raise ValidationError(
            "label", label, f"must be at most {LABEL_LENGTH} printable characters"
        )
    return label.strip()


def _name_file(error: CommestError, filename: str | None) -> CommestError:
    """The same error, saying which file it is about (multipart uploads)."""
    if filename is None:
        return error
    if isinstance(error, ValidationError):
        named = ValidationError(f"files[{filename}].{error.field}", error.value, error.rule)
        named.context["file"] = filename
        return named
    if isinstance(error, ParseError):
        named_parse = ParseError(f"file {filename!r}: {error.message}", lines=error.lines)
        named_parse.context["file"] = filename
        return named_parse
    error.context["file"] = filename
    return error


def parse_upload(upload: UploadInput) -> PreparedUpload:
    """Parse one text, fill its gaps from the hints, fit and digest it (no database)."""
    from profiles.parsers import apply_hints, parse_benchmark_text

    try:
        text_digest(upload.text)
        result = parse_benchmark_text(upload.text)
        hints = upload.hints
        runs = [
            apply_hints(
                run,
                op=hints.op,
                ranks=hints.ranks,
                nodes=hints.nodes,
                backend=hints.backend,
                dtype=hints.dtype,
            )
            for run in result.runs
        ]
        return prepare_parsed(
            text=upload.text,
            runs=runs,
            warnings=result.warnings,
            filename=upload.filename,
            label=upload.label,
        )
    except (ParseError, ValidationError) as error:
        raise _name_file(error, upload.filename) from error


def parse_uploads(uploads: Sequence[UploadInput]) -> list[PreparedUpload]:
    """Every upload parsed; the first error names its file."""
    return [parse_upload(upload) for upload in uploads]


# --- checks against the profile -------------------------------------------------------------


def upload_flags(
    prepared: PreparedUpload, *, profile_name: str, profile_gpu_model: str
) -> list[Flag]:
    """What in ``prepared`` does not match the profile (empty when all matches)."""
    flags: list[Flag] = []
    family = gpu_family(profile_gpu_model)
    for index, run in enumerate(prepared.runs):
        model = run.values.get("gpu_model")
        found = gpu_family(model)
        if family and found and found != family:
            flags.append(
                Flag(
                    "gpu_mismatch",
                    f"run {index + 1} names GPU {model!r} (family {found}) but profile "
                    f"{profile_name!r} is {profile_gpu_model!r} (family {family})",
                )
            )
    spec = family_spec(profile_gpu_model)
    if spec is not None:
        for index, run in enumerate(prepared.runs):
            curve = run.curve
            if curve is None:
                continue
            peak = float(curve.busbw_gbps.max())
            limit = hardware_limit_gbps(spec, curve.op, curve.ranks, curve.nodes)
            if peak > limit * HARDWARE_MARGIN:
                flags.append(
                    Flag(
                        "exceeds_hardware",
                        f"run {index + 1} ({curve.op.value} over {curve.ranks} ranks on "
                        f"{curve.nodes} node(s)) reaches {peak:.4g} GB/s busbw, more than "
                        f"{HARDWARE_MARGIN:g} × the {limit:.4g} GB/s the links of {family} "
                        f"nodes carry at line rate ({spec.name}); check the rank and node "
                        "counts and the units",
                    )
                )
    unique: dict[tuple[str, str], Flag] = {}
    for flag in flags:
        unique.setdefault((flag.code, flag.message), flag)
    return list(unique.values())
