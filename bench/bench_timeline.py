"""POST /v1/timelines at its largest: the time to build the JSON answer and to draw the PNG/SVG.

The layout schedules the most chunk-ops a timeline allows (``MAX_SIMULATED_OPS``: p=32, v=2,
64 micro-batches shown of 1024), in process through the route's service functions (no HTTP).
Each figure is the median of ``--runs`` (5) runs after one unmeasured run (imports, matplotlib's
font cache), wall and CPU time; the machine is shared, so the verdict reads the CPU time (what
the wall time comes to on an idle machine). Target (issue 12 §2): under 1 s for each format.

    python3 bench/bench_timeline.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from api.schemas import TimelineRequest
from api.services import timelines
from api.snapshots import Profiles
from estimator.timeline import MAX_SHOWN, MAX_SIMULATED_OPS

TARGET_S = 1.0
LARGEST: dict[str, Any] = {
    "model": {
        "num_layers": 128,
        "hidden_size": 12288,
        "num_attention_heads": 96,
        "seq_length": 2048,
        "vocab_size": 51200,
    },
    "layout": {"pipeline": 32, "tensor": 8, "data": 1, "virtual_stages": 2},
    "training": {"global_batch_size": 1024, "micro_batch_size": 1, "recompute": "full"},
    "cluster": {
        "gpus_per_node": 8,
        "peak_tflops": 312,
        "utilization": 0.5,
        "bandwidth_gbps": {"tp": 200, "pp": 20, "dp": 20},
        "memory_bandwidth_gbps": 2039,
    },
    "fidelity": "detailed",
    "max_microbatches_shown": MAX_SHOWN,
}


def median_s(work: Callable[[], object], runs: int) -> tuple[float, float]:
    """Median wall and CPU (process) seconds of ``work``."""
    work()
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        work()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    profiles: Profiles = None  # type: ignore[assignment]  # explicit figures: no profile read
    layout = LARGEST["layout"]
    ops = 2 * layout["pipeline"] * layout["virtual_stages"] * MAX_SHOWN
    assert ops == MAX_SIMULATED_OPS, ops

    def answer(fmt: str) -> bytes:
        request = TimelineRequest.model_validate({**LARGEST, "format": fmt})
        result = timelines.create_timeline(request=request, profiles=profiles)
        if fmt == "json":
            return timelines.timeline_response(answer=result).model_dump_json().encode()
        return timelines.timeline_picture(answer=result, fmt="png" if fmt == "png" else "svg")

    body = json.loads(answer("json"))
    print(
        f"layout p={layout['pipeline']} v={layout['virtual_stages']} m={body['microbatches']}, "
        f"{ops} chunk-ops scheduled, {len(body['events'])} events, target {TARGET_S:g} s"
    )
    for fmt in ("json", "png", "svg"):
        wall, cpu = median_s(lambda fmt=fmt: answer(fmt), args.runs)  # type: ignore[misc]
        size = len(answer(fmt))
        verdict = "ok" if cpu < TARGET_S else "OVER TARGET"
        print(
            f"{fmt:5s} wall {wall * 1e3:7.1f} ms  cpu {cpu * 1e3:7.1f} ms  "
            f"{size / 1e6:6.2f} MB  {verdict} (cpu)"
        )


if __name__ == "__main__":
    main()
