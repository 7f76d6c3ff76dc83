"""Training logs as measurements: the steady-state iteration time and the run's request.

``parse_training_log(text, hints)`` detects the format (Megatron-LM / Megatron-DeepSpeed, or
NeMo), reads the run's settings into the ``model``/``layout``/``training`` parts of an
estimate request (the mapping is ``profiles.megatron_settings``), and the steady-state
iteration time (``steady``: which intervals count, and why the others do not). It raises only
``TrainingLogParseError`` (no training interval, no arguments block) and ``ValidationError`` (a hint
that breaks a rule, settings that contradict each other). Linear in the text's length.
"""

from __future__ import annotations

from estimator.errors import TrainingLogParseError
from profiles.training_logs import megatron, nemo
from profiles.training_logs._model import (
    MAX_LISTED_ITERATIONS,
    DroppedInterval,
    Interval,
    LogHints,
    MissingField,
    ParsedTrainingLog,
)
from profiles.training_logs._request import ReadRequest, read_request
from profiles.training_logs._text import first_lines
from profiles.training_logs.steady import SteadyState, steady_state

__all__ = [
    "DroppedInterval",
    "Interval",
    "LogHints",
    "MissingField",
    "ParsedTrainingLog",
    "parse_training_log",
]

FORMATS = ("megatron-lm", "megatron-deepspeed", "nemo")
EXPECTED = (
    "expected a Megatron-LM log (its arguments block and 'iteration N/ M | ... | elapsed time "
    "per iteration (ms): T' lines) or a NeMo log ('train_step_timing in s' per step)"
)


def parse_training_log(text: str, hints: LogHints | None = None) -> ParsedTrainingLog:
    """The steady-state iteration time and the request of the run ``text`` logged."""
    if not isinstance(text, str):
        raise TrainingLogParseError(f"the upload is not text; {EXPECTED}")
    hints = hints or LogHints()
    if megatron.ITERATION_MARK in text or megatron.ARGS_START in text:
        return _megatron(text, hints)
    if nemo.TIMING_MARK in text:
        return _nemo(text, hints)
    if not text.strip():
        raise TrainingLogParseError(f"the text is empty; {EXPECTED}")
    seen = first_lines(text)
    shown = "; ".join(f"line {n}: {t!r}" for n, t in seen) or "only over-long lines"
    raise TrainingLogParseError(
        f"found no training iterations; {EXPECTED}; saw {shown}", lines=seen
    )


def _megatron(text: str, hints: LogHints) -> ParsedTrainingLog:
    log = megatron.scan(text)
    run, warnings = megatron.choose_run(log, text)
    warnings = log.warnings + warnings
    if not run.arguments_ended:
        warnings.append(
            f"the arguments block at line {run.arguments_line} has no end line; read what it holds"
        )
    if run.unread_arguments:
        warnings.append(
            f"{run.unread_arguments} line(s) inside the arguments block were not arguments "
            "(interleaved output of other ranks?)"
        )
    warnings.extend(f"ignored an argument value: {bad}" for bad in run.bad_values)
    settings, world, vocab_raw = megatron.settings_of(run)
    deepspeed = settings.get("deepspeed") is True or run.deepspeed_fields
    read = read_request(settings, hints, gpus=world, vocab_size=vocab_raw, where="arguments block")
    steady = steady_state(
        run.intervals,
        global_batch_size=read.request["training"].get("global_batch_size"),
        warmup_iterations=hints.warmup_iterations,
    )
    last = run.intervals[-1]
    if run.traceback_line is not None:
        line, _quoted = run.traceback_line
        warnings.append(
            f"the run crashed: a traceback at line {line} after iteration {last.iteration}; "
            "the intervals before it are used"
        )
    elif run.train_iterations is not None and last.iteration < run.train_iterations:
        warnings.append(
            f"the log ends at iteration {last.iteration} of {run.train_iterations} (cut, "
            "stopped or still running); the intervals logged are used"
        )
    return _result(
        "megatron-deepspeed" if deepspeed else "megatron-lm",
        steady,
        read,
        warnings,
        last_iteration=last.iteration,
        train_iterations=run.train_iterations,
    )


def _nemo(text: str, hints: LogHints) -> ParsedTrainingLog:
    log = nemo.scan(text)
    if not log.intervals:
        raise TrainingLogParseError(
            f"found '{nemo.TIMING_MARK}' but no step line with a global_step and a time; {EXPECTED}"
        )
    settings = dict(log.settings)
    if "global_batch_size" not in settings:
        batches = {i.global_batch_size for i in log.intervals if i.global_batch_size}
        if len(batches) == 1:
            settings["global_batch_size"] = batches.pop()
    read = read_request(settings, hints, gpus=log.world_size, vocab_size=None, where="NeMo config")
    steady = steady_state(
        log.intervals,
        global_batch_size=read.request["training"].get("global_batch_size"),
        warmup_iterations=hints.warmup_iterations,
    )
    return _result("nemo", steady, read, log.warnings, last_iteration=log.intervals[-1].iteration)


def _result(
    fmt: str,
    steady: SteadyState,
    read: ReadRequest,
    warnings: list[str],
    *,
    last_iteration: int,
    train_iterations: int | None = None,
) -> ParsedTrainingLog:
    counts: dict[str, int] = {}
    for dropped in steady.dropped:
        counts[dropped.reason] = counts.get(dropped.reason, 0) + 1
    notes = [steady.warmup, *read.notes]
    if counts:
        notes.append(
            "left out: "
            + ", ".join(f"{n} interval(s) for {reason}" for reason, n in counts.items())
        )
    for reason in ("NaN", "skipped iterations"):
        if reason in counts:
            warnings.append(f"{counts[reason]} logged interval(s) had {reason} and were left out")
    return ParsedTrainingLog(
        format=fmt,
        iteration_time_s=steady.iteration_time_s,
        iterations_used=[i.iteration for i in steady.used[:MAX_LISTED_ITERATIONS]],
        intervals_used=len(steady.used),
        dropped=steady.dropped[:MAX_LISTED_ITERATIONS],
        dropped_count=len(steady.dropped),
        warmup=steady.warmup,
        request=read.request,
        missing=read.missing,
        notes=notes,
        warnings=[*warnings, *read.warnings],
        last_iteration=last_iteration,
        train_iterations=train_iterations,
    )
