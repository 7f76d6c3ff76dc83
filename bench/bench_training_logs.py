"""Time parse_training_log on ~20 MB: a long Megatron-LM run, and noise around a real log.

Run: python3 bench/bench_training_logs.py  (prints medians and MB/s; not a test)
Target: linear in the text (the 20 MB cases take about 20 x the 1 MB ones).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from profiles.training_logs import parse_training_log

FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "profiles"
    / "fixtures"
    / "training_logs"
    / "megatron_lm_gpt2_345m_tp2_pp2.txt"
)
REPEATS = 3


def long_run(size: int) -> str:
    """The fixture's arguments block followed by iteration lines up to ``size`` characters."""
    head = FIXTURE.read_text().split(" iteration      100/")[0]
    lines = [head]
    total, i = len(head), 0
    while total < size:
        i += 1
        line = (
            f" iteration {i:8d}/ 9999999 | consumed samples: {16 * i:12d} | elapsed time per "
            f"iteration (ms): {1000 + i % 97:.1f} | learning rate: 1.0E-04 | global batch size: "
            "   16 | lm loss: 2.5E+00 | loss scale: 1.0 | grad norm: 0.5 | number of skipped "
            "iterations:   0 | number of nan iterations:   0 |\n"
        )
        lines.append(line)
        total += len(line)
    return "".join(lines)


def noisy(size: int) -> str:
    """Near-miss lines for every marker, then the real log."""
    block = (
        "iteration " * 40
        + "/ |\n elapsed time per iteration (ms): | x |\n  name "
        + "." * 200
        + "\n[default0]:[rank1]:0: warning: something happened\n"
    )
    return block * (size // len(block)) + FIXTURE.read_text()


def _time(make: Callable[[int], str], size: int) -> tuple[float, float]:
    text = make(size)
    parse_training_log(text)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        parse_training_log(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(text.encode()) / 1e6


def main() -> None:
    for name, make in (("long Megatron-LM run", long_run), ("noise + real log", noisy)):
        small_s, small_mb = _time(make, 1_000_000)
        big_s, big_mb = _time(make, 20_000_000)
        print(
            f"{name}: {small_mb:.1f} MB in {small_s * 1e3:.0f} ms, {big_mb:.1f} MB in "
            f"{big_s * 1e3:.0f} ms ({big_mb / big_s:.1f} MB/s; 20 MB / 1 MB time ratio "
            f"{big_s / small_s:.1f})"
        )


if __name__ == "__main__":
    main()
