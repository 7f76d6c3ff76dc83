"""The steady-state iteration time of a run: which logged intervals count, and their median.

A logged interval is left out when (first reason wins):

- **warm-up**: it is the first interval logged after the run (re)started, or it ends within
  ``warmup_iterations`` (default 10) iterations of that start. The start is the iteration
  before the first logged interval: first logged iteration − the logging step (the difference
  between the first two logged iterations). A run (re)starts at the top of the log and where
  the iteration numbers go back (a resumed job appending to the same file);
- **batch ramp-up**: its logged global batch size differs from the run's global batch;
- **skipped iterations**: the optimizer skipped steps in it (a loss-scale overflow);
- **NaN**: it holds NaN iterations, or its loss or gradient norm is NaN/inf;
- **checkpoint save** / **evaluation**: one happened during it (between its log line and the
  previous one), so its time is not training alone.

The steady-state time is the median of the remaining intervals' mean iteration times, each
interval counted once (a median, so one slow interval, a hiccup of the file system or the
network, does not move it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from estimator.errors import TrainingLogParseError
from profiles.training_logs._model import DroppedInterval, Interval

DEFAULT_WARMUP_ITERATIONS = 10


@dataclass(frozen=True, slots=True)
class SteadyState:
    """The median over the intervals kept, and the ones left out."""

    iteration_time_s: float
    used: list[Interval]
    dropped: list[DroppedInterval]
    warmup: str


def _segments(intervals: Sequence[Interval]) -> list[list[Interval]]:
    segments: list[list[Interval]] = []
    for interval in intervals:
        if not segments or interval.iteration <= segments[-1][-1].iteration:
            segments.append([])
        segments[-1].append(interval)
    return segments


def _reason(interval: Interval, *, warm: bool, global_batch_size: int | None) -> str | None:
    if warm:
        return "warm-up"
    if not (math.isfinite(interval.iteration_time_s) and interval.iteration_time_s > 0):
        return "no usable time"
    if (
        global_batch_size is not None
        and interval.global_batch_size is not None
        and interval.global_batch_size != global_batch_size
    ):
        return f"batch ramp-up (global batch {interval.global_batch_size})"
    if interval.skipped:
        return "skipped iterations"
    if interval.nan:
        return "NaN"
    if interval.events:
        return interval.events[0]
    return None


def steady_state(
    intervals: Sequence[Interval],
    *,
    global_batch_size: int | None,
    warmup_iterations: int | None = None,
) -> SteadyState:
    """The median iteration time over the steady-state intervals; TrainingLogParseError if
    none is left."""
    window = DEFAULT_WARMUP_ITERATIONS if warmup_iterations is None else warmup_iterations
    used: list[Interval] = []
    dropped: list[DroppedInterval] = []
    segments = _segments(intervals)
    for segment in segments:
        step = segment[1].iteration - segment[0].iteration if len(segment) > 1 else None
        start = segment[0].iteration - step if step is not None else 0
        for index, interval in enumerate(segment):
            warm = window > 0 and (index == 0 or interval.iteration <= start + window)
            reason = _reason(interval, warm=warm, global_batch_size=global_batch_size)
            if reason is None:
                used.append(interval)
            else:
                dropped.append(DroppedInterval(interval.iteration, reason))
    if window > 0:
        warmup = (
            f"left out the first logged interval after each (re)start and every interval "
            f"ending within {window} iterations of it"
        )
    else:
        warmup = "no warm-up left out (warmup_iterations=0)"
    if len(segments) > 1:
        warmup += f"; the log (re)starts {len(segments)} times"
    if not used:
        reasons = sorted({d.reason for d in dropped})
        raise TrainingLogParseError(
            f"none of the {len(dropped)} logged interval(s) is steady-state training "
            f"(left out: {', '.join(reasons)}); log more iterations, or pass "
            "warmup_iterations=0 if the text is already past the warm-up"
        )
    median_s = statistics.median(i.iteration_time_s for i in used)
    return SteadyState(median_s, used, dropped, warmup)
