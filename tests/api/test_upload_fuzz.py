"""Issue 6: hostile benchmark text through the whole upload path, not only the parser.

tests/profiles/test_parsers.py and test_parser_abuse.py pin the parser itself (truncated,
duplicated, reordered lines, corrupted numbers, binary garbage, 50 MB of noise, NaN/inf and
negative times, absurd sizes). What they cannot see is what happens to the numbers the parser
keeps: stored, fitted, interpolated, serialised. Here mutated texts are uploaded through the
API and everything read back from them must be a clean answer (never a 5xx, never a
non-finite number in JSON); plus the two extremes the parser tests leave out: fields
thousands of digits long, and noise on one line with no newline at all.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estimator.errors import ParseError
from profiles.parsers import parse_benchmark_text
from tests.api.conftest import AUTH, fixture_text

FIXTURES = ["nccl_all_reduce_8gpu.txt", "nccl_all_gather_8gpu.txt", "osu_allreduce.txt"]
EXTREMES = ["1e308", "1e-300", "nan", "inf", "-1", "0", "9" * 400, "-0", "1e309", "4.9e-324"]
PROFILE = {"name": "fuzz", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}


def _mutate(text: str, data: st.DataObject) -> str:
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if line.split() and line.split()[0].isdigit()]
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        if not rows:
            break
        i = data.draw(st.sampled_from(rows), label="row")
        kind = data.draw(st.sampled_from(["number", "duplicate", "swap", "truncate"]))
        tokens = lines[i].split()
        if kind == "number" and tokens:
            k = data.draw(st.integers(0, len(tokens) - 1), label="column")
            tokens[k] = data.draw(st.sampled_from(EXTREMES), label="value")
            lines[i] = "  ".join(tokens)
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = data.draw(st.sampled_from(rows), label="other row")
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])), label="cut")]
    return "\n".join(lines)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


@pytest.fixture
def fuzz_lab(client: TestClient) -> TestClient:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    return client


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.sampled_from(FIXTURES), data=st.data())
def test_mutated_uploads_are_stored_or_refused_and_read_back_cleanly(
    fuzz_lab: TestClient, name: str, data: st.DataObject
) -> None:
    text = _mutate(fixture_text(name), data)
    uploaded = fuzz_lab.post(
        "/v1/profiles/fuzz/runs",
        content=text,
        params={"ranks": 8, "nodes": 1},
        headers={**AUTH, "Content-Type": "text/plain"},
    )
    assert uploaded.status_code in (200, 201, 422), uploaded.text[:300]
    if uploaded.status_code == 422:
        assert uploaded.headers["content-type"].startswith("application/problem+json")
        return
    reads = [
        fuzz_lab.get("/v1/profiles/fuzz/runs"),
        fuzz_lab.get("/v1/profiles/fuzz/curves"),
        fuzz_lab.get("/v1/profiles/fuzz/tuning-table", params={"op": "all_reduce", "ranks": 8}),
    ]
    for size in (1, 1 << 20, 1e12):
        reads.append(
            fuzz_lab.get(
                "/v1/profiles/fuzz/bandwidth",
                params={"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": size},
            )
        )
    for read in reads:
        assert read.status_code in (200, 404, 422), (read.url, read.text[:300])
        assert _finite(read.json()), (read.url, read.text[:300])
    for run in reads[0].json()["runs"]:
        for point in run["points"]:
            assert point["size_bytes"] > 0 and point["time_us"] > 0


def _row(size: str, time_us: str) -> str:
    return f"  {size}  256  float  sum  -1  {time_us}  1.00  1.75  0  {time_us}  1.00  1.75  0"


HEAD = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"


@pytest.mark.parametrize(
    ("size", "time_us"),
    [
        pytest.param("9" * 4000, "5.00", id="size of 4000 digits"),  # Python's int cap: 4300
        pytest.param("1" + "0" * 3000, "5.00", id="size 10^3000"),
        pytest.param("2048", "9" * 2000, id="time of 2000 digits"),  # overflows float: inf
        pytest.param("2048", "1e308", id="time 1e308 us"),  # finite, but x1e3 overflows
        pytest.param("2048", "0." + "0" * 1990 + "1", id="time underflowing to 0"),
    ],
)
def test_fields_thousands_of_digits_long_or_absurd_are_dropped_rows(
    size: str, time_us: str
) -> None:
    text = "\n".join([HEAD, _row("1024", "5.00"), _row(size, time_us), _row("4096", "7.00")])
    assert max(len(line) for line in text.split("\n")) <= 4096  # read, not skipped as noise
    result = parse_benchmark_text(text)
    run = result.runs[0]
    assert {p.size_bytes for p in run.points} == {1024, 4096}
    assert any("dropped values" in w and "line 3" in w for w in run.warnings)


def test_twenty_megabytes_of_noise_on_one_line_raise_parse_error() -> None:
    noise = "1.5 nan 8 float sum -1 " * (20 * 1024 * 1024 // 24)  # numbers, no newline at all
    assert len(noise) >= 20_000_000 and "\n" not in noise
    with pytest.raises(ParseError):
        parse_benchmark_text(noise)
