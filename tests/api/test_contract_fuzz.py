"""Issue 6: the app keeps its own OpenAPI contract under fuzzing, on SQLite and PostgreSQL.

Every operation of ``/openapi.json`` is driven by schemathesis (v4, in-process over ASGI):
first with hand-written valid requests (so each success answer is checked too, not only the
rejections random data mostly earns), then with generated data that fits the schema
(positive) and data that breaks it (negative), ``EXAMPLES_PER_MODE`` of each, derandomised
so CI is repeatable. Writes carry the bearer token, so the write paths are reached. Every
answer must be below 500, have a declared status code and content type, match the declared
schema (problem details for errors) and carry the headers it declares.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis.errors import Unsatisfiable

from api.app import create_app
from api.schemas import EXAMPLE_ESTIMATE, EXAMPLE_FRAMEWORK
from api.settings import Settings
from tests.api.conftest import AUTH, fixture_text

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

pytestmark = pytest.mark.slow

EXAMPLES_PER_MODE = 10
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]

SMALL: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "layout": {"pipeline": 1, "tensor": 8, "data": 1},
    "training": {"global_batch_size": 8, "micro_batch_size": 1},
    "cluster": {"profile": "lab"},
}
PROFILE: dict[str, Any] = {
    "name": "lab",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "peak_tflops": 989,
    "utilization": 0.5,
    "gpu_memory_gb": 80,
}
AR_8 = fixture_text("nccl_all_reduce_8gpu.txt")
AG_8 = fixture_text("nccl_all_gather_8gpu.txt")
CALIBRATION = {
    "runs": [
        {
            "request": {k: v for k, v in SMALL.items() if k != "cluster"},
            "measured_iteration_time_s": 0.5,
        }
    ]
}
PROFILE_RUN = {"path_parameters": {"name": "lab"}}
UPLOAD = {"name": "lab"}  # the seed's upload is the profile's first: id 1
GPT2_LOG = fixture_text("training_logs/megatron_lm_gpt2_345m_tp2_pp2.txt")
LLAMA_LOG = fixture_text("training_logs/megatron_deepspeed_llama_tp2_pp2.txt")
MEASURED_RUN = {"path_parameters": {"name": "lab", "run_id": 1}}

#: Valid requests per operation (``Case`` keyword arguments). The seed (see ``_seed``) has
#: made profile ``lab`` (with one all_reduce upload) and baseline ``base``.
VALID: dict[str, list[dict[str, Any]]] = {
    "GET /healthz": [{}],
    "GET /readyz": [{}],
    "POST /v1/estimates": [
        {"body": EXAMPLE_ESTIMATE},
        {"body": SMALL},
        {"body": EXAMPLE_FRAMEWORK},
    ],
    "POST /v1/traffic-matrices": [
        {"body": {**SMALL, "format": fmt, "level": level}}
        for fmt, level in [("json", "gpu"), ("csv", "gpu"), ("png", "node")]
    ],
    "POST /v1/timelines": [
        {"body": {**SMALL, "format": "json"}},
        {"body": {**SMALL, "layout": {"pipeline": 2, "tensor": 4, "data": 1}, "format": "svg"}},
        {"body": {**SMALL, "max_microbatches_shown": 2, "format": "png"}},
    ],
    "POST /v1/plans": [
        {
            "body": {
                "model": {"preset": "gpt3-1.3b"},
                "training": {"global_batch_size": 64},
                "cluster": {"profile": "dgx-a100-nominal"},
                "gpus": 16,
                "top_k": 3,
            }
        }
    ],
    "POST /v1/checks": [
        {"body": {**SMALL, "max_iteration_time_s": 100.0}},
        {"body": {**SMALL, "baseline": "base"}},
    ],
    "PUT /v1/baselines/{name}": [
        {"path_parameters": {"name": "new-base"}, "body": SMALL},
        {"path_parameters": {"name": "base"}, "body": {"request": SMALL, "iteration_time_s": 9}},
    ],
    "GET /v1/baselines/{name}": [{"path_parameters": {"name": "base"}}],
    "DELETE /v1/baselines/{name}": [{"path_parameters": {"name": "base"}}],
    "GET /v1/baselines": [{}],
    "POST /v1/profiles": [{"body": {**PROFILE, "name": "lab-2"}}],
    "GET /v1/profiles": [{}, {"query": {"offset": 1, "limit": 1}}],
    "GET /v1/profiles/{name}": [PROFILE_RUN],
    "PATCH /v1/profiles/{name}": [{**PROFILE_RUN, "body": {"description": "patched"}}],
    "DELETE /v1/profiles/{name}": [PROFILE_RUN],
    "POST /v1/profiles/{name}/runs": [
        {**PROFILE_RUN, "body": AG_8, "media_type": "text/plain"},  # new: 201
        {**PROFILE_RUN, "body": AR_8, "media_type": "text/plain"},  # already stored: 200
    ],
    "GET /v1/profiles/{name}/runs": [PROFILE_RUN, {**PROFILE_RUN, "query": {"points": False}}],
    "GET /v1/profiles/{name}/bandwidth": [
        {**PROFILE_RUN, "query": {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": 1 << 20}}
    ],
    "GET /v1/profiles/{name}/curves": [PROFILE_RUN, {**PROFILE_RUN, "query": {"format": "png"}}],
    "GET /v1/profiles/{name}/tuning-table": [
        {**PROFILE_RUN, "query": {"op": "all_reduce", "ranks": 8}}
    ],
    "GET /v1/profiles/{name}/uploads": [PROFILE_RUN, {**PROFILE_RUN, "query": {"limit": 1}}],
    "PATCH /v1/profiles/{name}/uploads/{upload_id}": [
        {"path_parameters": {**UPLOAD, "upload_id": 1}, "body": {"disabled": True}},
        {"path_parameters": {**UPLOAD, "upload_id": 1}, "body": {"disabled": False}},
    ],
    "DELETE /v1/profiles/{name}/uploads/{upload_id}": [
        {"path_parameters": {**UPLOAD, "upload_id": 1}}
    ],
    "POST /v1/profiles/{name}/calibrations": [{**PROFILE_RUN, "body": CALIBRATION}],
    "GET /v1/profiles/{name}/calibrations": [PROFILE_RUN],
    "POST /v1/profiles/{name}/training-logs": [
        {**PROFILE_RUN, "body": LLAMA_LOG, "media_type": "text/plain"},  # new: 201
        {**PROFILE_RUN, "body": GPT2_LOG, "media_type": "text/plain"},  # already stored: 200
    ],
    "GET /v1/profiles/{name}/training-logs": [
        PROFILE_RUN,
        {**PROFILE_RUN, "query": {"offset": 0, "limit": 1}},
    ],
    "GET /v1/profiles/{name}/training-logs/{run_id}": [MEASURED_RUN],
    "DELETE /v1/profiles/{name}/training-logs/{run_id}": [MEASURED_RUN],
    "GET /v1/presets/models": [{}],
    "GET /v1/presets/gpus": [{}],
    "GET /v1/presets/frameworks": [{}],
    "GET /v1/validation": [
        {},
        {"query": {"model": ["qwen3-30b-a3b"], "kind": ["fp8"], "sort": "error"}},
    ],
}


def _spec() -> dict[str, Any]:
    # The schema needs no database: build it from an app that is never started.
    app = create_app(Settings(database_url="sqlite://", data_dir=Path("/nonexistent")))
    return app.openapi()


def _labels(spec: dict[str, Any]) -> list[str]:
    methods = {"get", "put", "post", "patch", "delete"}
    return [
        f"{method.upper()} {path}"
        for path, operations in spec["paths"].items()
        for method in operations
        if method in methods
    ]


OPERATIONS = _labels(_spec())


def test_every_operation_has_valid_requests_here() -> None:
    assert sorted(OPERATIONS) == sorted(VALID), "add valid requests for new operations to VALID"


def _seed(schema: Any) -> None:
    steps: list[tuple[str, dict[str, Any], int]] = [
        ("POST /v1/profiles", {"body": PROFILE}, 201),
        (
            "POST /v1/profiles/{name}/runs",
            {**PROFILE_RUN, "body": AR_8, "media_type": "text/plain"},
            201,
        ),
        ("PUT /v1/baselines/{name}", {"path_parameters": {"name": "base"}, "body": SMALL}, 201),
        (
            "POST /v1/profiles/{name}/training-logs",
            {**PROFILE_RUN, "body": GPT2_LOG, "media_type": "text/plain"},
            201,
        ),
    ]
    for label, kwargs, status in steps:
        method, path = label.split(" ", 1)
        response = schema[path][method].Case(**kwargs).call(headers=AUTH)
        assert response.status_code == status, response.text


@pytest.mark.parametrize("label", OPERATIONS)
def test_operation_keeps_its_contract_under_fuzzing(settings: Settings, label: str) -> None:
    app = create_app(settings)
    try:
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        method, path = label.split(" ", 1)
        _seed(schema)
        api_operation = schema[path][method]
        for kwargs in VALID[label]:
            case = api_operation.Case(**kwargs)
            response = case.call(headers=AUTH)
            assert response.status_code < 300, (label, kwargs, response.text[:500])
            case.validate_response(response, checks=CHECKS)
        calls = [0]
        for mode in GenerationMode:
            strategy = api_operation.as_strategy(generation_mode=mode)

            @hypothesis.settings(
                max_examples=EXAMPLES_PER_MODE,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def fuzz(case: Any) -> None:
                calls[0] += 1
                case.call_and_validate(headers=AUTH, checks=CHECKS)

            try:
                fuzz()
            except Unsatisfiable:
                # nothing in the operation can be made invalid (no parameters, no body)
                assert mode is GenerationMode.NEGATIVE
        assert calls[0] >= 1
    finally:
        app.state.runtime.close()
