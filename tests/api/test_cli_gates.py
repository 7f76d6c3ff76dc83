"""``commest check`` and ``commest plan`` as a CI gate and a planner: memory headroom,
thresholds, a JUnit report on every outcome, and the plan's filters (in-process, temp SQLite)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from api import cli
from api.settings import get_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ESTIMATE_EXAMPLE = EXAMPLES / "estimate-gpt3-175b.json"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """COMMEST_* pointed at a temp SQLite and data dir; no token in the environment."""
    monkeypatch.setenv("COMMEST_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COMMEST_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.sqlite3'}")
    monkeypatch.delenv("COMMEST_API_TOKEN", raising=False)
    monkeypatch.delenv("COMMEST_SERVER", raising=False)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args))


def write_json(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def near_full_request(tmp_path: Path, used_gb: float = 83.5, capacity_gb: float = 85.9) -> str:
    """The example on a GPU sized so that its layout uses ``used_gb`` of ``capacity_gb``."""
    result = run("estimate", "--request", str(ESTIMATE_EXAMPLE))
    assert result.exit_code == 0, result.stderr
    total = float(json.loads(result.stdout)["memory"]["total_bytes"])
    request = json.loads(ESTIMATE_EXAMPLE.read_text())
    request["cluster"]["gpu_memory_gb"] = total * capacity_gb / used_gb / 1e9
    return write_json(tmp_path / "near-full.json", request)


def suite_of(path: Path) -> tuple[ET.Element, dict[str, str]]:
    suite = ET.parse(path).getroot()
    props = {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}
    return suite, props


# --------------------------------------------------------------------------- check


def test_check_fails_on_memory_with_the_default_headroom_and_passes_without(
    env: Path, tmp_path: Path
) -> None:
    request = near_full_request(tmp_path)
    report = tmp_path / "memory.xml"
    full = run(
        "check", "--request", request, "--max-iteration-time", "1e6", "--junit-xml", str(report)
    )
    assert full.exit_code == 1, full.stderr
    assert full.stdout.startswith("FAIL: iteration ")
    assert "less 10% headroom" in full.stdout and "budget" in full.stdout
    suite, props = suite_of(report)
    assert (suite.get("failures"), suite.get("errors")) == ("1", "0")
    failure = suite.find("testcase/failure")
    assert failure is not None and "memory" in failure.get("message", "")
    assert props["check_memory.fits"] == "false"
    assert props["check_memory.memory_headroom"] == "0.1"
    assert props["comparison.memory_bytes"].endswith(": fail")
    for term in ("compute", "tp", "pp", "dp", "bubble", "optimizer"):
        assert f"breakdown_s.{term}" in props
    assert {"ratios.communication", "ratios.bubble", "throughput.mfu"} <= set(props)

    none = run(
        "check", "--request", request, "--max-iteration-time", "1e6", "--memory-headroom", "0"
    )
    assert none.exit_code == 0, none.stdout + none.stderr
    assert none.stdout.startswith("PASS")
    allowed = run(
        "check", "--request", request, "--max-iteration-time", "1e6", "--allow-memory-overflow"
    )
    assert allowed.exit_code == 0, allowed.stdout + allowed.stderr
    assert "overflow allowed" in allowed.stdout


def test_check_thresholds_name_value_and_limit(env: Path, tmp_path: Path) -> None:
    report = tmp_path / "thresholds.xml"
    result = run(
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        "1e6",
        "--max-communication-ratio",
        "0.9",
        "--max-bubble-ratio",
        "0.001",
        "--min-mfu",
        "0.01",
        "--junit-xml",
        str(report),
    )
    assert result.exit_code == 1, result.stderr
    line = result.stdout.strip()
    assert "communication ratio" in line and "<= 0.9" in line
    assert "bubble ratio" in line and "> 0.001" in line
    assert "mfu" in line and ">= 0.01" in line
    suite, props = suite_of(report)
    failure = suite.find("testcase/failure")
    assert failure is not None and "bubble ratio" in failure.get("message", "")
    assert props["comparison.bubble_ratio"].endswith(": fail")
    assert props["comparison.mfu"].endswith(": pass")
    body = run(
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        "1e6",
        "--min-mfu",
        "0.01",
        "--format",
        "json",
    )
    assert body.exit_code == 0, body.stderr
    names = [c["name"] for c in json.loads(body.stdout)["comparisons"]]
    assert names == ["iteration_time_s", "memory_bytes", "mfu"]


def test_check_writes_junit_on_a_422(env: Path, tmp_path: Path) -> None:
    report = tmp_path / "reports" / "bad.xml"
    result = run(
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        "1",
        "--memory-headroom",
        "1.5",
        "--junit-xml",
        str(report),
    )
    assert result.exit_code == 2
    suite, props = suite_of(report)
    assert (suite.get("errors"), suite.get("failures")) == ("1", "0")
    error = suite.find("testcase/error")
    assert error is not None and "memory_headroom" in error.get("message", "")
    assert error.get("type") == "BadInput"
    assert props["exit_code"] == "2" and props["given.memory_headroom"] == "1.5"


def test_check_writes_junit_when_the_server_is_unreachable(env: Path, tmp_path: Path) -> None:
    report = tmp_path / "down.xml"
    result = run(
        "--server",
        "http://127.0.0.1:9",
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        "30",
        "--junit-xml",
        str(report),
    )
    assert result.exit_code == 3
    suite, props = suite_of(report)
    error = suite.find("testcase/error")
    assert error is not None and "cannot reach" in error.get("message", "")
    assert error.get("type") == "Unavailable" and props["exit_code"] == "3"


@pytest.mark.parametrize(
    "args",
    [
        ("--max-iteration-time", "10", "--baseline", "main"),  # two criteria
        ("--baseline", "nope"),  # a 404
        ("--max-iteration-time", "10", "--tolerance", "0.1"),  # tolerance without a baseline
    ],
)
def test_check_writes_junit_on_every_bad_input(
    env: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    report = tmp_path / "input.xml"
    result = run("check", "--request", str(ESTIMATE_EXAMPLE), *args, "--junit-xml", str(report))
    assert result.exit_code == 2
    suite, _ = suite_of(report)
    assert suite.get("errors") == "1" and suite.find("testcase/error") is not None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--max-iteration-time", "abc"), "--max-iteration-time"),  # not a number
        (("--max-iteration-time", "1", "--bogus"), "--bogus"),  # no such option
    ],
)
def test_check_writes_junit_on_a_usage_error(
    env: Path, tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    report = tmp_path / "usage.xml"
    result = run("check", "--request", str(ESTIMATE_EXAMPLE), *args, f"--junit-xml={report}")
    assert result.exit_code == 2
    suite, props = suite_of(report)
    error = suite.find("testcase/error")
    assert error is not None and said in error.get("message", "")
    case = suite.find("testcase")
    assert case is not None and case.get("name") == ESTIMATE_EXAMPLE.stem
    assert props["exit_code"] == "2"


def test_check_writes_junit_for_an_unreadable_request(env: Path, tmp_path: Path) -> None:
    report = tmp_path / "missing.xml"
    missing = str(tmp_path / "missing.json")
    result = run(
        "check", "--request", missing, "--max-iteration-time", "1", "--junit-xml", str(report)
    )
    assert result.exit_code == 2
    suite, _ = suite_of(report)
    error = suite.find("testcase/error")
    assert error is not None and "cannot read" in error.get("message", "")
    case = suite.find("testcase")
    assert case is not None and case.get("name") == "missing"


# --------------------------------------------------------------------------- plan

PLAN_REQUEST: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b", "seq_length": 32768},
    "training": {"global_batch_size": 16},
    "cluster": {"profile": "dgx-h100-nominal"},
    "gpus": 64,
}


def test_plan_proposes_context_parallel_for_32k_and_groups_ties(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "long.json", PLAN_REQUEST)
    result = run("plan", "--request", request, "--top-k", "10000")
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["context_parallel"] == [1, 2, 4, 8]
    assert {e["layout"]["context_parallel"] for e in body["layouts"]} == {1, 2, 4, 8}
    assert body["memory_headroom"] == 0.10 and body["tie_tolerance"] == 0.03
    groups = [e["group"] for e in body["layouts"]]
    assert groups == sorted(groups) and groups[0] == 1
    table = run("plan", "--request", request, "--format", "table")
    assert table.exit_code == 0, table.stderr
    assert "group" in table.stdout and "cp" in table.stdout


def test_plan_flags_reach_the_request(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "long.json", PLAN_REQUEST)
    result = run(
        "plan",
        "--request",
        request,
        "--top-k",
        "10000",
        "--memory-headroom",
        "0.25",
        "--tie-tolerance",
        "0",
        "--tensor-within-node",
        "--context-parallel",
        "1",
        "--context-parallel",
        "2",
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["memory_headroom"] == 0.25 and body["tie_tolerance"] == 0
    assert body["usable_memory_bytes"] == 0.75 * body["cluster"]["gpu_memory_bytes"]
    assert {e["layout"]["context_parallel"] for e in body["layouts"]} == {1, 2}
    assert all(8 % e["layout"]["tensor"] == 0 for e in body["layouts"])
    grouped = write_json(
        tmp_path / "grouped.json", {**PLAN_REQUEST, "constraints": {"max_tensor": 4}}
    )
    flagged = run("plan", "--request", grouped, "--memory-headroom", "0.3")
    assert flagged.exit_code == 0, flagged.stderr
    assert json.loads(flagged.stdout)["memory_headroom"] == 0.3


def test_plan_expert_flags_reach_the_request(env: Path, tmp_path: Path) -> None:
    """--expert-parallel (repeat) and --experts-folded/--no-experts-folded narrow a MoE
    plan's sweep; folding a dense model's experts is a 422, exit 2, naming the field."""
    moe = {**PLAN_REQUEST, "model": {"preset": "mixtral-8x7b", "num_layers": 8}, "gpus": 16}
    every = ("plan", "--request", write_json(tmp_path / "moe.json", moe), "--top-k", "10000")
    folded = run(*every, "--expert-parallel", "8", "--experts-folded")
    assert folded.exit_code == 0, folded.stderr
    body = json.loads(folded.stdout)
    assert body["expert_parallel"] == [8] and body["experts_folded"] == [False, True]
    assert any(e["layout"]["expert_tensor_parallel"] == 1 for e in body["layouts"])
    plain = run(*every, "--no-experts-folded")
    assert plain.exit_code == 0, plain.stderr
    body = json.loads(plain.stdout)
    assert body["experts_folded"] == [False]
    assert all(e["layout"]["expert_tensor_parallel"] is None for e in body["layouts"])
    dense = run(
        "plan", "--request", write_json(tmp_path / "dense.json", PLAN_REQUEST), "--experts-folded"
    )
    assert dense.exit_code == 2
    assert "experts_folded" in dense.stderr


def test_plan_with_a_bad_headroom_exits_2_naming_it(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "long.json", PLAN_REQUEST)
    result = run("plan", "--request", request, "--memory-headroom", "1")
    assert result.exit_code == 2
    assert "memory_headroom" in result.stderr


def test_check_line_names_the_baseline_it_was_held_to(env: Path) -> None:
    put = run("baseline", "set", "gpt3-main", "--request", str(ESTIMATE_EXAMPLE))
    assert put.exit_code == 0, put.stderr
    result = run("check", "--request", str(ESTIMATE_EXAMPLE), "--baseline", "gpt3-main")
    assert result.exit_code == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("PASS: iteration ")
    assert "(baseline 'gpt3-main':" in line and "+ 5%" in line
    assert "memory " in line
