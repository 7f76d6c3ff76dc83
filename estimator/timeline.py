"""The schedule of one training iteration, stage by stage (docs/design.md "Pipeline timeline").

Every pipeline stage gets a lane of events (forward, recompute, backward, TP/PP/DP
communication, optimizer step, idle), as in the timeline figure of Li et al., "Understanding
Communication Characteristics of Distributed Training" (APNet 2024). The op order per stage is
Megatron-LM's: 1F1B (PipeDream-Flush, Narayanan et al. SC21 §2.2.1) and, with virtual stages,
interleaved 1F1B (SC21 §2.2.2). Durations are the engine's own per-stage, per-micro-batch times
(``KernelResult.stages``): nothing here prices anything.

Each op is a list-scheduled event: it starts when its stage is free and its input is there
(the previous stage's forward of the same micro-batch and chunk, or the next stage's
backward), and it ends with its PP send. With equal stages the makespan is the engine's
m·T + (p−1)/v·T exactly (SC21 §2.2: bubble fraction (p−1)/(v·m)).

Bounded work: at most ``MAX_SIMULATED_OPS`` chunk-ops are scheduled. For many micro-batches only
a short run of ``shown`` micro-batches is scheduled; its second half is moved by whole periods
to the end of the real iteration (the steady state of 1F1B repeats every T per micro-batch),
and the micro-batches in between are elided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from estimator.engine import assumptions as engine_assumptions
from estimator.engine import run_kernel
from estimator.errors import LimitError, ValidationError
from estimator.kernel import KernelResult
from estimator.specs import Scenario

EventKind = Literal[
    "forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "optimizer", "idle"
]
EVENT_KINDS: tuple[EventKind, ...] = (
    "forward",
    "backward",
    "recompute",
    "tp_comm",
    "pp_comm",
    "dp_comm",
    "optimizer",
    "idle",
)

#: Micro-batches drawn by default; more are elided (first half and last half shown).
DEFAULT_SHOWN = 16
#: The most micro-batches a request may ask to see.
MAX_SHOWN = 64
#: The most chunk-ops (forward or backward of one micro-batch on one chunk of one stage)
#: scheduled for one timeline: 2·p·v·shown. Each makes at most 5 events plus one idle gap.
MAX_SIMULATED_OPS = 8192
#: Makespans of the schedule and the engine agree to this relative tolerance for equal stages
#: (floating-point summation order only).
EXACT_TOLERANCE = 1e-9
#: Events shorter than this fraction of the makespan are not drawn (gaps from rounding).
_MIN_EVENT = 1e-12


class Event(NamedTuple):
    """One block of a stage's lane; ``microbatch``/``chunk`` are None for iteration-level work.
    (A named tuple: a timeline has tens of thousands, and a tuple is the cheapest to make.)"""

    stage: int
    kind: EventKind
    microbatch: int | None
    chunk: int | None
    start_s: float
    end_s: float
    after_gap: bool = False  # after the elided micro-batches (drawn ``elided_s`` earlier)


@dataclass(frozen=True, slots=True)
class StageTimes:
    """One stage's seconds per micro-batch (all of its v chunks together)."""

    forward_s: float
    recompute_s: float
    backward_s: float
    tp_forward_s: float  # exposed TP (with CP and expert all-to-alls) in the forward pass
    tp_backward_s: float  # ... in the replay and the backward pass
    dp_s: float  # per micro-batch DP work (ZeRO-2/3 gathers and reduce-scatters)
    pp_s: float  # exposed PP sends per micro-batch (2·v transfers; 4 when blocking)

    @property
    def total_s(self) -> float:
        return (
            self.forward_s
            + self.recompute_s
            + self.backward_s
            + self.tp_forward_s
            + self.tp_backward_s
            + self.dp_s
            + self.pp_s
        )


@dataclass(frozen=True, slots=True)
class Timeline:
    """The schedule of one iteration and how it agrees with the engine."""

    schedule: Literal["1f1b", "interleaved"]
    pipeline_stages: int
    microbatches: int
    virtual_stages: int
    iteration_time_s: float  # the engine's
    makespan_s: float  # first forward to last backward, on the schedule
    engine_pipeline_s: float  # the engine's m·T + bubble
    bubble_s: float  # makespan − m·T (T the slowest stage's time per micro-batch)
    period_s: float  # T
    truncated: bool
    elided_microbatches: int
    elided_s: float
    stages: list[StageTimes]
    events: list[Event]
    assumptions: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def bubble_ratio(self) -> float:
        """Bubble over the iteration time (the estimate's ``ratios.bubble``)."""
        return self.bubble_s / self.iteration_time_s


def _share(total: float, weights: tuple[float, float, float]) -> tuple[float, float, float]:
    whole = weights[0] + weights[1] + weights[2]
    if whole <= 0.0:
        return total, 0.0, 0.0
    return tuple(total * w / whole for w in weights)  # type: ignore[return-value]


def stage_times(k: KernelResult, pipeline: int) -> list[StageTimes]:
    """Each stage's per-micro-batch times from the kernel's first/middle/last stage."""
    comp_w = tuple(float(x) for x in k.compute_split)
    tp_w = tuple(float(x) for x in k.tp_split)
    out: list[StageTimes] = []
    for s in range(pipeline):
        role = "first" if s == 0 else "last" if s == pipeline - 1 else "mid"
        part = {key: float(value) for key, value in k.stages[role].items()}
        # The GPU's wait on the host (eager MoE layers) is drawn inside the layers' compute.
        fwd, rec, bwd = _share(part["compute"] + part["host"], comp_w)  # type: ignore[arg-type]
        # CP and expert all-to-alls run inside the layers like TP: drawn as tp_comm
        tp_all = part["tp"] + part["cp"] + part["expert"]
        tp_f, tp_r, tp_b = _share(tp_all, tp_w)  # type: ignore[arg-type]
        out.append(
            StageTimes(
                forward_s=fwd,
                recompute_s=rec,
                backward_s=bwd,
                tp_forward_s=tp_f,
                tp_backward_s=tp_r + tp_b,
                dp_s=part["dp"],
                pp_s=part["pp"] if pipeline > 1 else 0.0,
            )
        )
    return out


def lane_order(p: int, stage: int, m: int, v: int) -> list[tuple[bool, int]]:
    """Megatron-LM's op order on one stage: (is_forward, k) with k the chunk-op index.

    Warm-up forwards (p−s−1 for 1F1B; 2·(p−s−1) + (v−1)·p interleaved), then one forward
    and one backward at a time, then the cool-down backwards (SC21 §2.2, Fig. 4).
    """
    total = m * v
    warm = p - stage - 1 if v == 1 else (p - stage - 1) * 2 + (v - 1) * p
    warm = min(warm, total)
    ops: list[tuple[bool, int]] = [(True, k) for k in range(warm)]
    for j in range(total - warm):
        ops.append((True, warm + j))
        ops.append((False, j))
    ops.extend((False, k) for k in range(total - warm, total))
    return ops


def chunk_microbatch(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(chunk, micro-batch) of chunk-op k: groups of p micro-batches per chunk (Megatron)."""
    group, within = divmod(k, p * v)
    chunk = within // p
    if not forward:
        chunk = v - 1 - chunk
    return chunk, group * p + within % p


@dataclass(slots=True)
class _Op:
    forward: bool
    chunk: int
    mb: int
    start: float = 0.0
    end: float = 0.0


def _schedule(stages: list[StageTimes], m: int, v: int) -> list[list[_Op]]:
    """List-schedule every lane's ops in Megatron's order; ops carry start and end."""
    p = len(stages)
    lanes = [
        [_Op(fwd, *chunk_microbatch(k, p, v, fwd)) for fwd, k in lane_order(p, s, m, v)]
        for s in range(p)
    ]
    f_dur = [(st.forward_s + st.tp_forward_s + st.pp_s / 2.0) / v for st in stages]
    b_dur = [
        (st.recompute_s + st.backward_s + st.tp_backward_s + st.dp_s + st.pp_s / 2.0) / v
        for st in stages
    ]
    done: dict[tuple[bool, int, int, int], float] = {}  # (fwd, stage, chunk, mb) -> end
    nxt = [0] * p
    free = [0.0] * p
    left = sum(len(lane) for lane in lanes)
    while left:
        progressed = False
        for s in range(p):
            lane = lanes[s]
            while nxt[s] < len(lane):
                op = lane[nxt[s]]
                if op.forward:
                    dep = (
                        (True, s - 1, op.chunk, op.mb)
                        if s > 0
                        else (True, p - 1, op.chunk - 1, op.mb)
                        if op.chunk > 0
                        else None
                    )
                else:
                    dep = (
                        (False, s + 1, op.chunk, op.mb)
                        if s < p - 1
                        else (False, 0, op.chunk + 1, op.mb)
                        if op.chunk < v - 1
                        else (True, s, op.chunk, op.mb)
                    )
                ready = 0.0
                if dep is not None:
                    if dep not in done:
                        break
                    ready = done[dep]
                op.start = max(free[s], ready)
                op.end = op.start + (f_dur[s] if op.forward else b_dur[s])
                free[s] = op.end
                done[(op.forward, s, op.chunk, op.mb)] = op.end
                nxt[s] += 1
                left -= 1
                progressed = True
        if not progressed:  # pragma: no cover - Megatron's order never deadlocks
            raise RuntimeError("pipeline schedule deadlocked")
    return lanes


def _op_events(s: int, op: _Op, st: StageTimes, v: int, shift: float, gap: bool) -> list[Event]:
    """The blocks of one chunk-op: compute (recompute first), its TP and DP work, its send."""
    if op.forward:
        parts: list[tuple[EventKind, float]] = [
            ("forward", st.forward_s / v),
            ("tp_comm", st.tp_forward_s / v),
        ]
    else:
        parts = [
            ("recompute", st.recompute_s / v),
            ("backward", st.backward_s / v),
            ("tp_comm", st.tp_backward_s / v),
            ("dp_comm", st.dp_s / v),
        ]
    parts.append(("pp_comm", st.pp_s / 2.0 / v))
    events: list[Event] = []
    t = op.start + shift
    mb, chunk = op.mb, op.chunk
    for kind, seconds in parts:
        if seconds > 0.0:
            events.append(Event(s, kind, mb, chunk, t, t + seconds, gap))
            t += seconds
    return events


def _shown_run(m: int, p: int, v: int, shown: int) -> int:
    """Micro-batches scheduled: all of m, or ``shown`` (at least 2p, a multiple of p when
    interleaved so that the elided micro-batches are whole groups)."""
    run = max(shown, 2 * p)
    if v > 1:
        run = -(-run // p) * p
    return m if run >= m else run


def timeline(scenario: Scenario, *, shown: int = DEFAULT_SHOWN) -> Timeline:
    """The schedule of one iteration of ``scenario``, bounded by ``shown`` micro-batches."""
    if not 1 <= shown <= MAX_SHOWN:
        raise ValidationError("max_microbatches_shown", shown, f"must be between 1 and {MAX_SHOWN}")
    lay = scenario.layout
    p, v, m = lay.pipeline, lay.virtual_stages, scenario.micro_batches
    run = _shown_run(m, p, v, shown)
    ops = 2 * p * v * run
    if ops > MAX_SIMULATED_OPS:
        raise LimitError(
            f"a timeline of pipeline={p}, virtual_stages={v} schedules {ops} chunk-ops for "
            f"{run} micro-batches, over the cap of {MAX_SIMULATED_OPS}: use a smaller "
            "pipeline·virtual_stages (or max_microbatches_shown)",
            pipeline=p,
            virtual_stages=v,
            max_simulated_ops=MAX_SIMULATED_OPS,
        )
    k = run_kernel(scenario)
    stages = stage_times(k, p)
    period = max(st.total_s for st in stages)
    run, lanes, steady = _steady_run(stages, m, v, run, period)

    elided = m - run
    shift = elided * period
    events: list[Event] = []
    for s, lane in enumerate(lanes):
        cut = _cut_index(lane) if elided else len(lane)
        for i, op in enumerate(lane):
            if i >= cut:  # a periodic image: `elided` micro-batches (periods) later
                op = _Op(op.forward, op.chunk, op.mb + elided, op.start, op.end)
            events.extend(_op_events(s, op, stages[s], v, shift if i >= cut else 0.0, i >= cut))
    makespan = max(op.end for lane in lanes for op in lane) + shift

    # The end of the iteration: gradient reduction and embedding sync once per stage after its
    # last backward, then the optimizer step everywhere (its grad-norm all-reduce joins all).
    tail = float(k.iteration_s) - float(k.pipeline_s)
    optimizer = float(k.terms["optimizer"])
    reduce = max(tail - optimizer, 0.0)
    lane_ends = [lane[-1].end + (shift if elided else 0.0) for lane in lanes]
    step_at = max(end + reduce for end in lane_ends)
    gap_tail = bool(elided)
    for s, end in enumerate(lane_ends):
        if reduce > 0.0:
            events.append(Event(s, "dp_comm", None, None, end, end + reduce, gap_tail))
        if optimizer > 0.0:
            events.append(Event(s, "optimizer", None, None, step_at, step_at + optimizer, gap_tail))
    events = _with_idle(events, p, elided_s=shift)

    notes = engine_assumptions(scenario) + _assumptions(p, v, run, m, elided)
    return Timeline(
        schedule="interleaved" if v > 1 else "1f1b",
        pipeline_stages=p,
        microbatches=m,
        virtual_stages=v,
        iteration_time_s=float(k.iteration_s),
        makespan_s=makespan,
        engine_pipeline_s=float(k.pipeline_s),
        bubble_s=max(makespan - m * period, 0.0),
        period_s=period,
        truncated=bool(elided),
        elided_microbatches=elided,
        elided_s=shift,
        stages=stages,
        events=events,
        assumptions=notes,
        warnings=list(scenario.warnings)
        + _agreement_warning(makespan, float(k.pipeline_s))
        + (
            []
            if steady
            else [
                "the schedule of the shown micro-batches had not settled into its steady state: "
                "the times after the elided micro-batches are approximate (ask for more "
                "max_microbatches_shown)"
            ]
        ),
    )


def _steady_run(
    stages: list[StageTimes], m: int, v: int, run: int, period: float
) -> tuple[int, list[list[_Op]], bool]:
    """The schedule of ``run`` micro-batches (doubled while the cap allows until its second half
    is periodic: p more micro-batches move every op after the cut by exactly p periods), and
    whether that was verified (unequal stages can take longer to settle)."""
    p = len(stages)
    while True:
        lanes = _schedule(stages, run, v)
        if run >= m:
            return run, lanes, True
        step = p if run + p <= m else m - run
        longer = _schedule(stages, run + step, v)
        if _repeats(lanes, longer, step * v, step * period):
            return run, lanes, True
        bigger = -(-2 * run // p) * p
        if bigger >= m or 2 * p * v * bigger > MAX_SIMULATED_OPS:
            return run, lanes, False
        run = bigger


def _repeats(short: list[list[_Op]], long: list[list[_Op]], ops: int, seconds: float) -> bool:
    """Every op after the cut of ``short`` recurs ``2·ops`` later in ``long``, ``seconds`` later."""
    end = max(lane[-1].end for lane in long)
    tol = EXACT_TOLERANCE * end
    for a, b in zip(short, long, strict=True):
        for i in range(_cut_index(a), len(a)):
            if abs(a[i].start + seconds - b[i + 2 * ops].start) > tol:
                return False
    return True


def _cut_index(lane: list[_Op]) -> int:
    """Half-way through the lane's steady pairs (after the warm-up, before the cool-down)."""
    warm = 0
    while warm < len(lane) and lane[warm].forward:
        warm += 1
    cool = 0
    while cool < len(lane) and not lane[len(lane) - 1 - cool].forward:
        cool += 1
    pairs = (len(lane) - warm - cool) // 2
    return warm + 2 * (pairs // 2)


def _with_idle(events: list[Event], p: int, *, elided_s: float) -> list[Event]:
    """Every lane's events in time order, with its gaps (and its wait for the last stage to
    finish) as idle events; the elided stretch itself is not idle."""
    by_lane: list[list[Event]] = [[] for _ in range(p)]
    for e in events:
        by_lane[e.stage].append(e)
    finish = max((e.end_s for e in events), default=0.0)
    out: list[Event] = []
    for s, lane in enumerate(by_lane):
        # already in time order: a lane's ops are scheduled in order, its tail comes last
        t = 0.0
        crossed = False
        for e in lane:
            if e.after_gap and not crossed:
                t += elided_s  # the elided stretch is busy, not idle
                crossed = True
            if e.start_s - t > _MIN_EVENT * max(e.end_s, 1.0):
                out.append(Event(s, "idle", None, None, t, e.start_s, e.after_gap))
            out.append(e)
            t = max(t, e.end_s)
        if lane and finish - t > _MIN_EVENT * max(finish, 1.0):  # done before the others
            out.append(Event(s, "idle", None, None, t, finish, lane[-1].after_gap))
    return out


def _agreement_warning(makespan: float, engine: float) -> list[str]:
    gap = abs(makespan - engine) / engine if engine > 0.0 else 0.0
    if gap <= 1e-6:
        return []
    return [
        f"the schedule's makespan {makespan:.6g} s differs from the engine's pipeline time "
        f"{engine:.6g} s by {gap:.2%}: with unequal stages the engine's m·T + (W − T)/v is an "
        "approximation of the list schedule drawn here"
    ]


def _assumptions(p: int, v: int, run: int, m: int, elided: int) -> list[str]:
    out = [
        (
            f"interleaved 1F1B with {v} chunks per stage (SC21 §2.2.2, Megatron-LM's op order)"
            if v > 1
            else "1F1B (PipeDream-Flush, SC21 §2.2.1, Megatron-LM's op order)"
        ),
        "each stage's per-micro-batch time is the engine's; its compute is split into "
        "forward, recompute and backward by FLOPs (paper) or priced time (detailed), its "
        "exposed TP time by collective count; CP and expert all-to-alls are drawn as tp_comm; "
        "the GPU's wait on the host (eager MoE layers, breakdown term host) is drawn as compute",
        "every forward and backward chunk ends with its PP send (the engine charges 2·v sends "
        "per micro-batch to every stage)",
        "after a stage's last backward: gradient reduction and embedding sync (dp_comm), then "
        "the optimizer step on every stage at once",
    ]
    if elided:
        out.append(
            f"{elided} of {m} micro-batches elided: {run} scheduled, the second half moved by "
            f"{elided} periods to the end (events with after_gap; the steady state repeats "
            "every T)"
        )
    del p
    return out
