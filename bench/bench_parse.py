"""Time parse_benchmark_text on a ~1 MB nccl-tests log (many runs concatenated).

Run: python3 bench/bench_parse.py  (prints the median time and throughput; not a test)
Target: under 100 ms per MB.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from profiles.parsers import parse_benchmark_text

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "profiles" / "fixtures"
TARGET_BYTES = 1_000_000
REPEATS = 15


def build_log() -> str:
    """Concatenate the nccl-tests / rccl-tests fixtures until the text reaches ~1 MB."""
    parts = [p.read_text() for p in sorted(FIXTURES.glob("[nr]ccl_*.txt"))]
    chunks: list[str] = []
    size = 0
    while size < TARGET_BYTES:
        for part in parts:
            chunks.append(part)
            size += len(part.encode())
            if size >= TARGET_BYTES:
                break
    return "\n".join(chunks)


def main() -> None:
    text = build_log()
    mb = len(text.encode()) / 1e6
    result = parse_benchmark_text(text)  # warm-up, and a sanity figure
    points = sum(len(r.points) for r in result.runs)
    times_ms = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        parse_benchmark_text(text)
        times_ms.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(times_ms)
    lines = text.count("\n") + 1
    print(f"log: {mb:.2f} MB, {lines} lines, {len(result.runs)} runs, {points} points")
    print(
        f"parse_benchmark_text: median {median:.1f} ms "
        f"(min {min(times_ms):.1f}, max {max(times_ms):.1f}) over {REPEATS} runs"
    )
    print(f"throughput: {mb / (median / 1e3):.1f} MB/s; {median / mb:.1f} ms per MB (target < 100)")


if __name__ == "__main__":
    main()
