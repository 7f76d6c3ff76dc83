"""Tables for people (rich): an estimate's breakdown, ratios, memory and collectives; plans.

Only commands asked for ``--format table`` import this module (rich costs import time).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

PIPE_WIDTH = 132
GB = 1e9


def stdout_console() -> Console:
    """A console on stdout; a file or a pipe gets room for the wide tables."""
    console = Console(soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, PIPE_WIDTH)
    return console


def stderr_console() -> Console:
    """A console on stderr (progress bars)."""
    return Console(stderr=True, soft_wrap=True)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def mapping_table(title: str, values: Mapping[str, Any]) -> Table:
    """A two-column table of a flat mapping."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("name", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in values.items():
        table.add_row(str(key), _fmt(value))
    return table


def rows_table(title: str, rows: Sequence[Mapping[str, Any]]) -> Table:
    """A table of records, one column per key seen (in first-seen order)."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_fmt(row.get(column)) for column in columns))
    return table


def breakdown_table(result: Mapping[str, Any]) -> Table:
    """The iteration time split into its named terms, in seconds and % of the iteration."""
    total = float(result.get("iteration_time_s") or 0.0)
    table = Table(title="Iteration time", title_justify="left")
    table.add_column("term", style="bold")
    table.add_column("seconds", justify="right")
    table.add_column("% of iteration", justify="right")
    for term, seconds in (result.get("breakdown_s") or {}).items():
        value = float(seconds)
        share = f"{100.0 * value / total:.1f}" if total > 0 else "-"
        table.add_row(str(term), f"{value:.4g}", share)
    table.add_section()
    table.add_row("iteration", f"{total:.4g}", "100.0", style="bold")
    band = result.get("iteration_time_range_s")
    if band:
        # the measured time if this estimate erred as the middle 80 % of published runs of its
        # kind of trainer did (``validated``)
        low, high = (float(v) for v in band)
        table.add_row("likely measured", f"{low:.4g} - {high:.4g}", "")
    return table


def flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out


_COLLECTIVE_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("term", "term", str),
    ("kind", "traffic", str),
    ("op", "op", str),
    ("ranks", "ranks", str),
    ("nodes", "nodes", str),
    ("size_bytes", "MB", lambda v: f"{float(v) / 1e6:.4g}"),
    ("calls_per_iteration", "calls", lambda v: f"{float(v):.4g}"),
    ("busbw_gbps", "busbw GB/s", lambda v: f"{float(v):.4g}"),
    ("time_per_call_s", "s/call", lambda v: f"{float(v):.3g}"),
    ("method", "bw from", str),
)


def collectives_table(collectives: Sequence[Mapping[str, Any]]) -> tuple[Table, list[str]]:
    """The collectives with their bandwidth and its provenance (a footnote per source)."""
    present = [c for c in _COLLECTIVE_COLUMNS if any(c[0] in row for row in collectives)]
    table = Table(title="Collectives (bandwidth provenance)", title_justify="left")
    for _, header, _ in present:
        table.add_column(header, overflow="fold")
    table.add_column("src")
    sources: list[str] = []
    for row in collectives:
        cells = []
        for key, _, show in present:
            value = row.get(key)
            cells.append("" if value is None else show(value))
        source = row.get("source")
        if source:
            if source not in sources:
                sources.append(str(source))
            cells.append(f"[{sources.index(source) + 1}]")
        else:
            cells.append("")
        table.add_row(*cells)
    return table, sources


def _memory_rows(memory: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in memory.items():
        if key.endswith("_bytes") and isinstance(value, int | float):
            out[f"{key.removesuffix('_bytes')} (GB)"] = f"{value / GB:.4g}"
        else:
            out[key] = value
    return out


def print_estimate_table(result: Mapping[str, Any], console: Console) -> None:
    """The estimate for people: breakdown, ratios, throughput, memory, collectives."""
    console.print(breakdown_table(result))
    ratios = result.get("ratios")
    if isinstance(ratios, Mapping) and ratios:
        shown = {k: f"{100.0 * float(v):.1f} %" for k, v in ratios.items()}
        console.print(mapping_table("Ratios (of the iteration)", shown))
    throughput = result.get("throughput")
    if isinstance(throughput, Mapping) and throughput:
        console.print(mapping_table("Throughput", flat(throughput)))
    memory = result.get("memory")
    if isinstance(memory, Mapping) and memory:
        console.print(mapping_table("Memory per GPU", _memory_rows(memory)))
    collectives = result.get("collectives")
    if isinstance(collectives, list) and collectives:
        table, sources = collectives_table([c for c in collectives if isinstance(c, Mapping)])
        console.print(table)
        for number, source in enumerate(sources, start=1):
            console.print(f"  [{number}] {source}", markup=False, highlight=False)
    for key, title in (("assumptions", "Assumptions"), ("warnings", "Warnings")):
        items = result.get(key)
        if isinstance(items, list) and items:
            console.print(f"[bold]{title}[/bold]")
            for item in items:
                console.print(f"  - {_fmt(item)}", markup=False, highlight=False)


def plan_rows(layouts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One compact row per ranked layout of a plan."""
    rows = []
    for entry in layouts:
        layout = entry.get("layout") or {}
        total = float(entry.get("iteration_time_s") or 0.0)
        breakdown = entry.get("breakdown_s") or {}
        comm = float(entry.get("communication_s") or 0.0)  # the server's sum of its comm terms
        rows.append(
            {
                "rank": entry.get("rank"),
                "group": entry.get("group"),
                "p": layout.get("pipeline"),
                "t": layout.get("tensor"),
                "d": layout.get("data"),
                "cp": layout.get("context_parallel", 1),
                "ep": (
                    f"{layout.get('expert_parallel', 1)} etp1"  # experts folded over TP
                    if layout.get("expert_tensor_parallel") == 1
                    else layout.get("expert_parallel", 1)
                ),
                "v": layout.get("virtual_stages"),
                "sp": layout.get("sequence_parallel"),
                "zero": layout.get("zero_stage"),
                "b": layout.get("micro_batch_size"),
                "recompute": (
                    f"full, {layout['recompute_num_layers']}/chunk"  # block recompute
                    if layout.get("recompute_num_layers") is not None
                    else layout.get("recompute")
                ),
                "iteration s": total,
                "comm %": f"{100.0 * comm / total:.1f}" if total > 0 else "-",
                "bubble %": (
                    f"{100.0 * float(breakdown.get('bubble', 0.0)) / total:.1f}"
                    if total > 0
                    else "-"
                ),
                "memory GB": f"{float(entry.get('memory_bytes') or 0.0) / GB:.4g}",
                "fits": entry.get("fits"),
            }
        )
    return rows
