"""What a parser hands to storage: runs of benchmark points, with what the text said.

The contract between ``profiles.parsers`` and ``profiles.repository``.
A parser never guesses: a field the text does not state stays ``None`` and is listed in
``ParsedRun.missing``; the caller fills it from the user's hints or reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ParsedPoint:
    """One row of a benchmark table (one half: out-of-place or in-place)."""

    size_bytes: int
    count: int | None
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    in_place: bool
    wrong: int | None = None  # nccl-tests "#wrong" (None for N/A or absent)


@dataclass(slots=True)
class ParsedRun:
    """One benchmark table: a collective at one scale and data type."""

    collective: str | None  # nccl-tests name: all_reduce, all_gather, ..., sendrecv
    tool: str  # "nccl-tests" or "osu"
    backend: str | None  # nccl, rccl, mpi, ...
    ranks: int | None
    nodes: int | None
    ranks_per_node: int | None
    gpu_model: str | None
    dtype: str | None
    redop: str | None
    tool_version: str | None
    points: list[ParsedPoint] = field(default_factory=list)
    avg_busbw_gbps: float | None = None
    hosts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    source_test: str | None = None  # the binary / test name as written (all_reduce_perf, osu_bw)
    first_line: int | None = None  # 1-based line number in the uploaded text
    last_line: int | None = None

    @property
    def missing(self) -> list[str]:
        """Fields a stored run needs that the text did not give."""
        needed = {"collective": self.collective, "ranks": self.ranks, "nodes": self.nodes}
        return [name for name, value in needed.items() if value is None]


@dataclass(slots=True)
class ParseResult:
    """Everything read from one uploaded text."""

    runs: list[ParsedRun]
    warnings: list[str] = field(default_factory=list)
