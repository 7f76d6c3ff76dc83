"""POST/GET/DELETE /v1/profiles/{name}/training-logs, and calibrations on stored runs.

The logs are real published ones (tests/profiles/fixtures/training_logs/README.md): a
Megatron-LM GPT-2 345M run (TP 2 × PP 2, fp16) and a Megatron-DeepSpeed Llama run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from tests.api.conftest import AUTH, assert_problem

LOGS = Path(__file__).resolve().parents[1] / "profiles" / "fixtures" / "training_logs"
GPT2 = (LOGS / "megatron_lm_gpt2_345m_tp2_pp2.txt").read_text(encoding="utf-8")
LLAMA = (LOGS / "megatron_deepspeed_llama_tp2_pp2.txt").read_text(encoding="utf-8")
PROFILE = "dgx-a100-nominal"  # an A100 profile with nominal bandwidth curves
URL = f"/v1/profiles/{PROFILE}/training-logs"
TEXT = {**AUTH, "content-type": "text/plain"}


def _upload(client: TestClient, body: str, **params: Any) -> Any:
    return client.post(URL, content=body.encode(), headers=TEXT, params=params)


def _measured_runs(db_engine: Engine) -> int:
    with db_engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM measured_runs")).scalar_one())


def test_a_real_megatron_log_calibrates_the_profile_end_to_end(client: TestClient) -> None:
    response = _upload(client, GPT2, label="gpt2 345m tp2 pp2", gpus_per_node=8)
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["format"] == "megatron-lm"
    assert run["iteration_time_s"] == pytest.approx(1.0826, abs=1e-12)  # median of 3 intervals
    assert run["iterations_used"] == [200, 1000, 2000]
    assert run["dropped"] == [
        {"iteration": 100, "reason": "warm-up"},
        {"iteration": 1100, "reason": "evaluation"},
    ]
    assert run["request"]["layout"]["tensor"] == 2 and run["request"]["layout"]["pipeline"] == 2
    assert run["request"]["model"]["vocab_size"] == 50432
    assert run["hints"] == {"gpus_per_node": 8}
    assert run["missing"] == []
    assert run["already_stored"] is False and run["label"] == "gpt2 345m tp2 pp2"

    # A 345M model on 8 A100s fits u ~ 0.06, outside the plausible range: apply alone is
    # refused, naming the value, the range and how to force it, and changes nothing.
    before = client.get(f"/v1/profiles/{PROFILE}").json()["utilization"]
    refused = client.post(
        f"/v1/profiles/{PROFILE}/calibrations",
        json={"use_stored_runs": True, "apply": True},
        headers=AUTH,
    )
    problem = assert_problem(refused, 422, field="utilization")
    assert problem["value"] < 0.15 and problem["plausible_utilization"] == [0.15, 0.95]
    assert '"force": true' in problem["detail"] and "--force" in problem["detail"]
    assert client.get(f"/v1/profiles/{PROFILE}").json()["utilization"] == before
    assert client.get(f"/v1/profiles/{PROFILE}/calibrations").json() == []

    calibrated = client.post(
        f"/v1/profiles/{PROFILE}/calibrations",
        json={"use_stored_runs": True, "apply": True, "force": True},
        headers=AUTH,
    )
    assert calibrated.status_code == 201, calibrated.text
    fit = calibrated.json()
    assert 0.0 < fit["utilization"] < 0.15 and fit["applied"] is True
    assert len(fit["warnings"]) == 1 and "plausible range [0.15, 0.95]" in fit["warnings"][0]
    assert fit["residuals"][0]["label"] == f"run {run['id']}: gpt2 345m tp2 pp2"
    assert fit["residuals"][0]["measured_s"] == pytest.approx(1.0826)
    # The same closed form as measurements given in the body.
    given = client.post(
        f"/v1/profiles/{PROFILE}/calibrations",
        json={"runs": [{"request": run["request"], "measured_iteration_time_s": 1.0826}]},
        headers=AUTH,
    )
    assert given.json()["utilization"] == pytest.approx(fit["utilization"], rel=1e-12)
    profile = client.get(f"/v1/profiles/{PROFILE}").json()
    assert profile["utilization"] == pytest.approx(fit["utilization"])
    # The estimate of the logged run at the fitted u gives back the measured time.
    estimate = client.post(
        "/v1/estimates", json={**run["request"], "cluster": {"profile": PROFILE}}
    )
    assert estimate.json()["iteration_time_s"] == pytest.approx(1.0826, rel=1e-9)


def test_the_same_run_pasted_differently_is_stored_once(client: TestClient) -> None:
    first = _upload(client, GPT2).json()
    decorated = "```\r\n" + "\r\n".join("[default0]:" + line for line in GPT2.split("\n"))
    again = _upload(client, decorated + "\r\n```\r\n")
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first["id"] and again.json()["already_stored"] is True


def test_multipart_upload_keeps_the_file_name_and_refuses_two_files(client: TestClient) -> None:
    response = client.post(
        URL, files={"file": ("llama-run.log", LLAMA.encode(), "text/plain")}, headers=AUTH
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["file_name"] == "llama-run.log"
    assert body["format"] == "megatron-deepspeed"
    assert body["iteration_time_s"] == pytest.approx(1.2103)
    two = client.post(
        URL,
        files=[("file", ("a.log", b"x", "text/plain")), ("file", ("b.log", b"y", "text/plain"))],
        headers=AUTH,
    )
    # was a 413 "more than 1 files (COMMEST_MAX_UPLOAD_FILES)", a setting that is 32
    problem = assert_problem(two, 422, field="files")
    assert "one file per request" in problem["detail"]
    assert "COMMEST_MAX_UPLOAD_FILES" not in problem["detail"]


def test_list_pages_get_and_delete(client: TestClient) -> None:
    a = _upload(client, GPT2).json()["id"]
    b = _upload(client, LLAMA).json()["id"]
    page = client.get(URL, params={"offset": 1, "limit": 1}).json()
    assert page["count"] == 2 and [r["id"] for r in page["runs"]] == [b]
    assert client.get(f"{URL}/{a}").json()["iterations_used"] == [200, 1000, 2000]
    assert client.delete(f"{URL}/{a}").status_code == 401  # token required
    assert client.delete(f"{URL}/{a}", headers=AUTH).status_code == 204
    assert_problem(client.get(f"{URL}/{a}"), 404)
    assert client.get(URL).json()["count"] == 1


def test_a_log_lacking_a_field_is_a_422_naming_the_query_parameter(
    client: TestClient, db_engine: Engine
) -> None:
    cut = GPT2.replace("padded vocab", "padded vocabulary")
    body = assert_problem(_upload(client, cut), 422, field="model.vocab_size")
    assert body["missing"] == [
        {"field": "model.vocab_size", "query_parameter": "vocab_size", "what": "vocabulary"}
    ]
    assert _measured_runs(db_engine) == 0
    fixed = _upload(client, cut, vocab_size=50257)
    assert fixed.status_code == 201, fixed.text
    assert fixed.json()["request"]["model"]["vocab_size"] == 50432


def test_bad_uploads_are_problems(client: TestClient, db_engine: Engine) -> None:
    no_args = "\n".join(line for line in GPT2.split("\n") if "..." not in line)
    body = assert_problem(_upload(client, no_args.replace("arguments ---", "args ---")), 422)
    assert "no arguments block" in body["detail"] and body["lines"]
    assert "expected a Megatron-LM log" in assert_problem(_upload(client, "hello"), 422)["detail"]
    assert_problem(_upload(client, GPT2, precision="fp12"), 422)
    assert_problem(_upload(client, GPT2, tensor=0), 422)
    assert_problem(
        client.post(URL, content=GPT2.encode(), headers={"content-type": "text/plain"}), 401
    )
    assert_problem(
        client.post("/v1/profiles/nope/training-logs", content=GPT2.encode(), headers=TEXT), 404
    )
    assert_problem(client.get(URL, params={"limit": 0}), 422)
    assert _measured_runs(db_engine) == 0


def test_calibration_request_on_stored_runs_is_checked(client: TestClient) -> None:
    calibrations = f"/v1/profiles/{PROFILE}/calibrations"
    none_stored = client.post(calibrations, json={"use_stored_runs": True}, headers=AUTH)
    assert "training-logs" in assert_problem(none_stored, 422)["detail"]
    assert_problem(client.post(calibrations, json={}, headers=AUTH), 422)
    both = {"use_stored_runs": True, "stored_run_ids": [1]}
    assert_problem(client.post(calibrations, json=both, headers=AUTH), 422)
    run_id = _upload(client, LLAMA).json()["id"]
    assert_problem(
        client.post(calibrations, json={"stored_run_ids": [run_id + 1]}, headers=AUTH), 404
    )
    named = client.post(calibrations, json={"stored_run_ids": [run_id]}, headers=AUTH)
    assert named.status_code == 201, named.text
    assert named.json()["residuals"][0]["measured_s"] == pytest.approx(1.2103)


def test_an_unreadable_log_has_its_own_problem_type_and_title(client: TestClient) -> None:
    body = assert_problem(_upload(client, "hello"), 422)
    assert body["title"] == "Unreadable training log"
    assert body["type"] == "urn:commest:problem:training-log-parse"
    # benchmark output keeps its own problem (type and title unchanged)
    runs = client.post(f"/v1/profiles/{PROFILE}/runs", content=b"hello", headers=TEXT)
    bench = assert_problem(runs, 422)
    assert bench["title"] == "Unreadable benchmark output"
    assert bench["type"] == "urn:commest:problem:parse"
