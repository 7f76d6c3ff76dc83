"""PNG pictures of traffic matrices and bandwidth curves (matplotlib, Agg backend, no pyplot).

Figures are built with the object API (``Figure`` + ``FigureCanvasAgg``), so nothing touches
matplotlib's global state and requests can draw concurrently.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from api.schemas import CurveOut
from estimator.bandwidth import FloatArray

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png(fig: Any) -> bytes:
    canvas = FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    canvas.print_png(buffer)  # type: ignore[no-untyped-call]
    return buffer.getvalue()


#: Longer names of the kinds of traffic, for panel titles.
KIND_NAMES: dict[str, str] = {
    "tp": "tp (tensor parallel)",
    "cp": "cp (context parallel)",
    "pp": "pp (pipeline sends)",
    "dp": "dp (data parallel)",
    "embedding_sync": "embedding sync",
    "expert": "expert (all-to-all)",
}


@dataclass(frozen=True, slots=True)
class HeatmapPanel:
    """One kind of traffic, binned: ``cells[i, j]`` sums the block of endpoints
    [i·block, (i+1)·block) × [j·block, (j+1)·block), in the picture's unit."""

    kind: str
    cells: FloatArray
    total: float


def _amount(value: float) -> str:
    """A readable figure: thousands separated from 100 up, three significant digits below."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _boundary_step(size: int, node: int, max_lines: int = 16) -> int:
    """Endpoints between two drawn node boundaries: a node, or a power-of-two run of nodes
    so that at most ``max_lines`` lines are drawn."""
    step = node
    while size / step > max_lines:
        step *= 2
    return step


def _edges(size: int, node: int) -> list[int]:
    """Endpoint ids where a node boundary line is drawn."""
    step = _boundary_step(size, node)
    return list(range(step, size, step))


def _boundary_lines(ax: Any, edges: Sequence[int]) -> None:
    """Thin grey lines across the panel at ``edges``: what ``axhline``/``axvline`` per edge
    draw (same transforms, width, colour, caps), as two collections rather than two Line2D
    an edge, which the layout and the draw would walk one by one."""
    style: dict[str, Any] = {
        "colors": "0.6",
        "linewidths": 0.4,
        "alpha": 0.7,
        "capstyle": "projecting",
    }
    rows = [((0.0, e), (1.0, e)) for e in edges]
    cols = [((e, 0.0), (e, 1.0)) for e in edges]
    for segments, transform in (
        (rows, ax.get_yaxis_transform(which="grid")),
        (cols, ax.get_xaxis_transform(which="grid")),
    ):
        ax.add_collection(LineCollection(segments, transform=transform, **style), autolim=False)


def traffic_heatmap(
    panels: Sequence[HeatmapPanel],
    *,
    size: int,
    block: int,
    level: str,
    gpus_per_node: int,
    unit: str,
    title: str,
) -> bytes:
    """Heatmaps of traffic from row (sender) to column (receiver), one panel per kind, on
    one shared log colour scale in ``unit`` (docs/design.md §5.2).

    Axes are in endpoint ids whatever the binning; at GPU level thin lines mark node
    boundaries (every node, or every 2^k nodes when nodes are many).
    """
    count = max(1, len(panels))
    ncols = 1 if count == 1 else 2 if count <= 4 else 3
    nrows = -(-count // ncols)
    width = max(6.5, 3.7 * ncols + 1.3)
    fig = Figure(figsize=(width, 3.5 * nrows + 1.1), dpi=100, layout="constrained")
    positive = [float(p.cells[p.cells > 0].min()) for p in panels if np.any(p.cells > 0)]
    norm: LogNorm | None = None
    if positive:
        low = min(positive)
        high = max(float(p.cells.max()) for p in panels)
        norm = LogNorm(vmin=low, vmax=high if high > low else low * 10.0)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="white")
    noun = "GPU" if level == "gpu" else "node"
    extent_end = -(-size // block) * block
    image = None
    axes = []
    for index in range(count):
        ax = fig.add_subplot(nrows, ncols, index + 1)
        axes.append(ax)
        if not panels:
            ax.text(0.5, 0.5, "no traffic in this view", ha="center", va="center")
            ax.set_axis_off()
            continue
        panel = panels[index]
        image = ax.imshow(
            np.ma.masked_less_equal(panel.cells, 0.0),
            cmap=cmap,
            norm=norm,
            interpolation="nearest",
            extent=(0, extent_end, extent_end, 0),
        )
        ax.set_xlim(0, size)
        ax.set_ylim(size, 0)
        name = KIND_NAMES.get(panel.kind, panel.kind)
        ax.set_title(f"{name}: {_amount(panel.total)} {unit} total", fontsize=9)
        if size <= 16:
            ticks = np.arange(size)
            ax.set_xticks(ticks + 0.5, [str(t) for t in ticks])
            ax.set_yticks(ticks + 0.5, [str(t) for t in ticks])
            ax.tick_params(labelsize=6, length=0)
        else:
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(MaxNLocator(nbins=6, integer=True, steps=[1, 2, 4, 8, 10]))
            ax.tick_params(labelsize=7)
        if level == "gpu" and size > gpus_per_node:
            _boundary_lines(ax, _edges(size, gpus_per_node))
        if index % ncols == 0:
            ax.set_ylabel(f"source {noun}", fontsize=8)
        if index >= count - ncols:
            ax.set_xlabel(f"destination {noun}", fontsize=8)
    notes = []
    if block > 1:
        notes.append(f"each cell sums {block}×{block} {noun}s")
    if level == "gpu" and size > gpus_per_node:
        step = _boundary_step(size, gpus_per_node)
        nodes_per_line = step // gpus_per_node
        lines = "node boundaries" if nodes_per_line == 1 else f"every {nodes_per_line} nodes"
        notes.append(f"grey lines: {lines} ({gpus_per_node} GPUs per node)")
    notes.append("blank: none")
    fig.suptitle(title + "\n" + "; ".join(notes), fontsize=9)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.9)
        bar.set_label(f"{unit} (log scale)")
    return _png(fig)


#: Series drawn per panel of a curves picture, and points drawn per series, at most.
MAX_SERIES = 10
MAX_POINTS = 64


def _thinned(sizes: Sequence[int], values: Sequence[float]) -> tuple[FloatArray, FloatArray]:
    """At most MAX_POINTS points of a curve, evenly spread, the first and last kept."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if x.size > MAX_POINTS:
        keep = np.unique(np.linspace(0, x.size - 1, MAX_POINTS).round().astype(np.int64))
        x, y = x[keep], y[keep]
    return x, y


def _series_label(curve: CurveOut) -> str:
    run = f" #{curve.run_id}" if curve.run_id is not None else ""
    nodes = f"{curve.nodes} node{'s' if curve.nodes != 1 else ''}"
    return f"{curve.ranks} ranks / {nodes} {curve.backend}{run}"


def _size_label(size: float) -> str:
    """1 KiB, 64 MiB, ...: a byte count in binary units (plain text, no mathtext)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:g} {unit}"
        size /= 1024
    return f"{size:g} TiB"


def _size_ticks(ax: Any, low: float, high: float) -> None:
    """Ticks at powers of 2 spaced to give at most 8 labels, in binary units."""
    first, last = int(np.floor(np.log2(low))), int(np.ceil(np.log2(high)))
    step = 1
    while (last - first) / step > 8:
        step *= 2
    exponents = range(first - first % step, last + 1, step)
    ticks = [2.0**e for e in exponents]
    ax.set_xticks(ticks, [_size_label(t) for t in ticks])
    ax.set_xticks([], minor=True)


def _nearest(family: Sequence[CurveOut], curve: CurveOut) -> CurveOut | None:
    """The family curve of the same collective whose node count is nearest (log scale)."""
    same = [f for f in family if f.op == curve.op]
    if not same:
        return None
    return min(same, key=lambda f: (abs(np.log2(f.nodes / curve.nodes)), f.ranks))


def bandwidth_curves(
    curves: Sequence[CurveOut],
    *,
    title: str,
    omitted: dict[str, int] | None = None,
    family: Sequence[CurveOut] = (),
    family_name: str | None = None,
) -> bytes:
    """busbw against message size, one panel per collective (log-scaled size axis).

    At most MAX_SERIES series per panel (the rest said as "+N more") and MAX_POINTS points
    per series, so the picture costs the same whatever the profile holds. ``family``: the
    nominal curves of the profile's GPU family, drawn dashed in the colour of the measured
    series whose node count they match best (docs/design.md §5.2).
    """
    omitted = dict(omitted or {})
    ops = sorted({c.op for c in curves} | set(omitted))
    count = max(1, len(ops))
    ncols = 1 if count == 1 else 2
    nrows = -(-count // ncols)
    fig = Figure(figsize=(6.4 * ncols, 4.2 * nrows + 0.5), dpi=100, layout="constrained")
    fig.suptitle(title, fontsize=10)
    palette = matplotlib.colormaps["tab10"]
    if not ops:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no curves", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return _png(fig)
    for index, op in enumerate(ops):
        ax = fig.add_subplot(nrows, ncols, index + 1)
        series = sorted(
            (c for c in curves if c.op == op),
            key=lambda c: (c.nominal, c.nodes, c.ranks, c.run_id or 0),
        )
        more = omitted.get(op, 0) + max(0, len(series) - MAX_SERIES)
        series = series[:MAX_SERIES]
        overlaid: set[tuple[int, int]] = set()
        for number, curve in enumerate(series):
            colour = palette(number % 10)
            x, y = _thinned(curve.sizes_bytes, curve.busbw_gbps)
            dashed = curve.nominal
            ax.plot(
                x,
                y,
                color=colour,
                linestyle="--" if dashed else "-",
                marker=None if dashed or x.size > 24 else ".",
                markersize=3,
                linewidth=1.2,
                label=_series_label(curve)
                + (" (nominal)" if dashed and curve.backend != "nominal" else ""),
            )
            match = None if dashed else _nearest(family, curve)
            if match is not None and (match.ranks, match.nodes) not in overlaid:
                overlaid.add((match.ranks, match.nodes))
                fx, fy = _thinned(match.sizes_bytes, match.busbw_gbps)
                ax.plot(fx, fy, color=colour, linestyle="--", linewidth=1.0, alpha=0.8)
        handles, labels = ax.get_legend_handles_labels()
        if overlaid and family_name:
            handles.append(Line2D([], [], color="0.3", linestyle="--", linewidth=1.0))
            labels.append(f"dashed: {family_name} nominal, nearest node count")
        if more:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(f"+{more} more runs not drawn (format=json lists them all)")
        ax.legend(handles, labels, fontsize=7, loc="upper left", frameon=True, framealpha=0.85)
        ax.set_xscale("log", base=2)
        low, high = ax.get_xlim()
        _size_ticks(ax, max(low, 1.0), max(high, 2.0))
        ax.set_xlim(low, high)
        ax.set_title(op, fontsize=10)
        ax.set_xlabel("message size (nccl-tests convention)", fontsize=8)
        ax.set_ylabel("bus bandwidth (GB/s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
    return _png(fig)
