"""PNG pictures of traffic matrices and bandwidth curves (matplotlib, Agg backend, no pyplot).

Figures are built with the object API (``Figure`` + ``FigureCanvasAgg``), so nothing touches
matplotlib's global state and requests can draw concurrently.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from api.schemas import CurveOut
from estimator.bandwidth import FloatArray

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png(fig: Any) -> bytes:
    canvas = FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    canvas.print_png(buffer)  # type: ignore[no-untyped-call]
    return buffer.getvalue()


def traffic_heatmap(matrix: FloatArray, *, level: str, title: str, block: int = 1) -> bytes:
    """A heatmap of bytes per iteration from row (sender) to column (receiver), log colours.

    ``block`` > 1: each cell sums a block×block square of endpoints (said on the axes).
    """
    size = matrix.shape[0]
    fig = Figure(figsize=(7.5, 6.2), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    positive = matrix[matrix > 0]
    masked = np.ma.masked_less_equal(matrix, 0.0)
    if positive.size:
        low, high = float(positive.min()), float(positive.max())
        norm = LogNorm(vmin=low, vmax=high if high > low else low * 10.0)
        image = ax.imshow(masked, cmap="viridis", norm=norm, interpolation="nearest")
    else:
        image = ax.imshow(masked, cmap="viridis", interpolation="nearest")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("bytes per iteration (log scale; blank = none)")
    unit = "GPU" if level == "gpu" else "node"
    if block > 1:
        unit = f"{unit} block ({block} {unit}s per cell)"
    ax.set_xlabel(f"destination {unit}")
    ax.set_ylabel(f"source {unit}")
    ax.set_title(title, fontsize=10)
    if size <= 32:
        ticks = np.arange(size)
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.tick_params(labelsize=6)
    fig.tight_layout()
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
