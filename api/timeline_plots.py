"""Pictures of an iteration timeline (PNG or SVG; matplotlib object API, Agg backend).

One lane per pipeline stage (stage 0 on top), one colour per kind of event with a legend,
micro-batch numbers on the compute bars where they fit, the time axis in ms. Events after the
elided micro-batches are drawn ``elided_s`` earlier, behind a dashed mark on each lane.
Imported only to draw (matplotlib is not loaded by the JSON path or the CLI's start-up).
"""

from __future__ import annotations

import io
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.collections import PolyCollection
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

from api.durations import duration_text
from estimator.bandwidth import FloatArray
from estimator.timeline import EVENT_KINDS, Event, Timeline

COLOURS: dict[str, str] = {
    "forward": "#4c72b0",
    "backward": "#55a868",
    "recompute": "#8172b2",
    "tp_comm": "#dd8452",
    "pp_comm": "#c44e52",
    "dp_comm": "#937860",
    "optimizer": "#8c8c8c",
    "idle": "#f0f0f0",
}
MAX_LABELS = 400  # micro-batch numbers drawn at most (text is the slow part of a picture)
RASTER_ABOVE = 3000  # busy events drawn as rectangles at most; more are painted as an image
_LANE_HEIGHT = 0.8
_WIDTH_IN = 12.0


def _render(fig: Any, fmt: Literal["png", "svg"]) -> bytes:
    buffer = io.BytesIO()
    if fmt == "svg":
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "commest"}):
            # no date in the metadata: the same timeline gives the same bytes
            FigureCanvasSVG(fig).print_svg(buffer, metadata={"Date": None})  # type: ignore[no-untyped-call]
    else:
        FigureCanvasAgg(fig).print_png(buffer)  # type: ignore[no-untyped-call]
    return buffer.getvalue()


def timeline_picture(tl: Timeline, *, title: str, fmt: Literal["png", "svg"]) -> bytes:
    """The timeline as a Gantt chart of the stages' lanes.

    Up to ``RASTER_ABOVE`` busy events are drawn as rectangles; denser timelines (most events
    narrower than a pixel) are painted into an image one pixel column at a time, which keeps
    the largest allowed timeline under a second.
    """
    p = tl.pipeline_stages
    fig = Figure(figsize=(_WIDTH_IN, 1.6 + 0.45 * p), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    busy = [e for e in tl.events if e.kind != "idle"]
    end_ms = max((e.end_s - (tl.elided_s if e.after_gap else 0.0)) * 1e3 for e in tl.events)
    span = end_ms if end_ms > 0 else 1.0
    px_per_ms = _WIDTH_IN * 0.85 * 100 / span
    used = set()
    gap_marks: dict[int, float] = {}
    labels: list[tuple[float, float, str]] = []  # x centre, y, text
    xs = np.empty((len(busy), 2))
    for i, e in enumerate(busy):
        shift = tl.elided_s if e.after_gap else 0.0
        x0, x1 = (e.start_s - shift) * 1e3, (e.end_s - shift) * 1e3
        xs[i] = x0, x1
        used.add(e.kind)
        if e.after_gap and (e.stage not in gap_marks or x0 < gap_marks[e.stage]):
            gap_marks[e.stage] = x0
        if (
            e.microbatch is not None
            and e.kind in ("forward", "backward")
            and (x1 - x0) * px_per_ms >= 9.0
        ):
            labels.append(((x0 + x1) / 2, p - 1 - e.stage, str(e.microbatch)))
    if len(busy) > RASTER_ABOVE:
        _paint(ax, busy, xs, p, span)
    else:
        _rectangles(ax, busy, xs, p)
    if len(labels) <= MAX_LABELS:
        for x, y, text in labels:
            ax.text(x, y, text, ha="center", va="center", fontsize=6, color="white")
    for stage, x in gap_marks.items():
        y = p - 1 - stage
        ax.plot([x, x], [y - 0.5, y + 0.5], color="black", linestyle="--", linewidth=0.8)
    ax.set_xlim(0.0, span * 1.01)
    ax.set_ylim(-0.6, p - 0.4)
    # lane names as plain text: 32 tick objects would cost more than the rest of the picture
    ax.set_yticks([])
    names = blended_transform_factory(ax.transAxes, ax.transData)
    for stage in range(p):
        ax.text(
            -0.005,
            p - 1 - stage,
            f"stage {stage}",
            transform=names,
            ha="right",
            va="center",
            fontsize=7,
        )
    ax.set_xlabel(
        "time (ms)"
        + (
            f"; dashed: {tl.elided_microbatches} micro-batches ({duration_text(tl.elided_s)}) "
            "elided, later events drawn that much earlier"
            if tl.truncated
            else ""
        )
    )
    ax.set_title(title, fontsize=10)
    shown = [k for k in EVENT_KINDS if k in used or k == "idle"]
    ax.legend(
        handles=[Patch(facecolor=COLOURS[k], edgecolor="grey", label=k) for k in shown],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.55 / (0.45 * p + 0.1)),
        ncol=len(shown),
        fontsize=7,
        frameon=False,
    )
    # fixed margins (tight_layout would draw the figure once more): inches for the title,
    # the axis label and the legend
    height = 1.6 + 0.45 * p
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.45 / height, bottom=1.05 / height)
    return _render(fig, fmt)


def _rectangles(ax: Any, busy: list[Event], xs: FloatArray, p: int) -> None:
    """One rectangle per event over an idle-coloured band per lane."""
    half = _LANE_HEIGHT / 2
    for stage in range(p):
        ax.axhspan(p - 1 - stage - half, p - 1 - stage + half, color=COLOURS["idle"], linewidth=0)
    for kind in EVENT_KINDS:
        index = [i for i, e in enumerate(busy) if e.kind == kind]
        if not index:
            continue
        x = xs[index]
        y = np.array([p - 1 - busy[i].stage for i in index], dtype=float)
        verts = np.empty((len(index), 4, 2))
        verts[:, 0, 0] = verts[:, 3, 0] = x[:, 0]
        verts[:, 1, 0] = verts[:, 2, 0] = x[:, 1]
        verts[:, 0, 1] = verts[:, 1, 1] = y - half
        verts[:, 2, 1] = verts[:, 3, 1] = y + half
        ax.add_collection(
            PolyCollection(
                list(verts), facecolors=COLOURS[kind], edgecolors="white", linewidths=0.3
            )
        )


def _paint(ax: Any, busy: list[Event], xs: FloatArray, p: int, span: float) -> None:
    """Every event painted into a pixel image of the lanes (at least one column each)."""
    width = int(_WIDTH_IN * 100)
    code = {kind: i for i, kind in enumerate(EVENT_KINDS)}
    idle, blank = code["idle"], len(EVENT_KINDS)
    lanes = np.full((p, width), idle, dtype=np.int8)
    cols = np.clip((xs / span * width).astype(np.int64), 0, width - 1)
    for (a, b), e in zip(cols.tolist(), busy, strict=True):
        lanes[e.stage, a : max(b, a + 1)] = code[e.kind]
    rows = 10  # a lane is 8 rows of colour between 2 blank ones (_LANE_HEIGHT)
    image = np.full((p * rows, width), blank, dtype=np.int8)
    for r in range(1, rows - 1):
        image[r::rows] = lanes
    palette = ListedColormap([COLOURS[k] for k in EVENT_KINDS] + ["white"])
    ax.imshow(
        image,
        cmap=palette,
        vmin=0,
        vmax=blank,
        interpolation="nearest",
        aspect="auto",
        extent=(0.0, span, -0.5, p - 0.5),
        origin="upper",
    )
