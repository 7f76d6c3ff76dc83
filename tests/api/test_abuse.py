"""Issue 6: hostile callers get clean refusals, and the database stays as it was.

- Every write, enumerated from the OpenAPI schema (so a new one cannot be forgotten), answers
  401 with a ``WWW-Authenticate`` challenge to a missing, wrong or malformed credential; the
  token is compared with ``hmac.compare_digest`` and never appears in logs or answers.
- Hostile names are 422 and change nothing.
- Bodies over ``max_upload_bytes`` (declared or streamed, on any route), plans and matrices
  over their caps are refused before they are read or built.

What tests/api/test_auth.py, test_runs.py, test_matrices.py and test_plans.py already pin
(one write's 401s, the upload cap in process, too many files, the caps' 413s) is not repeated.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import select
import socket
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from api.app import create_app
from api.services import matrices, plans
from api.settings import Settings
from tests.api.conftest import (
    AUTH,
    ESTIMATE,
    assert_problem,
    fixture_text,
    make_client,
    row_counts,
)
from tests.api.servers import Server
from tests.conftest import TEST_TOKEN

WRITE_METHODS = ("post", "put", "patch", "delete")
#: POSTs that compute an answer and store nothing: reads, open to everyone.
COMPUTATIONS = {"/v1/estimates", "/v1/traffic-matrices", "/v1/plans", "/v1/checks", "/v1/timelines"}
PROFILE = {"name": "lab", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}
TEXT = fixture_text("nccl_all_reduce_8gpu.txt")


def _spec() -> dict[str, Any]:
    return create_app(Settings(database_url="sqlite://", data_dir=Path("/nonexistent"))).openapi()


SPEC = _spec()
WRITES = sorted(
    (
        (method.upper(), path)
        for path, ops in SPEC["paths"].items()
        for method in ops
        if method in WRITE_METHODS and path not in COMPUTATIONS
    ),
    key=lambda w: (w[0] == "DELETE", w),  # deletes last, so the others find what they need
)


def test_the_writes_are_every_state_changing_operation_and_declare_the_bearer_scheme() -> None:
    assert {
        ("POST", "/v1/profiles"),
        ("PATCH", "/v1/profiles/{name}"),
        ("DELETE", "/v1/profiles/{name}"),
        ("POST", "/v1/profiles/{name}/runs"),
        ("POST", "/v1/profiles/{name}/calibrations"),
        ("PUT", "/v1/baselines/{name}"),
        ("DELETE", "/v1/baselines/{name}"),
    } <= set(WRITES)
    for method, path in WRITES:
        operation = SPEC["paths"][path][method.lower()]
        assert operation.get("security"), f"{method} {path} does not declare the bearer scheme"
        assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]
    for path in COMPUTATIONS:
        assert "security" not in SPEC["paths"][path]["post"], f"{path} is a read"


def _request(method: str, path: str) -> dict[str, Any]:
    """A request that is valid in every respect but its credentials."""
    name = "base" if path.startswith("/v1/baselines") else "lab"
    url = path.replace("{name}", name)
    kwargs: dict[str, Any] = {"method": method, "url": url}
    if (method, path) == ("POST", "/v1/profiles"):
        kwargs["json"] = {**PROFILE, "name": "lab-new"}
    elif (method, path) == ("POST", "/v1/profiles/{name}/runs"):
        kwargs["content"] = TEXT
        kwargs["headers"] = {"Content-Type": "text/plain"}
    elif path == "/v1/profiles/{name}/calibrations":
        request = {k: v for k, v in ESTIMATE.items() if k != "cluster"}
        kwargs["url"] = "/v1/profiles/dgx-a100-nominal/calibrations"
        kwargs["json"] = {"runs": [{"request": request, "measured_iteration_time_s": 30.0}]}
    elif method == "PATCH":
        kwargs["json"] = {"description": "changed"}
    elif method in ("POST", "PUT"):
        kwargs["json"] = ESTIMATE  # a baseline; {} would do for a new write too (auth first)
    return kwargs


BAD_CREDENTIALS: dict[str, str | bytes | None] = {
    "missing": None,
    "wrong token": "Bearer not-the-token",
    "token prefix": f"Bearer {TEST_TOKEN[:-1]}",
    "token plus a byte": f"Bearer {TEST_TOKEN}x",
    "bare scheme": "Bearer",
    "other scheme": "Basic dXNlcjpwdw==",
    "two spaces and two words": "Bearer  a b",
    "non-ASCII": "Bearer tökén-ünïcode".encode(),
    "token without scheme": TEST_TOKEN,
    "scheme in lower case, wrong token": "bearer nope",
}


@pytest.fixture
def lab(client: TestClient) -> TestClient:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    assert client.put("/v1/baselines/base", json=ESTIMATE, headers=AUTH).status_code == 201
    return client


def test_every_write_refuses_missing_wrong_and_malformed_credentials(
    lab: TestClient, db_engine: Engine
) -> None:
    before = row_counts(db_engine)
    for method, path in WRITES:
        for label, credential in BAD_CREDENTIALS.items():
            kwargs = _request(method, path)
            headers = dict(kwargs.pop("headers", {}))
            if credential is not None:
                headers["Authorization"] = credential
            response = lab.request(**kwargs, headers=headers)
            where = f"{method} {path} with {label}"
            assert response.status_code == 401, f"{where}: {response.status_code}"
            assert_problem(response, 401)
            assert response.headers["www-authenticate"].startswith("Bearer"), where
    assert row_counts(db_engine) == before
    # the same requests with the token are not refused for their credentials
    for method, path in WRITES:
        kwargs = _request(method, path)
        headers = {**kwargs.pop("headers", {}), **AUTH}
        response = lab.request(**kwargs, headers=headers)
        assert response.status_code != 401 and response.status_code < 500, (
            f"{method} {path}: {response.status_code} {response.text[:300]}"
        )


def test_the_token_is_compared_with_hmac_compare_digest(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(given: bytes, expected: bytes) -> bool:
        calls.append((given, expected))
        return real(given, expected)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # the module api.tokens calls
    wrong = client.post("/v1/profiles", json=PROFILE, headers={"Authorization": "Bearer x"})
    assert wrong.status_code == 401
    assert calls == [(b"x", TEST_TOKEN.encode())]  # different lengths: still compare_digest
    right = client.post("/v1/profiles", json=PROFILE, headers=AUTH)
    assert right.status_code == 201
    assert calls[1:] == [(TEST_TOKEN.encode(), TEST_TOKEN.encode())]


def test_the_token_never_appears_in_logs_or_answers(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    token = "tok-" + secrets.token_hex(16)
    secret = settings.model_copy(update={"api_token": SecretStr(token)})
    caplog.set_level(logging.DEBUG)
    answers = []
    with make_client(secret) as client:
        good = {"Authorization": f"Bearer {token}"}
        for credential in (
            f"Bearer {token}x",
            f"Bearer {token[:-1]}",
            f"Basic {token}",
            token,
            f"Bearer {token} {token}",
        ):
            answers.append(
                client.post("/v1/profiles", json=PROFILE, headers={"Authorization": credential})
            )
        answers += [
            client.post("/v1/profiles", json=PROFILE, headers=good),
            client.post("/v1/profiles", json=PROFILE, headers=good),  # 409
            client.post("/v1/profiles", json={"name": "../x"}, headers=good),  # 422
            client.patch("/v1/profiles/nope", json={}, headers=good),  # 404
            client.post("/v1/profiles/lab/runs", content="garbage\n", headers=good),  # 422
            client.post("/v1/estimates", content=b"{", headers=good),  # 422
        ]
    statuses = [a.status_code for a in answers]
    assert statuses == [401] * 5 + [201, 409, 422, 404, 422, 422]
    assert caplog.records, "nothing was logged: the capture would prove nothing"
    assert token not in caplog.text
    for answer in answers:
        assert token not in answer.text
        assert all(token not in value for value in answer.headers.values())


HOSTILE_NAMES = ["../x", "a;DROP TABLE profiles", "x" * 65, "ñame", "名前", " lab", "lab\n", "a/b"]


def test_hostile_names_are_422_and_change_nothing(lab: TestClient, db_engine: Engine) -> None:
    before = row_counts(db_engine)
    for name in [*HOSTILE_NAMES, ""]:
        created = lab.post("/v1/profiles", json={**PROFILE, "name": name}, headers=AUTH)
        assert_problem(created, 422, field="name")
        renamed = lab.patch("/v1/profiles/lab", json={"name": name}, headers=AUTH)
        assert_problem(renamed, 422, field="name")
        if not name:
            continue
        baseline = lab.put(f"/v1/baselines/{quote(name, safe='')}", json=ESTIMATE, headers=AUTH)
        # a decoded "/" leaves the route (404); every other name reaches the pattern (422)
        assert_problem(baseline, 404 if "/" in name else 422)
    assert row_counts(db_engine) == before
    assert [p["name"] for p in lab.get("/v1/profiles").json()["profiles"]] == [
        "dgx-a100-nominal",
        "dgx-h100-nominal",
        "lab",
    ]
    # the longest legal name is accepted: the 65-character refusal is the rule, not a bug
    longest = lab.post("/v1/profiles", json={**PROFILE, "name": "x" * 64}, headers=AUTH)
    assert longest.status_code == 201, longest.text


# -- sizes and caps ---------------------------------------------------------------------------


def _capped(settings: Settings, **caps: int) -> Settings:
    return settings.model_copy(update=caps)


def test_a_json_body_over_the_cap_is_413_before_it_is_parsed(settings: Settings) -> None:
    padded = json.dumps(ESTIMATE) + " " * 8192  # valid JSON, 200 if it were read

    def chunks() -> Iterator[bytes]:
        data = padded.encode()
        for i in range(0, len(data), 1024):
            yield data[i : i + 1024]

    as_json = {"Content-Type": "application/json"}
    with make_client(_capped(settings, max_upload_bytes=4096)) as client:
        unpadded = client.post("/v1/estimates", content=json.dumps(ESTIMATE), headers=as_json)
        assert unpadded.status_code == 200
        declared = client.post("/v1/estimates", content=padded, headers=as_json)
        body = assert_problem(declared, 413)
        assert "4096" in body["detail"]
        streamed = client.post("/v1/estimates", content=chunks(), headers=as_json)
        assert_problem(streamed, 413)
        assert "content-length" not in {k.lower() for k in streamed.request.headers}
        # a write too: the cap holds before the token is even looked at
        written = client.put("/v1/baselines/b", content=padded, headers={**as_json, **AUTH})
        assert_problem(written, 413)


def test_a_plan_over_the_cap_is_413_without_building_its_layouts(settings: Settings) -> None:
    # layers = heads = batch = GPUs = 720720: ~88 million candidates, 1.2 million valid
    n = 720720
    plan = {
        "model": {
            "num_layers": n,
            "hidden_size": n,
            "num_attention_heads": n,
            "seq_length": 2048,
            "vocab_size": 51200,
        },
        "training": {"global_batch_size": n},
        "cluster": {"profile": "dgx-a100-nominal"},
        "gpus": n,
        "micro_batch_sizes": list(range(1, 9)),
    }
    with make_client(_capped(settings, max_plan_layouts=1_000_000)) as client:
        tracemalloc.start()
        try:
            response = client.post("/v1/plans", json=plan)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    body = assert_problem(response, 413)
    assert "1,203,978 valid layouts" in body["detail"]
    assert peak < 100e6, f"{peak / 1e6:.0f} MB traced (the candidate grid would be ~5 GB)"


def test_a_plan_over_the_cap_across_precisions_is_refused_before_any_evaluation(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one pass per precision: the first pass (under the cap alone) was evaluated in full,
    # seconds of CPU, before the second one took the count over the cap and answered 413
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("layouts were evaluated although the plan is over the cap")

    plan = {
        "model": {"preset": "gpt3-1.3b"},
        "training": {"global_batch_size": 512},
        "cluster": {"profile": "dgx-h100-nominal"},
        "gpus": 64,
    }
    with make_client(_capped(settings, max_plan_layouts=2_000_000)) as client:
        one = client.post("/v1/plans", json=plan).json()["evaluated"]
    with make_client(_capped(settings, max_plan_layouts=one + 1)) as client:
        monkeypatch.setattr(plans, "evaluate_layouts", no_work)
        two = {**plan, "precision": ["bf16", "fp8"]}  # 2 passes: 2·one > one + 1
        body = assert_problem(client.post("/v1/plans", json=two), 413)
    assert f"{2 * one:,} valid layouts" in body["detail"]


def test_matrices_over_their_caps_are_refused_before_any_estimate(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the matrix was computed although it is over the cap")

    small = {
        "model": {"preset": "gpt3-1.3b"},
        "layout": {"pipeline": 1, "tensor": 8, "data": 4},
        "training": {"global_batch_size": 32},
        "cluster": {"profile": "dgx-a100-nominal"},
    }
    with make_client(_capped(settings, max_matrix_gpus=16, max_dense_gpus=8)) as client:
        monkeypatch.setattr(matrices, "estimate", no_work)
        monkeypatch.setattr(matrices, "prepare", no_work)
        assert_problem(client.post("/v1/traffic-matrices", json=small), 413)
        within = {**small, "layout": {"pipeline": 1, "tensor": 8, "data": 2}, "format": "png"}
        assert_problem(client.post("/v1/traffic-matrices", json=within), 413)  # dense cap


# -- the real server ------------------------------------------------------------------------

CAP = 1 << 20


@pytest.fixture(scope="module")
def capped_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real server with a 1 MiB body cap over its own SQLite file."""
    root = tmp_path_factory.mktemp("capped")
    server = Server(
        f"sqlite:///{root / 'commest.sqlite3'}",
        root / "data",
        token="abuse-token",
        env={"COMMEST_MAX_UPLOAD_BYTES": str(CAP)},
    )
    with server:
        yield server


def _head(server: Server, path: str, extra: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {server.token}\r\n{extra}\r\n"
    ).encode()


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/estimates", "/v1/profiles/dgx-a100-nominal/runs"])
def test_the_server_answers_413_to_a_huge_content_length_without_waiting_for_it(
    capped_server: Server, path: str
) -> None:
    head = _head(capped_server, path, f"Content-Type: text/plain\r\nContent-Length: {10 << 30}\r\n")
    with socket.create_connection(("127.0.0.1", capped_server.port), timeout=30) as sock:
        sock.sendall(head + b"x" * 1024)  # 10 GiB announced, 1 KiB sent
        reply = sock.recv(65536)
    assert _status(reply) == 413, reply[:300]
    assert b"application/problem+json" in reply


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/estimates", "/v1/profiles/dgx-a100-nominal/runs"])
def test_the_server_stops_a_chunked_body_at_the_cap(capped_server: Server, path: str) -> None:
    head = _head(capped_server, path, "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n")
    chunk = b"y" * 65536
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
    limit = 64 * CAP  # what a server reading to the end would be sent
    sent, reply = 0, b""
    with socket.create_connection(("127.0.0.1", capped_server.port), timeout=30) as sock:
        sock.sendall(head)
        while sent < limit and not reply:
            try:
                sock.sendall(frame)
            except (BrokenPipeError, ConnectionResetError):
                break  # the server answered and closed: read what it said
            sent += len(chunk)
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                reply = sock.recv(65536)
        if not reply:
            sock.settimeout(30)
            reply = sock.recv(65536)
    assert reply, f"no answer after {sent} bytes"
    assert _status(reply) == 413, reply[:300]
    assert sent < limit, "the server read the whole body before answering"
