"""NeMo (PyTorch Lightning) training logs: ``train_step_timing in s`` per logged step.

NeMo prints its step metrics either as a progress bar (``Epoch 0: ... reduced_train_loss=2.1,
global_step=49.0, consumed_samples=400.0, train_step_timing in s=0.603``) or as a line
(``Training epoch 0, iteration 120/149 | ... | global_step: 120 | reduced_train_loss: 1.233 |
train_step_timing in s: 0.03146``). Its model and parallel settings are in the experiment's
YAML config, which NeMo 1.x prints at start-up (``  num_layers: 24``); those lines are read
when present, with NeMo's own spellings (``precision: bf16-mixed``, ``activation:
fast-swiglu``, ``devices``/``num_nodes``) turned into Megatron settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from estimator.errors import ValidationError
from profiles.megatron_settings import Value, convert, setting_for
from profiles.training_logs._model import Interval
from profiles.training_logs._text import LogLines, to_float, to_int

TIMING_MARK = "train_step_timing in s"
_EVENTS = (("validation_step", "evaluation"), ("Saving checkpoint", "checkpoint save"))


@dataclass(slots=True)
class NemoLog:
    """The steps found and the config settings read."""

    intervals: list[Interval] = field(default_factory=list)
    settings: dict[str, Value] = field(default_factory=dict)
    world_size: int | None = None
    warnings: list[str] = field(default_factory=list)
    train_iterations: int | None = None


def _metric(line: str, name: str) -> str | None:
    """The value after ``name`` and ``:`` or ``=`` (up to ``|``, ``,`` or ``]``)."""
    at = line.find(name)
    if at < 0:
        return None
    rest = line[at + len(name) :].lstrip()
    if not rest or rest[0] not in ":=":
        return None
    rest = rest[1:].lstrip()
    end = len(rest)
    for stop in "|,]":
        index = rest.find(stop)
        if 0 <= index < end:
            end = index
    return rest[:end].strip()


def _nemo_setting(key: str, raw: str, log: NemoLog) -> None:
    value = raw.strip().strip("'\"")
    lowered = value.lower()
    if key == "precision":
        log.settings.setdefault("bf16", lowered.startswith("bf16"))
        log.settings.setdefault("fp16", lowered.startswith("16"))
    elif key == "activation":
        log.settings.setdefault("swiglu", "swiglu" in lowered)
    elif key == "share_embeddings_and_output_weights":
        log.settings.setdefault("untie_embeddings_and_output_weights", lowered == "false")
    elif key == "fp8":
        if lowered == "true":
            log.settings.setdefault("fp8", "hybrid")
    elif key == "name" and value == "distributed_fused_adam":
        log.settings.setdefault("use_distributed_optimizer", True)
    elif key in ("devices", "num_nodes"):
        count = to_int(value)
        if count is not None:
            log.settings.setdefault(f"_{key}", count)
    else:
        setting = setting_for(key)
        if setting is None or setting.name in log.settings:
            return
        try:
            log.settings[setting.name] = convert(setting, value, field_name=lambda n: n)
        except ValidationError as exc:
            log.warnings.append(f"ignored config line {key}: {exc}")


def scan(text: str) -> NemoLog:
    """One pass: config lines (``key: value``) and step lines."""
    log = NemoLog()
    events: list[str] = []
    lines = LogLines(text)
    for number, line in lines:
        if TIMING_MARK in line:
            timing = to_float(_metric(line, TIMING_MARK) or "")
            step = to_int(_metric(line, "global_step") or "")
            if timing is None or step is None:
                continue
            loss = to_float(_metric(line, "reduced_train_loss") or "0")
            batch = to_int(_metric(line, "global_batch_size") or "")
            log.intervals.append(
                Interval(
                    iteration=step,
                    iteration_time_s=timing,
                    line=number,
                    global_batch_size=batch,
                    nan=1 if loss is not None and not math.isfinite(loss) else 0,
                    events=tuple(dict.fromkeys(events)),
                )
            )
            events = []
            continue
        for mark, event in _EVENTS:
            if mark in line:
                events.append(event)
        stripped = line.strip()
        if "|" in stripped or stripped.count(":") != 1 or stripped.startswith("-"):
            continue
        key, _, raw = stripped.partition(":")
        if key.isidentifier() and raw.strip():
            _nemo_setting(key, raw, log)
    devices = log.settings.pop("_devices", None)
    nodes = log.settings.pop("_num_nodes", None)
    if isinstance(devices, int) and not isinstance(devices, bool):
        log.world_size = devices * (nodes if isinstance(nodes, int) else 1)
    log.warnings.extend(lines.warnings())
    return log
