"""The pictures' drawing shortcuts draw what the plain matplotlib calls they replace draw,
pixel for pixel (api/plots.py)."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from api import plots


def _pixels(fig: Figure) -> np.ndarray:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]
    return np.asarray(canvas.buffer_rgba()).copy()  # type: ignore[no-untyped-call]


def _panel(cells: np.ndarray, size: int) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(3.0, 3.0), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(cells, interpolation="nearest", extent=(0, size, size, 0))
    ax.set_xlim(0, size)
    ax.set_ylim(size, 0)
    return fig, ax


def test_boundary_lines_draw_what_a_line_per_edge_draws() -> None:
    size, node = 4096, 8
    cells = np.random.default_rng(1).random((64, 64))
    edges = plots._edges(size, node)
    assert edges == list(range(256, size, 256))  # 15 lines: every 32 nodes
    one_by_one, ax = _panel(cells, size)
    for edge in edges:
        ax.axhline(edge, color="0.6", linewidth=0.4, alpha=0.7)
        ax.axvline(edge, color="0.6", linewidth=0.4, alpha=0.7)
    collected, ax = _panel(cells, size)
    plots._boundary_lines(ax, edges)
    expected, got = _pixels(one_by_one), _pixels(collected)
    plain, _ = _panel(cells, size)
    assert not np.array_equal(_pixels(plain), expected)  # the lines show
    assert np.array_equal(got, expected)
