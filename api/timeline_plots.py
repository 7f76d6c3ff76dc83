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

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from estimator.timeline import EVENT_KINDS, Timeline

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
_LANE_HEIGHT = 0.8


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
    """The timeline as a Gantt chart of the stages' lanes."""
    p = tl.pipeline_stages
    width_in = 12.0
    fig = Figure(figsize=(width_in, 1.6 + 0.45 * p), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    boxes: dict[str, list[list[tuple[float, float]]]] = {k: [] for k in EVENT_KINDS}
    labels: list[tuple[float, float, float, str]] = []  # x0, x1, y, text
    gap_marks: dict[int, float] = {}
    end_ms = 0.0
    for e in tl.events:
        shift = tl.elided_s if e.after_gap else 0.0
        x0 = (e.start_s - shift) * 1e3
        x1 = (e.end_s - shift) * 1e3
        y0 = p - 1 - e.stage - _LANE_HEIGHT / 2
        y1 = y0 + _LANE_HEIGHT
        boxes[e.kind].append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
        end_ms = max(end_ms, x1)
        if e.after_gap and (e.stage not in gap_marks or x0 < gap_marks[e.stage]):
            gap_marks[e.stage] = x0
        if e.kind in ("forward", "backward") and e.microbatch is not None:
            labels.append((x0, x1, p - 1 - e.stage, str(e.microbatch)))
    for kind in EVENT_KINDS:
        if boxes[kind]:
            ax.add_collection(
                PolyCollection(
                    boxes[kind],
                    facecolors=COLOURS[kind],
                    edgecolors="white" if kind != "idle" else "none",
                    linewidths=0.3,
                )
            )
    span = end_ms if end_ms > 0 else 1.0
    # A label fits when its bar is at least ~9 px wide on the axis (about 10.5 in of 12).
    px_per_ms = width_in * 0.85 * 100 / span
    fitting = [lab for lab in labels if (lab[1] - lab[0]) * px_per_ms >= 9.0]
    if len(fitting) <= MAX_LABELS:
        for x0, x1, y, text in fitting:
            ax.text((x0 + x1) / 2, y, text, ha="center", va="center", fontsize=6, color="white")
    for stage, x in gap_marks.items():
        y = p - 1 - stage
        ax.plot([x, x], [y - 0.5, y + 0.5], color="black", linestyle="--", linewidth=0.8)
    ax.set_xlim(0.0, span * 1.01)
    ax.set_ylim(-0.6, p - 0.4)
    ax.set_yticks(list(range(p)))
    ax.set_yticklabels([f"stage {p - 1 - i}" for i in range(p)], fontsize=7)
    ax.set_xlabel(
        "time (ms)"
        + (
            f"; dashed: {tl.elided_microbatches} micro-batches ({tl.elided_s * 1e3:.4g} ms) "
            "elided, later events drawn that much earlier"
            if tl.truncated
            else ""
        )
    )
    ax.set_title(title, fontsize=10)
    used = [k for k in EVENT_KINDS if boxes[k]]
    ax.legend(
        handles=[Patch(facecolor=COLOURS[k], edgecolor="grey", label=k) for k in used],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.3 / max(p, 1)),
        ncol=len(used),
        fontsize=7,
        frameon=False,
    )
    fig.tight_layout()
    return _render(fig, fmt)
