"""Bandwidth provider speed, and read cost as a profile grows from 10 runs to 5,000.

Run: ``python bench/bench_bandwidth.py`` (add ``--runs 5000`` to change the large profile).

1. Lookups: a million vectorised busbw queries over a few dozen placements (a layout sweep),
   scalar queries (what a single estimate asks), fresh and repeated, and ``explain``.
2. Read scaling (issue 10 §4): two profiles in a temporary SQLite file, one with 10 runs and
   one with 5,000 (100 runs at each of 50 placements: 5 collectives × 5 placements × 2
   backends, 8 B .. 8 GiB each). For each, the /bandwidth-equivalent read after a write (a
   fresh provider from the database, then one answer) and warm (one new answer from a built
   provider), and a profile-backed GPT-3 175B estimate with a fresh provider; then the same
   through the app (``GET .../bandwidth`` and ``POST /v1/estimates``, warm and each after a
   ``PATCH`` of the profile, which renews its revision), and the first page of
   ``GET .../runs``. Target: the 5,000-run profile within 2x of the 10-run one.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from estimator import ClusterSpec, LayoutSpec, ModelSpec, Scenario, TrainingSpec, estimate
from estimator.bandwidth import Collective, TrafficKind
from profiles import repository as repo
from profiles.db import make_engine, session_factory, transaction, upgrade_database
from profiles.nominal import nominal_bandwidth
from profiles.parsed import ParsedPoint, ParsedRun
from profiles.uploads import prepare_parsed

N = 1_000_000
ARRAY_TARGET_S = 1.0
SCALING_TARGET = 2.0
SIZES = [float(2**e) for e in range(3, 34)]
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
PLACEMENTS = ((8, 1), (16, 2), (32, 4), (64, 8), (128, 16))
BACKENDS = ("nccl", "mpi")
GPT3 = ModelSpec(
    num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200
)
TRAINING = TrainingSpec(global_batch_size=1536)
LAYOUT = LayoutSpec(pipeline=8, tensor=8, data=24)


def paired(
    small: Callable[[], object], large: Callable[[], object], repeat: int = 15, number: int = 1
) -> tuple[float, float]:
    """Median seconds per call of each, measured in alternating rounds (so load drifts cancel)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in ((small, times[0]), (large, times[1])):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    return statistics.median(times[0]), statistics.median(times[1])


def best_of(fn: Callable[[], object], repeat: int = 7, number: int = 1) -> float:
    """Median seconds of ``number`` calls of ``fn`` over ``repeat`` rounds, per call."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


# --- 1. lookups -----------------------------------------------------------------------------


def bench_lookups() -> None:
    provider = nominal_bandwidth("dgx-h100-nominal")
    rng = np.random.default_rng(0)
    gpus = 8
    tp = rng.choice([1, 2, 4, 8], size=N)
    dp_nodes = rng.choice([1, 2, 4, 8, 16, 32, 64, 128], size=N)
    ranks = (dp_nodes * gpus // np.minimum(tp, gpus)).astype(np.float64)
    nodes = dp_nodes.astype(np.float64)
    sizes = np.exp(rng.uniform(np.log(8.0), np.log(64 * 2**30), size=N))
    distinct = len(set(zip(ranks.tolist(), nodes.tolist(), strict=True)))
    dp, ar = TrafficKind.DP, Collective.ALL_REDUCE

    provider.busbw_gbps(dp, ar, ranks[:10], nodes[:10], sizes[:10])
    array_s = best_of(lambda: provider.busbw_gbps(dp, ar, ranks, nodes, sizes), repeat=5)
    print(f"{N:,} vectorised lookups over {distinct} placements: {array_s:.3f} s")
    print(
        f"  {array_s / N * 1e9:.0f} ns per lookup; {ARRAY_TARGET_S / array_s:.1f}x under the "
        f"{ARRAY_TARGET_S:g} s target"
    )
    one = best_of(lambda: provider.busbw_gbps(TrafficKind.TP, ar, 8.0, 1.0, sizes), repeat=3)
    print(f"{N:,} lookups at one placement: {one:.3f} s")

    fresh = iter(np.geomspace(1.0, 2.0**40, 2_000_000).tolist())
    scalar_new = best_of(lambda: provider.busbw_gbps(dp, ar, 64, 8, next(fresh)), number=20_000)
    scalar_memo = best_of(lambda: provider.busbw_gbps(dp, ar, 64, 8, 2.0**20), number=20_000)
    explain_new = best_of(lambda: provider.explain(dp, ar, 64, 8, next(fresh)), number=5_000)
    explain_memo = best_of(lambda: provider.explain(dp, ar, 64, 8, 2.0**20), number=20_000)
    print(
        f"scalar busbw_gbps: {scalar_new * 1e6:.2f} µs (new size), "
        f"{scalar_memo * 1e6:.2f} µs (repeated); explain: {explain_new * 1e6:.2f} µs (new), "
        f"{explain_memo * 1e6:.2f} µs (repeated)"
    )


def print_rows(title: str, rows: list[tuple[str, float, float]], large: int) -> None:
    """A table of (label, seconds at 10 runs, seconds at ``large`` runs) with the ratios."""
    print(f"{title:58} {'10 runs':>10} {f'{large:,} runs':>12} {'ratio':>7}  target")
    for label, small, big in rows:
        ratio = big / small
        verdict = "ok" if ratio <= SCALING_TARGET else "OVER"
        print(
            f"{label:58} {small * 1e3:8.3f} ms {big * 1e3:10.3f} ms {ratio:6.2f}x  "
            f"<= {SCALING_TARGET:g}x {verdict}"
        )


# --- 2. read scaling ------------------------------------------------------------------------


def _run(op: str, ranks: int, nodes: int, backend: str, jitter: float) -> ParsedRun:
    """A synthetic nccl-tests run: T = α + S/β with α, β set by placement and backend."""
    alpha = (12.0 if nodes == 1 else 25.0) * (1.4 if backend == "mpi" else 1.0) * jitter
    beta = (220.0 if nodes == 1 else 22.0 * ranks / nodes) / (1.3 if backend == "mpi" else 1.0)
    points = []
    for size in SIZES:
        t = alpha + size / (beta * 1e3)
        algbw = size / (t * 1e3)
        for in_place in (False, True):
            points.append(ParsedPoint(int(size), None, t, algbw, algbw, in_place))
    return ParsedRun(
        collective=op,
        tool="nccl-tests",
        backend=backend,
        ranks=ranks,
        nodes=nodes,
        ranks_per_node=ranks // nodes,
        gpu_model="NVIDIA H100 80GB HBM3",
        dtype="float",
        redop="sum",
        tool_version="2.17.6",
        points=points,
    )


def _fill(factory: sessionmaker[Session], name: str, runs: int, per_upload: int = 100) -> float:
    """Create profile ``name`` with ``runs`` runs over the placements; seconds it took."""
    groups = [(o, r, k, b) for o in OPS for r, k in PLACEMENTS for b in BACKENDS]
    rng = np.random.default_rng(len(name))
    all_runs = [
        _run(*groups[i % len(groups)], jitter=float(rng.uniform(0.9, 1.1))) for i in range(runs)
    ]
    start = time.perf_counter()
    with transaction(factory) as session:
        repo.create_profile(
            session=session,
            name=name,
            gpu_model="H100",
            gpus_per_node=8,
            peak_tflops=989.0,
            utilization=0.5,
        )
    for first in range(0, runs, per_upload):
        chunk = all_runs[first : first + per_upload]
        prepared = prepare_parsed(text=f"# {name} upload {first}\n", runs=chunk)
        with transaction(factory) as session:
            repo.store_upload(session=session, profile_name=name, prepared=prepared)
    return time.perf_counter() - start


def bench_scaling(large: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        upgrade_database(url)
        engine = make_engine(url)
        factory = session_factory(engine)
        built = {"small": _fill(factory, "small", 10), "large": _fill(factory, "large", large)}
        print(
            f"profiles built: 10 runs in {built['small']:.1f} s, {large:,} runs in "
            f"{built['large']:.1f} s"
        )
        dp, ar = TrafficKind.DP, Collective.ALL_REDUCE
        fresh = iter(np.geomspace(9.0, 2.0**33, 1_000_000).tolist())

        def cold(name: str) -> Callable[[], object]:
            def read() -> object:
                with factory() as session:
                    provider = repo.load_bandwidth(
                        session=session, profile_name=name, with_runs=False
                    )
                return provider.explain(dp, ar, 64, 8, 2.0**20)

            return read

        def estimate_cold(name: str) -> Callable[[], object]:
            def run() -> object:
                with factory() as session:
                    provider = repo.load_bandwidth(
                        session=session, profile_name=name, with_runs=False
                    )
                cluster = ClusterSpec(
                    gpus_per_node=8, peak_flops=989e12, utilization=0.5, bandwidth=provider
                )
                return estimate(Scenario(GPT3, TRAINING, LAYOUT, cluster))

            return run

        rows = []
        for label, make in (
            ("/bandwidth after a write (fresh provider + 1 answer)", cold),
            ("estimate after a write (fresh provider, GPT-3 175B)", estimate_cold),
        ):
            small, big = paired(make("small"), make("large"), repeat=21)
            rows.append((label, small, big))
        with factory() as session:
            warm = {
                n: repo.load_bandwidth(session=session, profile_name=n, with_runs=False)
                for n in ("small", "large")
            }
        for n in warm:
            warm[n].explain(dp, ar, 64, 8, 2.0**20)
        small, big = paired(
            lambda: warm["small"].explain(dp, ar, 64, 8, next(fresh)),
            lambda: warm["large"].explain(dp, ar, 64, 8, next(fresh)),
            repeat=21,
            number=500,
        )
        rows.append(("/bandwidth warm (built provider, a new size)", small, big))
        print_rows("in process", rows, large)
        extra = prepare_parsed(
            text="# one more upload\n",
            runs=[
                _run(o, r, k, "nccl", 1.05 + i * 1e-3)
                for i, (o, r, k, _) in enumerate(
                    [(o, r, k, b) for o in OPS for r, k in PLACEMENTS for b in BACKENDS][:100]
                )
            ],
        )
        start = time.perf_counter()
        with transaction(factory) as session:
            repo.store_upload(session=session, profile_name="large", prepared=extra)
        write_s = time.perf_counter() - start
        print(
            f"write: one 50-run upload into the {large:,}-run profile took {write_s * 1e3:.0f} ms"
        )
        engine.dispose()
        bench_api(url, Path(tmp), large)


def bench_api(url: str, tmp: Path, large: int) -> None:
    """The same through the app (in process, caches on): warm, and after a write."""
    import warnings

    from pydantic import SecretStr

    with warnings.catch_warnings():  # this Starlette would rather its TestClient used httpx2
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from api.app import create_app
    from api.settings import Settings

    settings = Settings(database_url=url, data_dir=tmp / "data", api_token=SecretStr("bench"))
    auth = {"Authorization": "Bearer bench"}
    query = {"op": "all_reduce", "ranks": 64, "nodes": 8, "bytes": 1 << 20}
    request = {
        "model": {"preset": "gpt3-175b"},
        "layout": {"pipeline": 8, "tensor": 8, "data": 24},
        "training": {"global_batch_size": 1536},
    }
    with TestClient(create_app(settings)) as client:
        count = iter(range(1_000_000))

        def write(name: str) -> None:
            body = {"description": f"write {next(count)}"}
            assert client.patch(f"/v1/profiles/{name}", json=body, headers=auth).is_success

        def get_bandwidth(name: str, after_write: bool) -> Callable[[], object]:
            def call() -> object:
                if after_write:
                    write(name)
                return client.get(f"/v1/profiles/{name}/bandwidth", params=query)

            return call

        def post_estimate(name: str, after_write: bool) -> Callable[[], object]:
            body = {**request, "cluster": {"profile": name}}

            def call() -> object:
                if after_write:
                    write(name)
                response = client.post("/v1/estimates", json=body)
                assert response.status_code == 200, response.text
                return response

            return call

        makers: list[tuple[str, Callable[[str], Callable[[], object]]]] = [
            ("GET .../bandwidth, warm", lambda n: get_bandwidth(n, False)),
            ("GET .../bandwidth after a write (PATCH + GET)", lambda n: get_bandwidth(n, True)),
            ("POST /v1/estimates, warm", lambda n: post_estimate(n, False)),
            ("POST /v1/estimates after a write (PATCH + POST)", lambda n: post_estimate(n, True)),
        ]
        rows = []
        for label, make in makers:
            small, big = paired(make("small"), make("large"), repeat=21, number=5)
            rows.append((label, small, big))
        print_rows("through the app (TestClient)", rows, large)
        start = time.perf_counter()
        page = client.get("/v1/profiles/large/runs")
        elapsed = time.perf_counter() - start
        body = page.json()
        print(
            f"GET .../runs of the {large:,}-run profile: {elapsed * 1e3:.0f} ms, "
            f"{len(page.content) / 1e6:.2f} MB for a page of {body['count']} runs with points "
            f"(total {body['total']:,}; next_offset {body['next_offset']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000, help="runs of the large profile")
    args = parser.parse_args()
    bench_lookups()
    bench_scaling(args.runs)


if __name__ == "__main__":
    main()
