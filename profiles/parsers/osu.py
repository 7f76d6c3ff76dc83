"""Reader for OSU micro-benchmarks output (collectives, osu_latency, osu_bw).

::

    # OSU MPI-CUDA Allreduce Latency Test v7.3
    # Datatype: MPI_CHAR.
    # Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations
    1                      53.34             24.80            158.96        1000

Rows become nccl-tests-style points: time in us, algbw = S / time, busbw = algbw × the
nccl-tests bus factor. OSU collectives do not print the rank count, so busbw stays NaN until
``apply_hints`` supplies it. For all_gather, alltoall, gather and scatter OSU prints the
per-rank message size where nccl-tests counts the whole buffer (per-rank size × ranks); those
sizes are converted once the rank count is known. osu_latency (one-way latency) and osu_bw
(MB/s, MB = 10^6 bytes; time = size / bandwidth) are sendrecv between 2 ranks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from estimator.bandwidth import Collective
from profiles.parsed import ParsedPoint, ParsedRun
from profiles.parsers._common import (
    Line,
    canonical_dtype,
    line_list,
    make_point,
    to_float,
    to_int,
)

_TITLE = re.compile(r"OSU\s+(\S+)\s+(.{0,200}?)\bTest\b\s*(?:v(\S+))?")

# OSU test title (lower case, without "latency") -> (collective, OSU binary stem)
_COLLECTIVES: dict[str, tuple[Collective, str]] = {
    "allreduce": (Collective.ALL_REDUCE, "allreduce"),
    "allgather": (Collective.ALL_GATHER, "allgather"),
    "allgatherv": (Collective.ALL_GATHER, "allgatherv"),
    "all-to-all personalized exchange": (Collective.ALLTOALL, "alltoall"),
    "all-to-allv personalized exchange": (Collective.ALLTOALL, "alltoallv"),
    "alltoall": (Collective.ALLTOALL, "alltoall"),
    "alltoallv": (Collective.ALLTOALL, "alltoallv"),
    "reduce_scatter": (Collective.REDUCE_SCATTER, "reduce_scatter"),
    "reduce_scatter_block": (Collective.REDUCE_SCATTER, "reduce_scatter_block"),
    "broadcast": (Collective.BROADCAST, "bcast"),
    "bcast": (Collective.BROADCAST, "bcast"),
    "reduce": (Collective.REDUCE, "reduce"),
    "gather": (Collective.GATHER, "gather"),
    "gatherv": (Collective.GATHER, "gatherv"),
    "scatter": (Collective.SCATTER, "scatter"),
    "scatterv": (Collective.SCATTER, "scatterv"),
}
# Collectives whose OSU "Size" is the per-rank message (nccl-tests counts size × ranks).
PER_RANK_SIZE = frozenset(
    {Collective.ALL_GATHER, Collective.ALLTOALL, Collective.GATHER, Collective.SCATTER}
)


@dataclass(slots=True)
class _Test:
    line: int
    collective: Collective | None
    source_test: str | None
    backend: str | None
    version: str | None
    kind: str  # "latency", "bw", "unsupported"
    ranks: int | None
    notes: list[str] = field(default_factory=list)
    dtype: str | None = None
    value_col: int = 1
    header_seen: bool = False
    points: list[ParsedPoint] = field(default_factory=list)
    unreadable: list[Line] = field(default_factory=list)
    bad_values: list[Line] = field(default_factory=list)
    failed_validation: list[int] = field(default_factory=list)
    last_line: int = 0
    unsupported: str | None = None


def _classify(title: str, line: int) -> _Test:
    m = _TITLE.match(title)
    flavor, middle, version = (m.group(1), m.group(2), m.group(3)) if m else ("MPI", "", None)
    parts = flavor.split("-", 1)
    backend = parts[0].lower() if parts[0].isalpha() else "mpi"
    device = parts[1] if len(parts) > 1 else None
    test = _Test(line, None, None, backend, version, "latency", None)
    if device:
        test.notes.append(f"OSU built for {device} ({flavor})")
    prefix = "osu_" if backend == "mpi" else "osu_xccl_"
    name = middle.strip().lower()
    nonblocking = name.startswith("non-blocking ")
    if nonblocking:
        name = name[len("non-blocking ") :].strip()
        prefix += "i"
        test.notes.append("non-blocking test: the 'Pure Comm.(us)' column is read as the time")
    if name == "latency":
        test.collective, test.source_test, test.ranks = Collective.SENDRECV, prefix + "latency", 2
        test.notes.append("osu_latency: one-way latency between 2 ranks, read as sendrecv")
    elif name == "bandwidth":
        test.collective, test.source_test, test.ranks = Collective.SENDRECV, prefix + "bw", 2
        test.kind = "bw"
        test.notes.append("osu_bw: bandwidth between 2 ranks, read as sendrecv (time = size/bw)")
    elif name.endswith(" latency") and name[: -len(" latency")].strip() in _COLLECTIVES:
        collective, stem = _COLLECTIVES[name[: -len(" latency")].strip()]
        test.collective, test.source_test = collective, prefix + stem
    else:
        test.kind = "unsupported"
        test.unsupported = title.strip()
    return test


class OsuReader:
    """A single pass over the lines collecting OSU tests."""

    def __init__(self) -> None:
        self.runs: list[ParsedRun] = []
        self.warnings: list[str] = []
        self.unread: list[Line] = []
        self.headers_seen = 0
        self._test: _Test | None = None

    def read(self, lines: list[Line]) -> None:
        for number, s in lines:
            self._line(number, s)
        self._close()

    def _line(self, number: int, s: str) -> None:
        test = self._test
        first = s[0]
        if first.isdigit() or (first == "-" and s[1:2].isdigit()):
            if test is not None and test.header_seen:
                self._row(test, number, s)
            return
        h = s.lstrip("#").strip() if first == "#" else s
        if not h:
            return
        if h.startswith("OSU ") and "Test" in h:
            self._close()
            self._test = _classify(h, number)
            return
        if h.startswith("Size") and ("Latency" in h or "Bandwidth" in h or "Comm" in h):
            self.headers_seen += 1
            if test is None or test.header_seen:
                self._close()
                test = self._headerless(h, number)
                self._test = test
            test.header_seen = True
            if "Pure Comm" in h:
                test.value_col = 3
            return
        if test is None:
            return
        if h.startswith("Datatype:"):
            test.dtype = canonical_dtype(h.partition(":")[2].strip().rstrip("."))
        elif h.startswith("Send Buffer on"):
            test.notes.append(h)
        elif ("busbw" in h and "algbw" in h) or h.startswith(
            ("nThread", "Collective test starting", "nccl-tests version")
        ):
            self._close()

    def _headerless(self, header: str, number: int) -> _Test:
        """A '# Size ...' header with no OSU title line above it."""
        test = _Test(number, None, None, "mpi", None, "latency", None)
        test.notes.append("no '# OSU ... Test' title: the test is read from the column header")
        if "Bandwidth" in header:
            test.kind, test.collective, test.ranks = "bw", Collective.SENDRECV, 2
        elif "Latency" in header and "Avg" not in header:
            test.collective, test.ranks = Collective.SENDRECV, 2
        return test

    def _row(self, test: _Test, number: int, s: str) -> None:
        tokens = s.split()
        if len(tokens) <= test.value_col:
            test.unreadable.append((number, s))
            return
        size = to_int(tokens[0])
        value = to_float(tokens[test.value_col])
        if size is None or value is None:
            (test.unreadable if value is None else test.bad_values).append((number, s))
            return
        test.last_line = number
        if "Fail" in tokens[test.value_col + 1 :]:
            test.failed_validation.append(number)
        if test.kind == "bw":
            time_us = size / value if value > 0 and math.isfinite(value) else math.nan
        else:
            time_us = value
        point = make_point(size, None, time_us, math.nan, in_place=False)
        if point is None:
            test.bad_values.append((number, s))
            return
        if test.collective is Collective.SENDRECV:  # bus factor 1, 2 ranks: nothing missing
            point = ParsedPoint(
                size_bytes=point.size_bytes,
                count=None,
                time_us=point.time_us,
                algbw_gbps=point.algbw_gbps,
                busbw_gbps=point.algbw_gbps,
                in_place=False,
            )
        test.points.append(point)

    def _close(self) -> None:
        test = self._test
        if test is None:
            return
        self._test = None
        if test.kind == "unsupported":
            self.warnings.append(
                f"line {test.line}: {test.unsupported!r} is not a test commest reads "
                "(supported: collectives, osu_latency, osu_bw); skipped"
            )
            return
        notes = list(test.notes)
        if test.unreadable:
            notes.append(
                f"dropped {len(test.unreadable)} row(s) that could not be read "
                f"({line_list(n for n, _ in test.unreadable)})"
            )
        if test.bad_values:
            notes.append(
                "dropped rows with a size or time that is not a positive finite number "
                f"({line_list(n for n, _ in test.bad_values)})"
            )
        if test.failed_validation:
            notes.append(f"OSU validation failed on {line_list(test.failed_validation)}")
        if test.collective in PER_RANK_SIZE:
            notes.append(
                "OSU prints the per-rank message size; sizes become nccl-tests sizes "
                "(× ranks) once the rank count is known"
            )
        if not test.points:
            if test.header_seen or test.unreadable or test.bad_values:
                self.warnings.append(f"the OSU test at line {test.line} has no readable rows")
                self.unread.extend(sorted(test.unreadable + test.bad_values))
            return
        self.runs.append(
            ParsedRun(
                collective=test.collective.value if test.collective is not None else None,
                tool="osu",
                backend=test.backend,
                ranks=test.ranks,
                nodes=None,
                ranks_per_node=None,
                gpu_model=None,
                dtype=test.dtype,
                redop=None,
                tool_version=test.version,
                points=test.points,
                warnings=notes,
                source_test=test.source_test,
                first_line=test.line,
                last_line=test.last_line,
            )
        )
