"""Issue 6: faults lose nothing and leave nothing half-written, on SQLite and PostgreSQL.

- The server process is SIGKILLed while clients upload large files, at a moment the database
  shows one of its write transactions open (and one more upload still streaming its body):
  every upload in the database has its run and every run all its points, every acknowledged
  upload is there, and after a restart re-sending everything is safe (the acknowledged ones
  answer "already stored").
- The database goes away (PostgreSQL: a TCP proxy of this test between the app and the
  server is cut, never the shared server itself; SQLite: its directory is moved away):
  ``/readyz`` and the data endpoints answer 503 problem details with ``Retry-After``,
  ``/healthz`` still 200; when the database is back the service recovers by itself.

A migration run twice being a no-op is tests/profiles/test_migrations.py's
``test_upgrade_twice_is_a_no_op_and_keeps_data``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx
import psycopg
import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from api.settings import Settings
from profiles.parsers import parse_benchmark_text
from tests.api.conftest import AUTH, assert_problem, fixture_text, make_client
from tests.api.servers import Server, free_port
from tests.conftest import TEST_TOKEN

pytestmark = pytest.mark.slow

ROWS = 1000  # rows per generated table: 2000 points per upload, a write that takes a while
UPLOADS = 10
_BASE = fixture_text("nccl_all_reduce_8gpu.txt").split("\n")
_FIRST_ROW = next(i for i, line in enumerate(_BASE) if line.split() and line.split()[0].isdigit())


def big_upload(seed: int) -> str:
    """A distinct nccl-tests all_reduce table of ``ROWS`` sizes (8 ranks, one node)."""
    lines = [f"# fault test upload {seed}", *_BASE[:_FIRST_ROW]]
    for i in range(ROWS):
        size = 8 * (i + 1)
        t = 10.0 + size / 1e5 + seed / 1e3
        alg = size / t / 1e3
        row = f"{t:8.2f}  {alg:6.2f}  {alg * 1.75:6.2f}       0"
        lines.append(f"  {size:>12}  {size // 4:>12}     float     sum      -1  {row}  {row}")
    lines += [line for line in _BASE[_FIRST_ROW:] if line.startswith("#")]
    return "\n".join(lines) + "\n"


def sha256(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def stored_uploads(engine: Engine, profile: str) -> dict[str, list[int]]:
    """sha256 of each upload of ``profile`` -> the point count of each of its runs."""
    query = text(
        "SELECT u.sha256, r.id, (SELECT count(*) FROM points p WHERE p.run_id = r.id) "
        "FROM uploads u JOIN profiles pr ON pr.id = u.profile_id "
        "LEFT JOIN runs r ON r.upload_id = u.id WHERE pr.name = :name ORDER BY u.id, r.id"
    )
    out: dict[str, list[int]] = {}
    with engine.connect() as connection:
        for digest, run_id, points in connection.execute(query, {"name": profile}):
            out.setdefault(digest, [])
            if run_id is not None:
                out[digest].append(int(points))
    return out


def write_in_progress(db_url: str) -> bool:
    """Whether another connection holds a write transaction open right now."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        probe = sqlite3.connect(str(url.database), timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")  # refused at once while a writer holds the lock
        except sqlite3.OperationalError:
            return True
        else:
            probe.execute("ROLLBACK")
            return False
        finally:
            probe.close()
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as pg_probe:
        row = pg_probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL"  # has written
        ).fetchone()
    return row is not None and row[0] > 0


def test_sigkill_during_uploads_leaves_no_partial_upload_and_retries_are_safe(
    db_url: str, db_engine: Engine, tmp_path: Path
) -> None:
    bodies = [big_upload(seed) for seed in range(UPLOADS)]
    points = len(parse_benchmark_text(bodies[0]).runs[0].points)
    assert points == 2 * ROWS
    server = Server(db_url, tmp_path / "data", token=TEST_TOKEN).start()
    try:
        profile = {"name": "crash", "gpu_model": "H100", "gpus_per_node": 8}
        created = httpx.post(f"{server.base_url}/v1/profiles", json=profile, headers=AUTH)
        assert created.status_code == 201, created.text
        acknowledged: set[int] = set()
        unexpected: list[str] = []
        enough = threading.Event()

        def upload(indices: list[int]) -> None:
            with httpx.Client(base_url=server.base_url, headers=AUTH, timeout=60) as client:
                for i in indices:
                    try:
                        answer = client.post(
                            "/v1/profiles/crash/runs",
                            content=bodies[i],
                            headers={"Content-Type": "text/plain"},
                        )
                    except httpx.TransportError:
                        return  # the server died under us
                    if answer.status_code in (200, 201):
                        acknowledged.add(i)
                    else:
                        unexpected.append(answer.text[:300])
                    enough.set()

        # the last body is still streaming (half sent) when the process dies
        slow = bodies[-1].encode()
        streaming = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        streaming.sendall(
            b"POST /v1/profiles/crash/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TEST_TOKEN}\r\nContent-Type: text/plain\r\n".encode()
            + f"Content-Length: {len(slow)}\r\n\r\n".encode()
            + slow[: len(slow) // 2]
        )
        senders = 3  # the other bodies, round robin over three clients
        clients = [
            threading.Thread(target=upload, args=(list(range(k, UPLOADS - 1, senders)),))
            for k in range(senders)
        ]
        for thread in clients:
            thread.start()
        assert enough.wait(timeout=60), "no upload was acknowledged"
        # kill when the database shows a write transaction of the server open
        deadline = time.monotonic() + 30
        while not write_in_progress(db_url):
            assert time.monotonic() < deadline, "never saw an upload being written"
        server.kill()
        for thread in clients:
            thread.join(timeout=60)
        streaming.close()
        assert not unexpected, unexpected
        assert UPLOADS - 1 not in acknowledged

        stored = stored_uploads(db_engine, "crash")
        digests = {sha256(body): i for i, body in enumerate(bodies)}
        assert set(stored) <= set(digests)
        assert {digests[d] for d in stored} >= acknowledged, "an acknowledged upload was lost"
        for digest, runs in stored.items():
            assert runs == [points], f"upload {digests[digest]} stored partly: {runs}"

        restarted = Server(db_url, tmp_path / "data-2", token=TEST_TOKEN).start()
        try:
            with httpx.Client(base_url=restarted.base_url, headers=AUTH, timeout=60) as client:
                for i, body in enumerate(bodies):
                    again = client.post(
                        "/v1/profiles/crash/runs",
                        content=body,
                        headers={"Content-Type": "text/plain"},
                    )
                    expected = (200,) if i in acknowledged else (200, 201)
                    assert again.status_code in expected, (i, again.status_code, again.text[:200])
                runs = client.get("/v1/profiles/crash/runs").json()["runs"]
            assert len(runs) == UPLOADS
            assert all(len(run["points"]) == points for run in runs)
        finally:
            restarted.stop()
    finally:
        server.kill()


# -- the database going away ----------------------------------------------------------------


class TcpProxy:
    """A loopback TCP proxy to ``target`` that can be cut and restored on the same port.

    ``cut()`` closes the listening socket and every proxied connection (new connections are
    refused, established ones reset); ``restore()`` listens again.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for end in sockets:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


class Outage(Protocol):
    url: str

    def cut(self) -> None: ...
    def restore(self) -> None: ...
    def close(self) -> None: ...


class PostgresOutage:
    """The app reaches PostgreSQL through a proxy that this test cuts."""

    def __init__(self, db_url: str) -> None:
        url = make_url(db_url)
        self.proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
        self.proxy.restore()
        self.url = url.set(host="127.0.0.1", port=self.proxy.port).render_as_string(
            hide_password=False
        )

    def cut(self) -> None:
        self.proxy.cut()

    def restore(self) -> None:
        self.proxy.restore()

    def close(self) -> None:
        self.proxy.cut()


class SqliteOutage:
    """The app's SQLite file lives in a directory that this test moves away and back."""

    def __init__(self, root: Path) -> None:
        self.home = root / "db"
        self.away = root / "db-away"
        self.url = f"sqlite:///{self.home / 'commest.sqlite3'}"

    def cut(self) -> None:
        os.rename(self.home, self.away)

    def restore(self) -> None:
        os.rename(self.away, self.home)

    def close(self) -> None:
        if self.away.exists():
            self.restore()


@pytest.fixture
def outage(db_url: str, tmp_path: Path) -> Iterator[Outage]:
    made: Outage = SqliteOutage(tmp_path) if db_url.startswith("sqlite") else PostgresOutage(db_url)
    try:
        yield made
    finally:
        made.close()


PROFILE = {"name": "lab", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}


def _data_requests(client: Any) -> dict[str, Any]:
    return {
        "GET /v1/profiles": client.get("/v1/profiles"),
        "GET /v1/profiles/lab": client.get("/v1/profiles/lab"),
        "GET /v1/profiles/lab/runs": client.get("/v1/profiles/lab/runs"),
        "GET /v1/baselines": client.get("/v1/baselines"),
        "POST /v1/profiles": client.post(
            "/v1/profiles", json={**PROFILE, "name": "during"}, headers=AUTH
        ),
        "POST /v1/profiles/lab/runs": client.post(
            "/v1/profiles/lab/runs",
            content=fixture_text("nccl_all_gather_8gpu.txt"),
            headers={**AUTH, "Content-Type": "text/plain"},
        ),
    }


def test_database_loss_is_503_and_the_service_recovers_by_itself(
    outage: Outage, tmp_path: Path
) -> None:
    settings = Settings(
        database_url=outage.url, data_dir=tmp_path / "data", api_token=SecretStr(TEST_TOKEN)
    )
    with make_client(settings) as client:
        assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
        uploaded = client.post(
            "/v1/profiles/lab/runs",
            content=fixture_text("nccl_all_reduce_8gpu.txt"),
            headers={**AUTH, "Content-Type": "text/plain"},
        )
        assert uploaded.status_code == 201, uploaded.text
        assert client.get("/readyz").status_code == 200

        outage.cut()
        ready = client.get("/readyz")
        assert_problem(ready, 503)
        assert ready.headers["retry-after"]
        for label, answer in _data_requests(client).items():
            assert answer.status_code == 503, f"{label}: {answer.status_code} {answer.text[:200]}"
            assert_problem(answer, 503)
            assert answer.headers["retry-after"], label
        assert client.get("/healthz").status_code == 200  # the process itself is alive

        outage.restore()
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the service did not recover"
            time.sleep(0.1)
        for label, answer in _data_requests(client).items():
            assert answer.status_code in (200, 201), f"{label}: {answer.text[:200]}"
        runs = client.get("/v1/profiles/lab/runs").json()["runs"]
        assert sorted(r["collective"] for r in runs) == ["all_gather", "all_reduce"]
