"""api.caches: providers keyed by a revision that never repeats, snapshots kept until a commit.

Through the API on SQLite and PostgreSQL: reads invalidate nothing, every committed write is
seen by the next request, and (issue 10) a profile deleted and created again with half the
bandwidth answers with the new numbers, although SQLite gives it and its runs the old ids.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event

from api.caches import (
    MemoBandwidth,
    ProfileSnapshot,
    ProfileSource,
    ProviderCache,
    SnapshotCache,
)
from api.settings import Settings
from estimator.bandwidth import Collective, TrafficKind
from profiles import repository
from profiles.bandwidth import ProfileBandwidth
from profiles.nominal import nominal_bandwidth
from tests.api.conftest import AUTH, fixture_text, make_client

PROFILE = {"name": "lab", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}
TEXT_HEADERS = {**AUTH, "Content-Type": "text/plain"}
TEXT = fixture_text("nccl_all_reduce_8gpu.txt")
WAIT_S = 60.0  # a guard against hanging forever, not a timing assertion
BIGGEST = {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": 134217728}
FIXTURE_BUSBW_GBPS = 610.35  # nccl_all_reduce_8gpu.txt, 128 MiB row, out-of-place busbw
ESTIMATE_ON_LAB: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "layout": {"pipeline": 1, "tensor": 8, "data": 1},
    "training": {"global_batch_size": 8},
    "cluster": {"profile": "lab", "utilization": 0.5},
}

_ROW = re.compile(r"^(\s+\d+\s+\d+\s+\w+\s+\w+\s+-?\d+)\s+(.*)$")


def half_bandwidth(text: str) -> str:
    """The nccl-tests text with every time doubled and every bandwidth halved."""
    out = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if match is None:
            out.append(line)
            continue
        fields = match.group(2).split()
        for half in (0, 4):  # time algbw busbw #wrong, out-of-place then in-place
            fields[half] = f"{float(fields[half]) * 2:.2f}"
            fields[half + 1] = f"{float(fields[half + 1]) / 2:.3f}"
            fields[half + 2] = f"{float(fields[half + 2]) / 2:.3f}"
        out.append(match.group(1) + "  " + "  ".join(f"{f:>7}" for f in fields))
    return "\n".join(out) + "\n"


def busbw_gbps(client: TestClient, name: str = "lab") -> float:
    response = client.get(f"/v1/profiles/{name}/bandwidth", params=BIGGEST)
    assert response.status_code == 200, response.text
    value: float = response.json()["busbw_gbps"]
    return value


def tp_busbw_gbps(client: TestClient) -> float:
    response = client.post("/v1/estimates", json=ESTIMATE_ON_LAB)
    assert response.status_code == 200, response.text
    tp = [c for c in response.json()["collectives"] if c["kind"] == "tp"]
    assert tp
    value: float = tp[0]["busbw_gbps"]
    return value


def upload(client: TestClient, text: str) -> list[int]:
    response = client.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS)
    assert response.status_code == 201, response.text
    return [run["id"] for run in response.json()["runs"]]


# --- the caches themselves --------------------------------------------------------------------


def test_memo_bandwidth_agrees_with_the_provider_it_wraps() -> None:
    provider = nominal_bandwidth("dgx-h100-nominal")
    memo = MemoBandwidth(provider)
    query = (TrafficKind.DP, Collective.ALL_REDUCE, 64, 8, 3.5e8)
    for _ in range(2):  # miss, then hit
        assert memo.busbw_gbps(*query) == provider.busbw_gbps(*query)
        assert memo.explain(*query) == provider.explain(*query)
    sizes = np.array([1e3, 1e6, 1e9])
    ranks, nodes = np.full(3, 16.0), np.full(3, 2.0)
    arrays = memo.busbw_gbps(TrafficKind.TP, Collective.ALL_GATHER, ranks, nodes, sizes)
    expected = provider.busbw_gbps(TrafficKind.TP, Collective.ALL_GATHER, ranks, nodes, sizes)
    np.testing.assert_array_equal(arrays, expected)


def _snapshot(name: str) -> ProfileSnapshot:
    return ProfileSnapshot(
        name=name,
        gpus_per_node=8,
        peak_tflops=None,
        peak_tflops_by_dtype={},
        gpu_memory_bytes=None,
        utilization=None,
        utilization_source=None,
        nominal=False,
        bandwidth=MemoBandwidth(ProfileBandwidth(name, [], ())),
    )


class Commits:
    """A ChangeSignal the test moves by hand: one counter of commits."""

    round_trip = False

    def __init__(self) -> None:
        self.count = 0

    def token(self, name: str) -> Hashable:
        return self.count

    async def token_async(self, name: str) -> Hashable:
        return self.count

    def close(self) -> None:
        pass


def test_a_snapshot_is_served_until_the_next_commit_and_never_after() -> None:
    commits = Commits()
    cache = SnapshotCache(commits)
    snapshot = _snapshot("p")
    cache.put("p", snapshot, token=cache.token("p"))
    assert cache.get("p") is snapshot
    assert cache.get("p") is snapshot  # reads change nothing
    commits.count += 1  # a commit, by this process or any other
    assert cache.get("p") is None


def test_a_snapshot_read_while_a_commit_lands_is_not_kept_as_fresh() -> None:
    commits = Commits()
    cache = SnapshotCache(commits)
    seen_before_the_read = cache.token("p")
    commits.count += 1  # a write commits while the read is in flight
    cache.put("p", _snapshot("p"), token=seen_before_the_read)
    assert cache.get("p") is None


class FarCommits(Commits):
    """Commits behind a round trip: each question is counted, and ``during`` runs while the
    answer travels (after the question left, before the answer is read)."""

    round_trip = True

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0
        self.during: Callable[[], None] = lambda: None

    async def token_async(self, name: str) -> Hashable:
        self.asked += 1
        asked_at = self.count  # the question reaches the database now
        await asyncio.sleep(0)
        self.during()
        return asked_at


def _source(signal: Commits) -> tuple[ProfileSource, SnapshotCache]:
    snapshots = SnapshotCache(signal)

    def no_reads() -> Any:
        raise AssertionError("answered from the snapshot at hand, never through the pool")

    return ProfileSource(scope=no_reads, cache=ProviderCache(), snapshots=snapshots), snapshots


@pytest.mark.parametrize("far", [False, True], ids=["local-signal", "round-trip-signal"])
def test_an_answer_from_the_snapshot_at_hand_is_kept_only_while_nothing_was_committed(
    far: bool,
) -> None:
    signal = FarCommits() if far else Commits()
    source, snapshots = _source(signal)
    held = _snapshot("p")
    snapshots.put("p", held, token=snapshots.token("p"))
    worked_on: list[ProfileSnapshot] = []

    def work(snapshot: ProfileSnapshot) -> str:
        worked_on.append(snapshot)
        return "priced"

    assert asyncio.run(source.answer("p", work)) == "priced"
    assert worked_on == [held]
    signal.count += 1  # a commit since the snapshot was read
    worked_on.clear()
    assert asyncio.run(source.answer("p", work)) is None
    # the local signal is asked first; over a round trip the work ran meanwhile, then dropped
    assert worked_on == ([held] if far else [])


def test_work_done_while_a_commit_lands_is_dropped_and_its_error_too() -> None:
    signal = FarCommits()
    source, snapshots = _source(signal)
    snapshots.put("p", _snapshot("p"), token=snapshots.token("p"))

    def commit() -> None:
        signal.count += 1  # lands after the question was answered: the answer still counts

    signal.during = commit
    assert asyncio.run(source.answer("p", lambda s: s.name)) == "p"

    def refused(_snapshot: ProfileSnapshot) -> str:
        raise ValueError("refused on this snapshot")

    snapshots.put("p", _snapshot("p"), token=snapshots.token("p"))
    with pytest.raises(ValueError, match="refused on this snapshot"):
        asyncio.run(source.answer("p", refused))  # current: the error is the answer
    signal.count += 1  # stale now: neither the result nor the error is kept
    assert asyncio.run(source.answer("p", refused)) is None


def test_work_stopped_by_a_base_exception_leaves_no_question_pending() -> None:
    class Stop(BaseException):
        pass

    signal = FarCommits()
    source, snapshots = _source(signal)
    snapshots.put("p", _snapshot("p"), token=snapshots.token("p"))
    left: list[asyncio.Task[Any]] = []

    def stopped(_snapshot: ProfileSnapshot) -> str:
        left.extend(t for t in asyncio.all_tasks() if t is not asyncio.current_task())
        raise Stop

    async def run() -> None:
        with pytest.raises(Stop):
            await source.answer("p", stopped)
        assert left and all(t.cancelling() or t.cancelled() or t.done() for t in left)
        await asyncio.sleep(0)
        assert all(t.done() for t in left)  # the question was cancelled, not left running

    asyncio.run(run())


def test_no_snapshot_at_hand_asks_nothing() -> None:
    signal = FarCommits()
    source, _snapshots = _source(signal)
    assert asyncio.run(source.answer("p", lambda s: s.name)) is None
    assert signal.asked == 0  # the caller reads through the pool, which asks for itself


def test_provider_cache_drops_the_least_recently_used_key() -> None:
    cache = ProviderCache(size=2)
    first, second, third = (MemoBandwidth(ProfileBandwidth(n, [], ())) for n in "abc")
    cache.put((1, "r1"), first)
    cache.put((2, "r2"), second)
    assert cache.get((1, "r1")) is first  # now the most recently used
    cache.put((3, "r3"), third)
    assert cache.get((2, "r2")) is None
    assert cache.get((1, "r1")) is first and cache.get((3, "r3")) is third
    assert cache.get((1, "another revision")) is None


def test_concurrent_misses_of_one_key_build_the_provider_once() -> None:
    cache = ProviderCache()
    started, release = threading.Event(), threading.Event()
    builds: list[MemoBandwidth] = []

    def build() -> MemoBandwidth:
        started.set()
        assert release.wait(WAIT_S)
        builds.append(MemoBandwidth(ProfileBandwidth("p", [], ())))
        return builds[-1]

    with ThreadPoolExecutor(max_workers=8) as pool:
        first = pool.submit(cache.get_or_build, (1, "r1"), build)
        assert started.wait(WAIT_S)  # one build is under way; seven more requests miss
        others = [pool.submit(cache.get_or_build, (1, "r1"), build) for _ in range(7)]
        release.set()
        got = [first.result(WAIT_S)] + [f.result(WAIT_S) for f in others]
    assert len(builds) == 1 and all(g is builds[0] for g in got)
    assert cache.get((1, "r1")) is builds[0]


def test_a_failed_build_is_not_cached_and_the_next_miss_builds_again() -> None:
    cache = ProviderCache()

    def fail() -> MemoBandwidth:
        raise RuntimeError("database went away")

    with pytest.raises(RuntimeError, match="went away"):
        cache.get_or_build((1, "r1"), fail)
    provider = MemoBandwidth(ProfileBandwidth("p", [], ()))
    assert cache.get_or_build((1, "r1"), lambda: provider) is provider


# --- through the API, on SQLite and PostgreSQL ------------------------------------------------


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the profiles whose bandwidth provider was built (cache misses)."""
    names: list[str] = []
    load_bandwidth = repository.load_bandwidth

    def counted(**kwargs: Any) -> ProfileBandwidth:
        names.append(kwargs["profile_name"])
        return load_bandwidth(**kwargs)

    monkeypatch.setattr(repository, "load_bandwidth", counted)
    return names


def test_reads_invalidate_nothing_and_a_committed_write_does(
    client: TestClient, loads: list[str]
) -> None:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    upload(client, TEXT)
    first = busbw_gbps(client)
    assert loads == ["lab"]
    for _ in range(3):  # every kind of read, and the provider is never built again
        assert client.get("/v1/profiles/lab").status_code == 200
        assert client.get("/v1/profiles").status_code == 200
        assert client.get("/v1/profiles/lab/runs").status_code == 200
        assert client.get("/v1/profiles/lab/calibrations").status_code == 200
        assert client.get("/v1/baselines").status_code == 200
        assert busbw_gbps(client) == first
        tp_busbw_gbps(client)
    assert loads == ["lab"]
    upload(client, half_bandwidth(TEXT))  # a second run of the same placement
    busbw_gbps(client)
    assert loads == ["lab", "lab"]


def test_a_hot_estimate_reads_nothing_through_the_pool_even_after_other_reads(
    client: TestClient,
) -> None:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    upload(client, TEXT)
    statements: list[str] = []
    assert isinstance(client.app, FastAPI)
    engine = client.app.state.runtime.engine

    def record(*args: Any) -> None:
        statements.append(args[2])

    tp_busbw_gbps(client)  # warm: snapshot and provider cached
    event.listen(engine, "before_cursor_execute", record)
    try:
        for _ in range(3):
            assert client.get("/v1/profiles/lab").status_code == 200
            assert client.get("/v1/profiles/lab/runs").status_code == 200
            before = len(statements)
            tp_busbw_gbps(client)
            assert statements[before:] == []
        upload(client, half_bandwidth(TEXT))
        before = len(statements)
        tp_busbw_gbps(client)
        assert statements[before:]  # a commit: the snapshot is read again
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_failed_write_keeps_the_cached_provider(client: TestClient, loads: list[str]) -> None:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    upload(client, TEXT)
    busbw_gbps(client)
    refused = client.post(
        "/v1/profiles/lab/runs",
        files=[("files", ("ok.txt", half_bandwidth(TEXT))), ("files", ("bad.txt", "noise"))],
        headers=AUTH,
    )
    assert refused.status_code == 422, refused.text  # the good file was rolled back with it
    assert busbw_gbps(client) == pytest.approx(FIXTURE_BUSBW_GBPS)
    assert loads == ["lab"]


def test_a_profile_deleted_and_created_again_answers_with_its_new_runs(
    client: TestClient, db_url: str
) -> None:
    """Issue 10: on SQLite the old cache key (profile id, newest run id, run count) repeated."""
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    old_runs = upload(client, TEXT)
    assert busbw_gbps(client) == pytest.approx(FIXTURE_BUSBW_GBPS)
    old_tp = tp_busbw_gbps(client)

    assert client.delete("/v1/profiles/lab", headers=AUTH).status_code == 204
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    new_runs = upload(client, half_bandwidth(TEXT))
    if db_url.startswith("sqlite"):
        assert new_runs == old_runs  # the ids came back: the situation of the report

    assert busbw_gbps(client) == pytest.approx(FIXTURE_BUSBW_GBPS / 2, rel=1e-3)
    assert tp_busbw_gbps(client) == pytest.approx(old_tp / 2, rel=0.05)


def test_every_committed_write_to_a_profile_is_seen_by_the_next_request(
    client: TestClient,
) -> None:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    upload(client, TEXT)
    full = busbw_gbps(client)
    runs = client.get("/v1/profiles/lab/runs").json()["runs"]
    estimate = {**ESTIMATE_ON_LAB, "cluster": {"profile": "lab"}}

    patched = client.patch("/v1/profiles/lab", json={"utilization": 0.25}, headers=AUTH)
    assert patched.status_code == 200, patched.text
    answer = client.post("/v1/estimates", json=estimate).json()
    assert answer["cluster"]["utilization"] == pytest.approx(0.25)

    slower = client.patch("/v1/profiles/lab", json={"peak_tflops": 500}, headers=AUTH)
    assert slower.status_code == 200, slower.text
    answer = client.post("/v1/estimates", json=estimate).json()
    assert answer["cluster"]["peak_tflops"] == pytest.approx(500)

    assert client.delete("/v1/profiles/lab", headers=AUTH).status_code == 204
    gone = client.get("/v1/profiles/lab/bandwidth", params=BIGGEST)
    assert gone.status_code == 404
    assert client.post("/v1/estimates", json=estimate).status_code == 404
    assert full == pytest.approx(FIXTURE_BUSBW_GBPS) and runs


def test_a_write_through_another_app_is_seen_by_the_next_request(app_settings: Settings) -> None:
    """Two apps (two runtimes, as in two workers) over one database: no TTL window."""
    estimate = {**ESTIMATE_ON_LAB, "cluster": {"profile": "dgx-a100-nominal"}}
    with make_client(app_settings) as first, make_client(app_settings) as second:
        for utilization in (0.3, 0.4):
            first.post("/v1/estimates", json=estimate)  # cached in the first app
            patched = second.patch(
                "/v1/profiles/dgx-a100-nominal", json={"utilization": utilization}, headers=AUTH
            )
            assert patched.status_code == 200, patched.text
            answer = first.post("/v1/estimates", json=estimate).json()
            assert answer["cluster"]["utilization"] == pytest.approx(utilization)
