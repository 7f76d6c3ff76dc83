"""POST /v1/timelines: the schedule of one iteration as JSON, PNG or SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from fastapi.testclient import TestClient

from api.plots import PNG_SIGNATURE
from tests.api.conftest import SCALAR_C, assert_problem, request

SMALL = request(
    SCALAR_C,
    model={"preset": "gpt3-1.3b"},
    layout={"pipeline": 4, "tensor": 2, "data": 4},
    training={"global_batch_size": 32},
    fidelity="detailed",
)
KINDS = {"forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "optimizer", "idle"}


def test_json_timeline_agrees_with_the_estimate(client: TestClient) -> None:
    response = client.post("/v1/timelines", json=SMALL)
    assert response.status_code == 200, response.text
    body = response.json()
    estimate = client.post("/v1/estimates", json=SMALL).json()
    assert body["schedule"] == "1f1b" and body["pipeline_stages"] == 4
    assert body["microbatches"] == estimate["micro_batches"] == 8
    assert body["virtual_stages"] == 1 and body["truncated"] is False
    assert body["iteration_time_s"] == pytest.approx(estimate["iteration_time_s"], rel=1e-12)
    assert body["bubble_ratio"] == pytest.approx(estimate["ratios"]["bubble"], rel=1e-9)
    assert body["makespan_s"] == pytest.approx(body["engine_pipeline_s"], rel=1e-9)
    events = body["events"]
    assert events and {e["kind"] for e in events} <= KINDS
    assert set(events[0]) == {
        "stage",
        "kind",
        "microbatch",
        "chunk",
        "start_s",
        "end_s",
        "after_gap",
    }
    assert {e["stage"] for e in events} == {0, 1, 2, 3}
    assert {e["microbatch"] for e in events if e["kind"] == "forward"} == set(range(8))
    assert max(e["end_s"] for e in events) == pytest.approx(body["iteration_time_s"], rel=1e-9)
    assert any("1F1B" in line for line in body["assumptions"])


def test_interleaved_and_elided(client: TestClient) -> None:
    body = request(
        SMALL,
        layout={"virtual_stages": 2},
        training={"global_batch_size": 4096},
        max_microbatches_shown=8,
    )
    response = client.post("/v1/timelines", json=body)
    assert response.status_code == 200, response.text
    tl = response.json()
    assert tl["schedule"] == "interleaved" and tl["virtual_stages"] == 2
    assert tl["truncated"] is True and tl["microbatches"] == 1024
    assert tl["elided_microbatches"] == 1024 - 8
    shown = {e["microbatch"] for e in tl["events"] if e["microbatch"] is not None}
    # the first 8 and the last 8 (a micro-batch may show its forward and not its backward)
    assert 0 in shown and 1023 in shown
    assert shown <= set(range(8)) | set(range(1016, 1024))
    assert {e["chunk"] for e in tl["events"] if e["kind"] == "forward"} == {0, 1}
    p, v, m = 4, 2, 1024
    ideal = tl["makespan_s"] - tl["bubble_s"]
    assert tl["bubble_s"] / ideal == pytest.approx((p - 1) / (v * m), rel=0.05)


@pytest.mark.parametrize(("fmt", "media"), [("png", "image/png"), ("svg", "image/svg+xml")])
def test_pictures(client: TestClient, fmt: str, media: str) -> None:
    response = client.post("/v1/timelines", json={**SMALL, "format": fmt})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(media)
    if fmt == "png":
        assert response.content.startswith(PNG_SIGNATURE)
        assert len(response.content) > 5000
    else:
        root = ET.fromstring(response.content)
        assert root.tag.endswith("svg")
        assert b"stage 3" in response.content and b"forward" in response.content


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"format": "gif"}, "format"),
        ({"max_microbatches_shown": 0}, "max_microbatches_shown"),
        ({"max_microbatches_shown": 65}, "max_microbatches_shown"),
        ({"layout": {"pipeline": 5, "tensor": 2, "data": 4}}, None),
    ],
)
def test_bad_requests_are_problems(
    client: TestClient, change: dict[str, object], field: str | None
) -> None:
    assert_problem(client.post("/v1/timelines", json=request(SMALL, **change)), 422, field=field)


def test_layout_beyond_the_schedule_cap_is_413(client: TestClient) -> None:
    body = request(
        SCALAR_C,
        layout={"pipeline": 96, "tensor": 1, "data": 1},
        training={"global_batch_size": 4096},
    )
    problem = assert_problem(client.post("/v1/timelines", json=body), 413)
    assert "pipeline=96" in problem["detail"]


def test_the_picture_title_gives_the_iteration_in_a_readable_unit(client: TestClient) -> None:
    # a 25 s iteration was titled "iteration 2.508e+04 ms"
    big = request(SCALAR_C, fidelity="detailed")  # GPT-3 175B on 1536 GPUs
    seconds = client.post("/v1/estimates", json=big).json()["iteration_time_s"]
    assert seconds > 10
    svg = client.post("/v1/timelines", json={**big, "format": "svg"})
    assert svg.status_code == 200, svg.text
    assert f"iteration {seconds:.4g} s," in svg.text
    assert "e+0" not in svg.text.split("iteration ", 1)[1].split(",", 1)[0]
