"""Megatron-LM (and Megatron-DeepSpeed) training logs.

What rank 0 prints, as ``megatron/training/training.py`` and ``arguments.py`` write it:

- the arguments block, ``------------------------ arguments ------------------------`` then
  one ``  num_layers ...................................... 96`` line per argument, then
  ``-------------------- end of arguments ---------------------``;
- ``using world size: 16, data-parallel size: 4, ...`` and
  ``> padded vocab (size: 50257) with 943 dummy tokens (new size: 51200)``;
- every log interval, ``iteration 100/ 5000 | consumed samples: ... | elapsed time per
  iteration (ms): 858.6 | ... | global batch size: 16 | lm loss: ... | grad norm: ... |
  number of skipped iterations: 0 | number of nan iterations: 0 |`` (Megatron-DeepSpeed adds
  ``consumed tokens``, ``samples per second`` and ``TFLOPs``);
- between intervals: checkpoint saves, evaluations, DeepSpeed's overflow notices, tracebacks.

A log holding several runs (a job that restarted and appended) is read from its last
arguments block that logged iterations.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from estimator.errors import TrainingLogParseError, ValidationError
from profiles.megatron_settings import Value, canonical, convert, setting_for
from profiles.training_logs._model import Interval
from profiles.training_logs._text import LogLines, quote, to_float, to_int

ARGS_START = "------------------------ arguments ------------------------"
ARGS_END = "end of arguments"
ITERATION_MARK = "elapsed time per iteration (ms)"
EXPECTED = (
    "expected a Megatron-LM log: its arguments block (------------------------ arguments "
    "------------------------ ... -------------------- end of arguments ---------------------)"
    " and its 'iteration N/ M | ... | elapsed time per iteration (ms): T | ...' lines"
)

_ITERATION = re.compile(r"iteration\s{1,40}(\d{1,12})\s{0,40}/\s{0,40}(\d{1,12})\s*$")
_WORLD = re.compile(r"using world size:\s{0,8}(\d{1,9})")
_PADDED = re.compile(
    r"padded vocab \(size: (\d{1,12})\) with \d{1,12} dummy tokens \(new size: (\d{1,12})\)"
)
_EVENTS = (
    ("saving checkpoint at iteration", "checkpoint save"),
    ("successfully saved checkpoint", "checkpoint save"),
    ("validation loss at iteration", "evaluation"),
    ("Evaluating iter", "evaluation"),
)
_OVERFLOW = "Overflow detected. Skipping step"  # DeepSpeed's fp16 loss-scale overflow
_DS_FIELDS = ("consumed tokens", "samples per second", "TFLOPs")


@dataclass(slots=True)
class MegatronRun:
    """One run in the log: its arguments block and the intervals logged after it."""

    arguments_line: int
    settings: dict[str, Value] = field(default_factory=dict)
    arguments_ended: bool = False
    intervals: list[Interval] = field(default_factory=list)
    world_size: int | None = None
    vocab_raw: int | None = None
    vocab_padded: int | None = None
    unread_arguments: int = 0
    bad_values: list[str] = field(default_factory=list)
    deepspeed_fields: bool = False
    train_iterations: int | None = None
    traceback_line: tuple[int, str] | None = None


@dataclass(slots=True)
class MegatronLog:
    """Every run found, and what was seen outside any run."""

    runs: list[MegatronRun]
    orphan_intervals: list[Interval]  # iteration lines before any arguments block
    orphan_quote: list[tuple[int, str]]
    warnings: list[str]


def _argument(line: str) -> tuple[str, str] | None:
    """``  num_layers ........ 96`` -> (``num_layers``, ``96``)."""
    dots = line.find(" ...")
    if dots <= 0:
        return None
    head = line[:dots].split()
    if not head:
        return None
    end = dots + 1
    while end < len(line) and line[end] == ".":
        end += 1
    return head[-1], line[end:].strip()


def _interval(
    number: int, line: str, events: list[str], overflows: int
) -> tuple[Interval | None, int | None, bool]:
    """An iteration line as an interval; also the M of N/ M and whether DeepSpeed fields show."""
    parts = line.split("|")
    head = _ITERATION.search(parts[0])
    if head is None:
        return None, None, False
    fields: dict[str, str] = {}
    for part in parts[1:]:
        key, colon, value = part.rpartition(":")
        if colon:
            fields[key.strip()] = value.strip()
    elapsed = to_float(fields.get(ITERATION_MARK, ""))
    if elapsed is None:
        return None, None, False
    nan = to_int(fields.get("number of nan iterations", "0")) or 0
    for key in ("lm loss", "grad norm", "loss"):
        metric = to_float(fields.get(key, "0"))
        if metric is not None and not math.isfinite(metric):
            nan += 1
    skipped = (to_int(fields.get("number of skipped iterations", "0")) or 0) + overflows
    interval = Interval(
        iteration=int(head.group(1)),
        iteration_time_s=elapsed / 1000.0,
        line=number,
        global_batch_size=to_int(fields.get("global batch size", "")),
        skipped=skipped,
        nan=nan,
        events=tuple(dict.fromkeys(events)),
    )
    deepspeed = any(name in fields for name in _DS_FIELDS)
    return interval, int(head.group(2)), deepspeed


def scan(text: str) -> MegatronLog:
    """One pass over the log: arguments blocks, iteration lines and what happened between."""
    lines = LogLines(text)
    runs: list[MegatronRun] = []
    orphans: list[Interval] = []
    orphan_quote: list[tuple[int, str]] = []
    run: MegatronRun | None = None
    in_block = False
    events: list[str] = []
    overflows = 0
    pending_world: int | None = None
    for number, line in lines:
        if ARGS_START in line:
            run = MegatronRun(arguments_line=number, world_size=pending_world)
            runs.append(run)
            in_block = True
            events, overflows = [], 0
            continue
        if in_block and run is not None:
            if ARGS_END in line:
                in_block = False
                run.arguments_ended = True
                continue
            parsed = _argument(line)
            if parsed is not None:
                name, raw = parsed
                setting = setting_for(name)
                if setting is not None:
                    try:
                        run.settings[name] = convert(setting, raw, field_name=lambda n: n)
                    except ValidationError as exc:
                        run.bad_values.append(f"line {number}: {exc}")
                continue
            if ITERATION_MARK not in line:
                run.unread_arguments += 1
                continue
            in_block = False  # a cut block: training started without its end line
        if ITERATION_MARK in line and "iteration" in line:
            interval, total, deepspeed = _interval(number, line, events, overflows)
            events, overflows = [], 0
            if interval is None:
                continue
            if run is None:
                orphans.append(interval)
                if len(orphan_quote) < 3:
                    orphan_quote.append((number, quote(line)))
                continue
            run.intervals.append(interval)
            run.train_iterations = total
            run.deepspeed_fields = run.deepspeed_fields or deepspeed
            continue
        if "using world size" in line:
            match = _WORLD.search(line)
            if match:
                pending_world = int(match.group(1))
                if run is not None and not run.intervals:
                    run.world_size = pending_world
            continue
        if "padded vocab" in line and run is not None:
            match = _PADDED.search(line)
            if match:
                run.vocab_raw, run.vocab_padded = int(match.group(1)), int(match.group(2))
            continue
        if _OVERFLOW in line:
            overflows += 1
            continue
        if "Traceback (most recent call last)" in line and run is not None:
            if run.traceback_line is None:
                run.traceback_line = (number, quote(line))
            continue
        for mark, event in _EVENTS:
            if mark in line:
                events.append(event)
                break
    return MegatronLog(runs, orphans, orphan_quote, lines.warnings())


def settings_of(run: MegatronRun) -> tuple[dict[str, Value], int | None, int | None]:
    """The run's settings by canonical name, its world size and its raw vocabulary."""
    settings = canonical(run.settings)
    if run.vocab_padded is not None:
        settings["padded_vocab_size"] = run.vocab_padded
    return settings, run.world_size, run.vocab_raw


def choose_run(log: MegatronLog, text: str) -> tuple[MegatronRun, list[str]]:
    """The run to read (the last that logged iterations); TrainingLogParseError saying what
    is missing."""
    warnings: list[str] = []
    with_iterations = [r for r in log.runs if r.intervals]
    if with_iterations:
        run = with_iterations[-1]
        if len(log.runs) > 1:
            warnings.append(
                f"the log holds {len(log.runs)} arguments blocks (restarted runs); read the "
                f"last that logged iterations, from line {run.arguments_line}"
            )
        if log.orphan_intervals:
            warnings.append(
                f"ignored {len(log.orphan_intervals)} iteration line(s) before any arguments block"
            )
        return run, warnings
    if log.orphan_intervals:
        shown = "; ".join(f"line {n}: {t!r}" for n, t in log.orphan_quote)
        raise TrainingLogParseError(
            f"found {len(log.orphan_intervals)} iteration line(s) but no arguments block, so "
            f"the model and layout are unknown: Megatron-LM prints '{ARGS_START}' on rank 0 at "
            f"start-up; upload the log from its start. Saw {shown}",
            lines=log.orphan_quote,
        )
    if log.runs:
        run = log.runs[-1]
        cut = "" if run.arguments_ended else " (the block has no end line: the text is cut)"
        raise TrainingLogParseError(
            f"found the arguments block at line {run.arguments_line}{cut} but no "
            f"'iteration N/ M | ... | {ITERATION_MARK}: T' line after it: the run logged no "
            "training interval (it stopped before its first --log-interval, or the text is cut)",
            lines=[(run.arguments_line, ARGS_START)],
        )
    raise TrainingLogParseError(f"found no Megatron-LM training log; {EXPECTED}")
