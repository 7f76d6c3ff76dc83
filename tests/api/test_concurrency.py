"""Issue 6: 32 clients at once against the real server, nothing lost, nothing doubled.

A uvicorn subprocess serves the app on a free loopback port over the test database (SQLite and
PostgreSQL: the guarantees are the same; PostgreSQL is where writers truly run in parallel).
32 threads, each with its own connection, wait at a barrier and send together:

- distinct files into one profile: every one is stored, with every point (read back over GET);
- the same file: stored once; every client gets 200 or 201 saying whether it was already
  stored, and exactly one was told it was new;
- the same new profile name: exactly one 201, the other 31 get 409 problem details.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from profiles.parsers import parse_benchmark_text
from tests.api.conftest import fixture_text
from tests.api.servers import Server

pytestmark = pytest.mark.slow

CLIENTS = 32
TEXT = fixture_text("nccl_all_reduce_8gpu.txt")
PROFILE = {"gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}


@pytest.fixture(scope="module")
def server(migrated_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per database for the module (each test uses its own profile names)."""
    with Server(migrated_db_url, tmp_path_factory.mktemp("data"), token="conc-token") as running:
        yield running


def all_at_once(server: Server, send: Callable[[httpx.Client, int], httpx.Response]) -> list[Any]:
    """``send(client, i)`` from CLIENTS threads released together; the responses in order."""
    barrier = threading.Barrier(CLIENTS)

    def one(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.base_url, headers=server.auth, timeout=60) as client:
            client.get("/healthz")  # connect before the barrier: the requests race, not TCP
            barrier.wait(timeout=60)
            return send(client, i)

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        return list(pool.map(one, range(CLIENTS)))


def create_profile(server: Server, name: str) -> None:
    response = httpx.post(
        f"{server.base_url}/v1/profiles", json={**PROFILE, "name": name}, headers=server.auth
    )
    assert response.status_code == 201, response.text


def stored_runs(server: Server, name: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.base_url}/v1/profiles/{name}/runs", timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == len(body["runs"])
    runs: list[dict[str, Any]] = body["runs"]
    return runs


def distinct_text(i: int) -> str:
    """TEXT with client i's own measurement: the first row's time + i·0.01 us.

    Uploads are the same when their parsed runs are (issue 10), so distinct files must differ
    in a number, not only in a comment.
    """
    lines = TEXT.split("\n")
    row = next(n for n, line in enumerate(lines) if line.strip()[:1].isdigit())
    tokens = lines[row].split()
    tokens[5] = f"{float(tokens[5]) + i * 0.01:.2f}"
    lines[row] = "  ".join(tokens)
    return f"# upload from client {i}\n" + "\n".join(lines)


def test_distinct_files_from_32_clients_are_all_stored_with_every_point(server: Server) -> None:
    create_profile(server, "conc-distinct")
    texts = [distinct_text(i) for i in range(CLIENTS)]
    points = len(parse_benchmark_text(TEXT).runs[0].points)
    answers = all_at_once(
        server,
        lambda client, i: client.post(
            "/v1/profiles/conc-distinct/runs",
            content=texts[i],
            headers={"Content-Type": "text/plain"},
        ),
    )
    assert [a.status_code for a in answers] == [201] * CLIENTS, [a.text[:200] for a in answers]
    acknowledged = {a.json()["runs"][0]["id"] for a in answers}
    assert all(a.json()["runs"][0]["already_stored"] is False for a in answers)
    runs = stored_runs(server, "conc-distinct")
    assert {r["id"] for r in runs} == acknowledged and len(acknowledged) == CLIENTS
    assert len({r["upload_id"] for r in runs}) == CLIENTS
    assert [len(r["points"]) for r in runs] == [points] * CLIENTS


def test_one_file_from_32_clients_is_stored_once_and_each_is_told_so(server: Server) -> None:
    create_profile(server, "conc-same")
    answers = all_at_once(
        server,
        lambda client, i: client.post(
            "/v1/profiles/conc-same/runs", content=TEXT, headers={"Content-Type": "text/plain"}
        ),
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * (CLIENTS - 1) + [201], [a.text[:200] for a in answers]
    runs = [a.json()["runs"] for a in answers]
    assert all(len(r) == 1 for r in runs)
    told_new = [r[0] for r in runs if r[0]["already_stored"] is False]
    assert len(told_new) == 1
    for answer, run in zip(answers, runs, strict=True):
        assert run[0]["already_stored"] is (answer.status_code == 200)
    assert {r[0]["id"] for r in runs} == {told_new[0]["id"]}
    stored = stored_runs(server, "conc-same")
    assert [r["id"] for r in stored] == [told_new[0]["id"]]
    assert len(stored[0]["points"]) == len(parse_benchmark_text(TEXT).runs[0].points)


def test_one_new_profile_name_from_32_clients_is_one_201_and_31_conflicts(
    server: Server,
) -> None:
    answers = all_at_once(
        server,
        lambda client, i: client.post(
            "/v1/profiles", json={**PROFILE, "name": "conc-name", "description": f"client {i}"}
        ),
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] + [409] * (CLIENTS - 1), [a.text[:200] for a in answers]
    for answer in answers:
        if answer.status_code == 409:
            assert answer.headers["content-type"].startswith("application/problem+json")
    winner = next(a.json() for a in answers if a.status_code == 201)
    stored = httpx.get(f"{server.base_url}/v1/profiles/conc-name").json()
    assert stored["description"] == winner["description"]
    listed = httpx.get(f"{server.base_url}/v1/profiles", params={"limit": 1000}).json()
    assert [p["name"] for p in listed["profiles"]].count("conc-name") == 1


def test_the_module_server_runs_on_the_database_under_test(server: Server) -> None:
    ready = httpx.get(f"{server.base_url}/readyz").json()
    expected = "sqlite" if server.db_url.startswith("sqlite") else "postgresql"
    assert ready == {"status": "ready", "database": expected}
