"""Timelines: every pipeline stage's schedule of one iteration, as JSON or a picture."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from api.durations import duration_text
from api.scenario import Answer, prepare, scenario_figures
from api.schemas import TimelineEventOut, TimelineRequest, TimelineResponse, finite_answer
from api.snapshots import Profiles
from estimator import estimate
from estimator.errors import ValidationError
from estimator.timeline import Timeline, timeline


@dataclass(frozen=True, slots=True)
class TimelineAnswer:
    """A timeline with the cluster notes and bandwidth warnings of its estimate."""

    timeline: Timeline
    assumptions: list[str]
    warnings: list[str]
    title: str
    figures: dict[str, float]  # the cluster figures the times scale with (for a 422)


def create_timeline(*, request: TimelineRequest, profiles: Profiles) -> TimelineAnswer:
    """The request's timeline (domain errors for a layout beyond the schedule's caps)."""
    prepared = prepare(request=request, profiles=profiles)
    sc = prepared.scenario
    tl = timeline(sc, shown=request.max_microbatches_shown)
    result = estimate(sc)
    answer = Answer(result, prepared.cluster)
    warnings = list(answer.warnings)
    warnings += [w for w in tl.warnings if w not in warnings]
    lay = sc.layout
    title = (
        f"{tl.schedule}: p={lay.pipeline} t={lay.tensor} d={lay.data}"
        + (f" v={lay.virtual_stages}" if lay.virtual_stages > 1 else "")
        + f", m={tl.microbatches}, iteration {duration_text(tl.iteration_time_s)}, "
        f"bubble {tl.bubble_ratio:.1%} ({sc.fidelity.value} fidelity)"
    )
    figs = scenario_figures(sc)
    if not all(math.isfinite(x) for x in (tl.iteration_time_s, tl.makespan_s, tl.period_s)):
        raise ValidationError(
            ", ".join(figs),
            figs,
            f"gives a non-finite iteration time ({tl.iteration_time_s}), which no timeline can "
            "carry: the figures are outside the range commest computes with",
        )
    return TimelineAnswer(tl, [*prepared.cluster.notes, *tl.assumptions], warnings, title, figs)


def timeline_response(*, answer: TimelineAnswer) -> TimelineResponse:
    """The JSON form (``format: json``)."""
    tl = answer.timeline
    events: list[TimelineEventOut] = [
        {
            "stage": e.stage,
            "kind": e.kind,
            "microbatch": e.microbatch,
            "chunk": e.chunk,
            "start_s": e.start_s,
            "end_s": e.end_s,
            "after_gap": e.after_gap,
        }
        for e in tl.events
    ]
    with finite_answer(answer.figures):
        return TimelineResponse(
            schedule=tl.schedule,
            pipeline_stages=tl.pipeline_stages,
            microbatches=tl.microbatches,
            virtual_stages=tl.virtual_stages,
            iteration_time_s=tl.iteration_time_s,
            makespan_s=tl.makespan_s,
            engine_pipeline_s=tl.engine_pipeline_s,
            period_s=tl.period_s,
            bubble_s=tl.bubble_s,
            bubble_ratio=tl.bubble_ratio,
            truncated=tl.truncated,
            elided_microbatches=tl.elided_microbatches,
            elided_s=tl.elided_s,
            events=events,
            assumptions=answer.assumptions,
            warnings=answer.warnings,
        )


def timeline_picture(*, answer: TimelineAnswer, fmt: Literal["png", "svg"]) -> bytes:
    """The picture (matplotlib loaded here, only to draw)."""
    from api import timeline_plots

    return timeline_plots.timeline_picture(answer.timeline, title=answer.title, fmt=fmt)
