"""Mixed load on the real server, then proof that no acknowledged upload was lost.

Starts ``uvicorn api.app:app`` in a subprocess on a free loopback port (a temporary
SQLite file, or ``--database-url``, e.g. the PostgreSQL test database), makes a profile of its
own, and lets ``--clients`` threads (one httpx connection each) send a weighted mix for
``--duration`` seconds (hard stop): estimates, plans, uploads of distinct small nccl-tests
texts, and reads of profiles, runs and bandwidth. It prints requests/s, p50/p99 latency per
kind and overall, and the errors (any non-2xx answer or exception); then it reads the
profile's runs back and checks that every acknowledged upload is stored with all its points
(``lost uploads`` must be 0). The profile is deleted afterwards unless ``--keep``.

    python3 bench/bench_load.py [--clients 16] [--duration 20] [--database-url URL] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TOKEN = "bench-load-" + secrets.token_hex(8)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ESTIMATE: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "layout": {"pipeline": 8, "tensor": 8, "data": 24},
    "training": {"global_batch_size": 1536, "micro_batch_size": 1},
    "cluster": {"profile": "dgx-a100-nominal"},
}
PLAN: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "training": {"global_batch_size": 512},
    "cluster": {"profile": "dgx-a100-nominal"},
    "gpus": 64,
    "top_k": 5,
}
#: kind -> weight of the mix
MIX = {
    "estimate": 40,
    "plan": 5,
    "upload": 15,
    "profile": 10,
    "runs": 10,
    "bandwidth": 20,
}
SIZES = [8 * 2**k for k in range(24)]  # 8 B .. 64 MiB: 24 rows, 48 points per upload


def nccl_text(seed: int) -> str:
    """A distinct nccl-tests all_reduce output of 8 ranks on one node."""
    lines = [
        f"# bench_load upload {seed}",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank {r:2d} Group  0 Pid {1000 + r:6d} on     node-a device {r:2d} "
            f"[0x{r:02x}] NVIDIA H100 80GB HBM3"
            for r in range(8)
        ),
        "#",
        "#                                                              out-of-place"
        "                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    jitter = random.Random(seed)
    for size in SIZES:
        t = (20.0 + size / 150e3) * (1 + jitter.random() / 20)
        alg = size / t / 1e3
        half = f"{t:8.2f}  {alg:6.2f}  {alg * 1.75:6.2f}       0"
        lines.append(f"  {size:>10}  {size // 4:>12}     float     sum      -1  {half}  {half}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100.0", "#"]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    database_url: str, data_dir: Path, workers: int = 1
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "COMMEST_DATABASE_URL": database_url,
        "COMMEST_DATA_DIR": str(data_dir),
        "COMMEST_API_TOKEN": TOKEN,
    }
    command = [sys.executable, "-m", "uvicorn", "api.app:app"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    command += ["--no-access-log", "--workers", str(workers)]
    process = subprocess.Popen(command, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=base, timeout=2.0) as client:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.get("/readyz").status_code == 200:
                    return process, base
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    process.kill()
    process.wait()
    raise SystemExit("the server did not start")


class Seeds:
    """Distinct upload seeds shared by every client."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def __next__(self) -> int:
        with self._lock:
            self._next += 1
            return self._next


@dataclass
class Tally:
    """What every client saw (one lock: appends are cheap next to a request)."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    samples: list[str] = field(default_factory=list)
    acknowledged: dict[int, int] = field(default_factory=dict)  # run id -> expected points
    lock: threading.Lock = field(default_factory=threading.Lock)


def client_loop(
    base: str, profile: str, index: int, deadline: float, tally: Tally, seeds: Seeds
) -> None:
    rng = random.Random(index)
    kinds, weights = list(MIX), list(MIX.values())
    with httpx.Client(base_url=base, timeout=30.0) as client:
        while time.monotonic() < deadline:
            kind = rng.choices(kinds, weights)[0]
            start = time.perf_counter()
            try:
                response = send(client, kind, profile, rng, seeds)
                ok = 200 <= response.status_code < 300
                detail = f"{kind}: {response.status_code} {response.text[:200]}"
            except httpx.HTTPError as exc:
                response, ok, detail = None, False, f"{kind}: {type(exc).__name__} {exc}"
            elapsed = time.perf_counter() - start
            with tally.lock:
                tally.latencies[kind].append(elapsed)
                if not ok:
                    tally.errors[kind] += 1
                    if len(tally.samples) < 5:
                        tally.samples.append(detail)
                elif kind == "upload" and response is not None:
                    for run in response.json()["runs"]:
                        tally.acknowledged[run["id"]] = 2 * len(SIZES)


def send(
    client: httpx.Client, kind: str, profile: str, rng: random.Random, seeds: Seeds
) -> httpx.Response:
    if kind == "estimate":
        return client.post("/v1/estimates", json=ESTIMATE)
    if kind == "plan":
        return client.post("/v1/plans", json=PLAN)
    if kind == "upload":
        return client.post(
            f"/v1/profiles/{profile}/runs",
            content=nccl_text(next(seeds)),
            headers={**AUTH, "Content-Type": "text/plain"},
        )
    if kind == "profile":
        return client.get(f"/v1/profiles/{profile}")
    if kind == "runs":
        return client.get(f"/v1/profiles/{profile}/runs", params={"points": "false"})
    size = 2 ** rng.randint(3, 28)
    params = {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": size}
    return client.get(f"/v1/profiles/{profile}/bandwidth", params=params)


def percentile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def verify(base: str, profile: str, tally: Tally) -> tuple[int, int]:
    """(acknowledged uploads, lost ones): missing runs or runs missing points."""
    stored: dict[int, int] = {}
    offset: int | None = 0
    with httpx.Client(base_url=base, timeout=120.0) as client:
        while offset is not None:  # the list is paged: follow next_offset to the end
            response = client.get(f"/v1/profiles/{profile}/runs", params={"offset": offset})
            response.raise_for_status()
            page = response.json()
            stored.update((run["id"], len(run["points"])) for run in page["runs"])
            offset = page["next_offset"]
    lost = sum(1 for run, points in tally.acknowledged.items() if stored.get(run) != points)
    return len(tally.acknowledged), lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--keep", action="store_true", help="keep the bench profile")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'load.sqlite3'}"
        process, base = start_server(url, Path(tmp), args.workers)
        profile = "bench-load-" + secrets.token_hex(4)
        try:
            created = httpx.post(
                f"{base}/v1/profiles",
                json={"name": profile, "gpu_model": "H100", "gpus_per_node": 8},
                headers=AUTH,
            )
            created.raise_for_status()
            first = httpx.post(
                f"{base}/v1/profiles/{profile}/runs",
                content=nccl_text(-1),
                headers={**AUTH, "Content-Type": "text/plain"},
            )
            first.raise_for_status()
            tally = Tally()
            seeds = Seeds()
            start = time.monotonic()
            deadline = start + args.duration
            threads = [
                threading.Thread(
                    target=client_loop,
                    args=(base, profile, i, deadline, tally, seeds),
                    daemon=True,
                )
                for i in range(args.clients)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()) + 60)
            elapsed = time.monotonic() - start
            stuck = sum(thread.is_alive() for thread in threads)
            acknowledged, lost = verify(base, profile, tally)
            if not args.keep:
                httpx.delete(f"{base}/v1/profiles/{profile}", headers=AUTH, timeout=120)
        finally:
            process.terminate()
            process.wait()
    report(args, url, tally, elapsed, stuck, acknowledged, lost)
    if lost or stuck:
        raise SystemExit(1)


def report(
    args: argparse.Namespace,
    url: str,
    tally: Tally,
    elapsed: float,
    stuck: int,
    acknowledged: int,
    lost: int,
) -> None:
    backend = url.split(":", 1)[0]
    total = sum(len(v) for v in tally.latencies.values())
    every = [x for v in tally.latencies.values() for x in v]
    print(f"{args.clients} clients, {elapsed:.1f} s, {backend}: {total} requests, ", end="")
    print(f"{total / elapsed:.0f} requests/s")
    print(f"{'kind':<10} {'requests':>9} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for kind in MIX:
        values = tally.latencies.get(kind, [])
        if not values:
            continue
        print(
            f"{kind:<10} {len(values):>9} {len(values) / elapsed:>7.1f} "
            f"{percentile_ms(values, 0.50):>8.1f} {percentile_ms(values, 0.99):>8.1f} "
            f"{tally.errors.get(kind, 0):>7}"
        )
    print(
        f"{'all':<10} {total:>9} {total / elapsed:>7.1f} {percentile_ms(every, 0.50):>8.1f} "
        f"{percentile_ms(every, 0.99):>8.1f} {sum(tally.errors.values()):>7}"
    )
    for sample in tally.samples:
        print("  error:", sample)
    if stuck:
        print(f"{stuck} client(s) still blocked at the hard stop")
    print(f"acknowledged uploads: {acknowledged}, lost uploads: {lost}")


if __name__ == "__main__":
    main()
