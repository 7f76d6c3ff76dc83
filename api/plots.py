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
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
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
    one shared log colour scale in ``unit`` (docs/design.md, "Bounded traffic matrices").

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
            step = _boundary_step(size, gpus_per_node)
            for edge in range(step, size, step):
                ax.axhline(edge, color="0.6", linewidth=0.4, alpha=0.7)
                ax.axvline(edge, color="0.6", linewidth=0.4, alpha=0.7)
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


def bandwidth_curves(curves: Sequence[CurveOut], *, title: str) -> bytes:
    """busbw against message size, one line per curve, log-scaled size axis."""
    fig = Figure(figsize=(8.0, 5.0), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for curve in curves:
        label = (
            f"{curve.op} {curve.ranks}r/{curve.nodes}n {curve.backend}"
            + (" (nominal)" if curve.nominal else "")
            + (f" run {curve.run_id}" if curve.run_id is not None else "")
        )
        ax.plot(
            curve.sizes_bytes,
            curve.busbw_gbps,
            marker="." if not curve.nominal else None,
            linestyle="--" if curve.nominal else "-",
            linewidth=1.0,
            label=label,
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if curves:
        ax.legend(fontsize=6, loc="upper left", ncol=1 if len(curves) <= 12 else 2)
    else:
        ax.text(0.5, 0.5, "no curves", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return _png(fig)
