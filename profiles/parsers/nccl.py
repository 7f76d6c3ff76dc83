"""Reader for nccl-tests (and rccl-tests) output.

One table is the block printed by one ``*_perf`` binary::

    # nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807
    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) ...
    # Using devices
    #  Rank  0 Group  0 Pid  12345 on  hostname device  0 [0000:07:00] NVIDIA A100-SXM4-80GB
    #       size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong
    #        (B) (elements)                  (us) (GB/s) (GB/s)        (us) (GB/s) (GB/s)
           1024    256  float    sum    -1  5.45   0.19   0.33      0  5.35   0.19   0.33      0
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 85.3

Columns are read from the header line, so older releases (no ``root``, no ``redop``,
``error`` instead of ``#wrong``) and newer ones (per-iteration columns, timestamps) read the
same way. A table whose rows mix data types, reduction ops or roots (``-d all``, ``-o all``)
gives one run per combination. algbw is recomputed as size / time (the printed figure is
rounded to 0.01 GB/s); busbw is algbw × the nccl-tests bus factor when the collective and the
rank count are known, else the printed figure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from estimator.bandwidth import Collective, bus_factor, parse_collective
from estimator.errors import ValidationError
from profiles.parsed import ParsedPoint, ParsedRun
from profiles.parsers._common import (
    DTYPE_BYTES,
    MAX_SIZE_BYTES,
    MAX_TIME_US,
    Line,
    canonical_dtype,
    line_list,
    to_float,
    to_int,
)

_RANK = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)"
)
_PERF = re.compile(r"\b([a-z][a-z0-9_]{0,40}?)_perf(?:_mpi)?\b")  # bounded: linear time
_INIT = re.compile(r"\brank (\d+) nranks (\d+)\b")
_INFO_HOST = re.compile(r"([^\s:\[\]]+):\d+:\d+ \[")
_MAXBYTES = re.compile(r"maxBytes\s+(\d+)")

_LEAD = {
    "size": "size",
    "bytes": "size",
    "count": "count",
    "n": "count",
    "type": "type",
    "redop": "redop",
    "op": "redop",
    "root": "root",
}
_TIME = ("time", "cputime")
_WRONG = {"#wrong": True, "wrong": True, "error": False, "errors": False, "res": False}
_BUSBW_RTOL = 0.02
_BUSBW_ATOL = 0.02


@dataclass(slots=True)
class _Half:
    time: int
    algbw: int | None = None
    busbw: int | None = None
    wrong: int | None = None
    wrong_is_count: bool = False


@dataclass(slots=True)
class _Context:
    """What the lines before a table said about the run."""

    start_line: int | None = None
    version: str | None = None
    backend: str | None = None
    test_name: str | None = None
    mentioned: str | None = None
    rank_hosts: dict[int, str] = field(default_factory=dict)
    rank_models: list[str] = field(default_factory=list)
    rank_repeats: bool = False
    rank_truncated: bool = False
    max_bytes: int | None = None
    info_nranks: set[int] = field(default_factory=set)
    info_hosts: dict[int, str] = field(default_factory=dict)
    used: bool = False


_Row = tuple[int, int | None, float, float, float, float, bool, int | None]


@dataclass(slots=True)
class _Group:
    dtype: str | None
    redop: str | None
    root: str | None
    # (size, count, time_us, algbw, printed busbw, printed algbw, in_place, wrong)
    rows: list[_Row] = field(default_factory=list)
    ratios: set[int] = field(default_factory=set)
    sizes: dict[int, int] = field(default_factory=dict)
    duplicates: list[int] = field(default_factory=list)
    last_line: int = 0


@dataclass(slots=True)
class _Table:
    header_line: int
    lead: dict[str, int]
    halves: list[_Half]
    min_tokens: int
    time_scale: float
    context: _Context
    groups: dict[tuple[str, str, str], _Group] = field(default_factory=dict)
    unreadable: list[Line] = field(default_factory=list)
    zero_size: list[int] = field(default_factory=list)
    bad_values: list[Line] = field(default_factory=list)
    wrong_lines: list[int] = field(default_factory=list)
    last_line: int = 0
    avg_busbw: float | None = None
    oob_failed: bool = False
    trailer: bool = False
    concluded: str | None = None
    units_seen: bool = False


def _header(tokens: list[str]) -> tuple[dict[str, int], list[_Half], int] | None:
    """Column layout of a table header line, or None when it is not one."""
    names = [t.lower() for t in tokens]
    if not names or names[0] not in ("size", "bytes"):
        return None
    lead: dict[str, int] = {}
    halves: list[_Half] = []
    for i, name in enumerate(names):
        if name in _TIME:
            halves.append(_Half(time=i))
        elif not halves:
            key = _LEAD.get(name)
            if key is None or key in lead:
                return None
            lead[key] = i
        elif name == "algbw":
            halves[-1].algbw = i
        elif name == "busbw":
            halves[-1].busbw = i
        elif name in _WRONG and halves[-1].wrong is None:
            halves[-1].wrong = i
            halves[-1].wrong_is_count = _WRONG[name]
    halves = [h for h in halves if h.busbw is not None]
    if not halves:
        return None
    last = max(max(h.time, h.busbw or 0, h.algbw or 0, h.wrong or 0) for h in halves)
    return lead, halves, last + 1


def _collective_from_name(name: str) -> Collective | None:
    m = _PERF.search(name)
    base = m.group(1) if m else name
    try:
        return parse_collective(base)
    except ValidationError:
        return None


class NcclReader:
    """A single pass over the lines; ``feed`` each line, then ``finish``."""

    def __init__(self) -> None:
        self.runs: list[ParsedRun] = []
        self.warnings: list[str] = []
        self.unread: list[Line] = []
        self.headers_seen = 0
        self._ctx = _Context()
        self._table: _Table | None = None
        self._last: _Table | None = None

    # -- line dispatch -------------------------------------------------------------------

    def read(self, lines: list[Line]) -> None:
        for number, text in lines:
            self._line(number, text)
        self._close()

    def _line(self, number: int, s: str) -> None:
        table = self._table
        first = s[0]
        if table is not None and (first.isdigit() or (first == "-" and s[1:2].isdigit())):
            self._row(table, number, s)
            return
        if first == "#":
            h = s.lstrip("#").strip()
            if not h:
                return
        else:
            h = s
        c0 = h[0]
        if c0.isdigit():
            if table is None:
                self.unread.append((number, s))
            return
        if "NCCL INFO" in h or "RCCL INFO" in h:
            self._info(h)
            return
        if "busbw" in h and "algbw" in h:
            self._table_header(number, h)
            return
        if c0 in "(oO" and ("(B)" in h or h.startswith(("out-of-place", "OUT-OF-PLACE"))):
            if table is not None and "(ms)" in h:
                table.time_scale = 1e3
            if table is not None:
                table.units_seen = True
            return
        if h.startswith("Avg bus bandwidth"):
            if table is not None:
                table.trailer = True
                table.last_line = number
                value = h.rpartition(":")[2].split()
                avg = to_float(value[0]) if value else None
                table.avg_busbw = avg if avg is not None and math.isfinite(avg) else None
                self._close()
            return
        if h.startswith("Out of bounds values"):
            if table is not None:
                table.trailer = True
                table.last_line = number
                table.oob_failed = "FAILED" in h
            return
        if h.startswith("Collective test concluded:"):
            target = table or self._last
            if target is not None:
                target.concluded = h.partition(":")[2].strip()
            return
        if h.startswith("Collective test starting:"):
            self._block(number)
            self._ctx.test_name = h.partition(":")[2].strip() or None
            return
        if h.startswith(("nccl-tests version", "rccl-tests version")):
            self._block(number)
            parts = h.split()
            self._ctx.version = parts[2] if len(parts) > 2 else None
            self._ctx.backend = "rccl" if h.startswith("rccl") else self._ctx.backend
            return
        if h.startswith("rccl-tests:"):
            self._ctx.backend = "rccl"
            self._ctx.version = h.partition("Version")[2].strip() or self._ctx.version
            return
        if h.startswith("nThread"):
            self._block(number)
            m = _MAXBYTES.search(h)
            self._ctx.max_bytes = int(m.group(1)) if m and len(m.group(1)) < 19 else None
            return
        if h.startswith("Rank"):
            self._rank(number, h)
            return
        if h.startswith("OSU ") and "Test" in h:
            self._close()
            self._block(number)
            return
        if h == "..." and self._table is None:
            self._ctx.rank_truncated = bool(self._ctx.rank_hosts)
            return
        if "_perf" in h:
            found = _PERF.findall(h)
            if found:
                if self._ctx.used:
                    self._block(number)
                self._ctx.mentioned = found[-1] + "_perf"
            return
        if table is None and ("NCCL" in h or "RCCL" in h):
            if "RCCL" in h:
                self._ctx.backend = "rccl"
            return

    def _block(self, number: int) -> None:
        """A line that starts a new test's header: close the table, start a new context."""
        self._close()
        if self._ctx.used:
            self._ctx = _Context()
        if self._ctx.start_line is None:
            self._ctx.start_line = number

    def _info(self, h: str) -> None:
        ctx = self._ctx
        if "RCCL" in h:
            ctx.backend = "rccl"
        elif "NCCL version" in h and ctx.backend is None:
            ctx.backend = "nccl"
        if "nranks" in h:
            m = _INIT.search(h)
            if m and len(m.group(2)) < 8:
                ctx.info_nranks.add(int(m.group(2)))
                host = _INFO_HOST.match(h)
                if host is not None:
                    ctx.info_hosts[int(m.group(1))] = host.group(1)

    def _rank(self, number: int, h: str) -> None:
        m = _RANK.match(h)
        if m is None or len(m.group(1)) > 7:
            return
        if self._table is not None or self._ctx.used:
            self._block(number)
        ctx = self._ctx
        if ctx.start_line is None:
            ctx.start_line = number
        rank = int(m.group(1))
        if rank in ctx.rank_hosts:
            ctx.rank_repeats = True
        ctx.rank_hosts[rank] = m.group(2)
        model = m.group(3).strip()
        if model.endswith("..."):
            ctx.rank_truncated = True
            model = model[:-3].strip()
        if model:
            ctx.rank_models.append(model)

    def _table_header(self, number: int, h: str) -> None:
        layout = _header(h.split())
        if layout is None:
            self.unread.append((number, h))
            return
        previous = self._table
        if previous is not None and not previous.groups and not previous.unreadable:
            self._table = None  # a repeated header (several processes printing): keep one
        else:
            self._close()
        self.headers_seen += 1
        lead, halves, min_tokens = layout
        legacy_ms = "bytes" in h.split()[0].lower()
        self._ctx.used = True
        self._table = _Table(
            header_line=number,
            lead=lead,
            halves=halves,
            min_tokens=min_tokens,
            time_scale=1e3 if legacy_ms else 1.0,
            context=self._ctx,
        )

    # -- rows ----------------------------------------------------------------------------

    def _row(self, table: _Table, number: int, s: str) -> None:
        tokens = s.split()
        head = tokens[0]
        if not head.lstrip("-").isdigit():
            return  # noise that starts with a digit (a host name, a log line)
        if len(tokens) < table.min_tokens:
            table.unreadable.append((number, s))
            return
        size = to_int(head)
        if size is None:
            table.bad_values.append((number, s))
            return
        lead = table.lead
        count: int | None = None
        if "count" in lead:
            count = to_int(tokens[lead["count"]])
            if count is None:
                table.unreadable.append((number, s))
                return
        dtype = tokens[lead["type"]] if "type" in lead else ""
        redop = tokens[lead["redop"]] if "redop" in lead else ""
        root = tokens[lead["root"]] if "root" in lead else ""
        table.last_line = number
        if size == 0:
            table.zero_size.append(number)
            return
        key = (dtype, redop, root)
        group = table.groups.get(key)
        if group is None:
            group = _Group(
                dtype=canonical_dtype(dtype) if dtype else None,
                redop=redop.lower() if redop else None,
                root=root or None,
            )
            table.groups[key] = group
        kept = False
        for index, half in enumerate(table.halves):
            t = to_float(tokens[half.time])
            bb = to_float(tokens[half.busbw]) if half.busbw is not None else None
            ab = to_float(tokens[half.algbw]) if half.algbw is not None else None
            wrong: int | None = None
            if half.wrong is not None and half.wrong_is_count:
                w = to_float(tokens[half.wrong])
                if w is not None and math.isfinite(w) and w >= 0 and w == int(w):
                    wrong = int(w)
                    if wrong > 0:
                        table.wrong_lines.append(number)
            time_us = math.nan if t is None else t * table.time_scale
            if not (0.0 < time_us <= MAX_TIME_US and size <= MAX_SIZE_BYTES):
                if not table.bad_values or table.bad_values[-1][0] != number:
                    table.bad_values.append((number, s))
                continue
            algbw = size / time_us / 1e3  # bytes/us -> GB/s (GB = 1e9 bytes)
            if algbw == math.inf:
                if not table.bad_values or table.bad_values[-1][0] != number:
                    table.bad_values.append((number, s))
                continue
            kept = True
            group.rows.append(
                (
                    size,
                    count,
                    time_us,
                    algbw,
                    math.nan if bb is None else bb,
                    math.nan if ab is None else ab,
                    index == 1,
                    wrong,
                )
            )
        if not kept:
            return
        group.last_line = number
        if count and group.dtype in DTYPE_BYTES:
            elems = count * DTYPE_BYTES[group.dtype]
            group.ratios.add(size // elems if size % elems == 0 else -1)
        if size in group.sizes:
            group.duplicates.append(number)
        else:
            group.sizes[size] = number

    # -- closing a table -----------------------------------------------------------------

    def _close(self) -> None:
        table = self._table
        if table is None:
            return
        self._table = None
        self._last = table
        runs = _finish(table, self.warnings)
        self.runs.extend(runs)
        if not runs:
            self.unread.extend(sorted(table.unreadable + table.bad_values))


def _rank_facts(ctx: _Context, notes: list[str]) -> tuple[int | None, list[str]]:
    """Ranks and hosts as the rank lines (or NCCL INFO init lines) state them."""
    if ctx.rank_hosts:
        if ctx.rank_truncated:
            notes.append(
                "the '# Using devices' rank list is truncated ('...'): rank count and hosts "
                "not read; give ranks= and nodes="
            )
            return None, []
        indices = sorted(ctx.rank_hosts)
        ranks = len(indices)
        if ctx.rank_repeats:
            notes.append(
                "rank lines repeat the same rank numbers: nccl-tests may have been built "
                "without MPI, so each process ran alone"
            )
        if indices[-1] + 1 != ranks:
            notes.append(
                f"rank lines list {ranks} ranks but the highest is rank {indices[-1]}: some "
                "rank lines are missing; ranks and nodes are read from the lines present"
            )
        return ranks, list(dict.fromkeys(ctx.rank_hosts[i] for i in indices))
    if len(ctx.info_nranks) == 1:
        ranks = next(iter(ctx.info_nranks))
        hosts: list[str] = []
        if len(ctx.info_hosts) == ranks:
            hosts = list(dict.fromkeys(ctx.info_hosts[i] for i in sorted(ctx.info_hosts)))
        notes.append(f"rank count {ranks} read from the NCCL INFO 'Init COMPLETE' lines")
        return ranks, hosts
    return None, []


def _infer_collective(group: _Group, ranks: int | None) -> Collective | None:
    """The collective from the columns alone, only where nccl-tests' printing is unambiguous.

    nccl-tests prints count·sizeof(type) == size for all_reduce, broadcast, reduce and
    sendrecv, and size == ranks·count·sizeof(type) for all_gather, reduce_scatter, alltoall;
    the redop column is ``none`` for collectives without a reduction, root is -1 for
    collectives without a root. Only all_reduce, reduce_scatter, reduce and broadcast can be
    told apart this way.
    """
    if group.redop is None:
        return None
    rooted = group.root is not None and group.root != "-1"
    ratios = group.ratios
    single = next(iter(ratios)) if len(ratios) == 1 else None
    if group.redop != "none":
        if rooted:
            return Collective.REDUCE if single == 1 else None
        if single == 1:
            ratio_over_one = any(
                algbw > 0.5 and pb / pa > 1.05
                for _, _, _, algbw, pb, pa, _, _ in group.rows
                if pa > 0 and math.isfinite(pb)
            )
            if (ranks is not None and ranks > 1) or ratio_over_one:
                return Collective.ALL_REDUCE
            return None
        if single is not None and single > 1:
            return Collective.REDUCE_SCATTER
        return None
    if rooted and single == 1 and group.root is not None:
        return Collective.BROADCAST
    return None


def _finish(table: _Table, global_warnings: list[str]) -> list[ParsedRun]:
    ctx = table.context
    common: list[str] = []
    ranks, hosts = _rank_facts(ctx, common)
    nodes = len(hosts) if hosts else None
    ranks_per_node: int | None = None
    if ranks is not None and hosts:
        per_host = [list(ctx.rank_hosts.values()).count(h) for h in hosts] if ctx.rank_hosts else []
        if per_host and len(set(per_host)) == 1:
            ranks_per_node = per_host[0]
        elif not per_host and ranks % len(hosts) == 0:
            ranks_per_node = ranks // len(hosts)
        elif per_host:
            common.append(f"ranks are spread unevenly over hosts ({per_host})")
    models = list(dict.fromkeys(ctx.rank_models))
    gpu_model = models[0] if len(models) == 1 else (" / ".join(models) if models else None)
    if len(models) > 1:
        common.append(f"rank lines name several GPU models: {', '.join(models)}")
    backend = ctx.backend
    if backend is None and models:
        backend = "rccl" if any("AMD" in m or "Instinct" in m for m in models) else "nccl"
    backend = backend or "nccl"

    named: Collective | None = None
    source_test: str | None = None
    for name in (ctx.test_name, ctx.mentioned):
        if name:
            named = _collective_from_name(name)
            source_test = name
            if named is None:
                common.append(f"test {name!r} is not a collective commest models")
            break
    if table.concluded and source_test and table.concluded != source_test:
        common.append(
            f"the table is concluded as {table.concluded!r} but started as {source_test!r}"
        )
    elif table.concluded and source_test is None:
        source_test = table.concluded
        named = _collective_from_name(table.concluded)

    if table.unreadable:
        common.append(
            f"dropped {len(table.unreadable)} row(s) that could not be read (truncated or "
            f"garbled: {line_list(n for n, _ in table.unreadable)})"
        )
    if table.zero_size:
        common.append(
            f"dropped {len(table.zero_size)} row(s) of size 0 ({line_list(table.zero_size)})"
        )
    if table.bad_values:
        common.append(
            "dropped values with a time that is not a positive finite number (up to 1e15 us) "
            f"or an implausible size ({line_list(n for n, _ in table.bad_values)})"
        )
    if table.wrong_lines:
        common.append(f"#wrong > 0 (data corruption reported) on {line_list(table.wrong_lines)}")
    if table.oob_failed:
        common.append("nccl-tests reported 'Out of bounds values ... FAILED'")
    if not table.trailer:
        last = max((s for g in table.groups.values() for s in g.sizes), default=None)
        expected = f" of maxBytes {ctx.max_bytes}" if ctx.max_bytes else ""
        common.append(
            f"the table at line {table.header_line} has no '# Avg bus bandwidth' trailer: the "
            f"run may have stopped early (last complete size {last}{expected})"
        )
    if table.time_scale != 1.0:
        common.append("times read in milliseconds (legacy output) and converted to us")

    runs: list[ParsedRun] = []
    first_line = ctx.start_line if ctx.start_line is not None else table.header_line
    for group in table.groups.values():
        notes = list(common)
        if not group.rows:
            continue
        collective = named
        if collective is None and source_test is None:
            collective = _infer_collective(group, ranks)
            if collective is not None:
                notes.append(
                    f"collective {collective.value} inferred from the columns (count, type, "
                    "redop, root); the text does not name the test"
                )
        if group.duplicates:
            notes.append(f"sizes repeat within the table ({line_list(group.duplicates)})")
        points = _bus_bandwidths(group, collective, ranks, notes)
        runs.append(
            ParsedRun(
                collective=collective.value if collective is not None else None,
                tool="nccl-tests",
                backend=backend,
                ranks=ranks,
                nodes=nodes,
                ranks_per_node=ranks_per_node,
                gpu_model=gpu_model,
                dtype=group.dtype,
                redop=group.redop if group.redop not in (None, "none") else None,
                tool_version=ctx.version,
                points=points,
                avg_busbw_gbps=table.avg_busbw if len(table.groups) == 1 else None,
                hosts=list(hosts),
                warnings=notes,
                source_test=source_test,
                first_line=first_line,
                last_line=max(group.last_line, table.last_line),
            )
        )
    if not runs:
        global_warnings.append(
            f"the table at line {table.header_line} holds no readable rows; skipped"
        )
    return runs


def _bus_bandwidths(
    group: _Group, collective: Collective | None, ranks: int | None, notes: list[str]
) -> list[ParsedPoint]:
    """busbw = algbw × factor when it can be computed and agrees with the printed figures."""
    factor: float | None = None
    if collective is not None and ranks is not None:
        factor = float(bus_factor(collective, ranks))
        checked = disagree = 0
        for row in group.rows:
            printed = row[4]
            if printed >= 1.0:  # False for NaN
                checked += 1
                if abs(row[3] * factor - printed) > _BUSBW_RTOL * printed + _BUSBW_ATOL:
                    disagree += 1
        if checked and disagree * 2 > checked:
            notes.append(
                f"printed busbw disagrees with algbw × bus factor of {collective.value} over "
                f"{ranks} ranks on {disagree} of {checked} rows: the rank count may be wrong; "
                "printed busbw kept"
            )
            factor = None
    points = []
    for size, count, time_us, algbw, printed, _, in_place, wrong in group.rows:
        if factor is not None:
            busbw = algbw * factor
        else:
            busbw = printed if printed >= 0.0 and printed != math.inf else math.nan
        points.append(ParsedPoint(size, count, time_us, algbw, busbw, in_place, wrong))
    return points
