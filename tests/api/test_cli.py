"""The ``commest`` command line, end to end through its Typer app against a temp SQLite.

Every command runs in-process (``create_app`` through ``TestClient``), as ``commest`` does
without ``--server``; the database and the data directory (with the generated API token) are
temporary per test.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from api import cli
from api.cli.app import hoist_global_options
from api.cli.client import problem_line
from api.cli.exits import exit_code_for_status
from api.cli.inputs import parse_size
from api.junit import CheckOutcome, junit_xml
from api.serverlog import log_config
from api.settings import get_settings
from estimator.calibrated import VALIDATED_BY_MODEL

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ESTIMATE_EXAMPLE = EXAMPLES / "estimate-gpt3-175b.json"
PLAN_EXAMPLE = EXAMPLES / "plan-gpt3-175b.json"

GPT3_175B_FLAGS = (
    "torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers 96 --hidden-size 12288"
    " --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048"
    " --micro-batch-size 1 --global-batch-size 1536 --lr 6.0e-5 --fp16"
    " --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16"
)

SMALL_REQUEST: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "layout": {"pipeline": 2, "tensor": 2, "data": 2},
    "training": {"global_batch_size": 16, "micro_batch_size": 1, "recompute": "full"},
    "cluster": {"profile": "dgx-a100-nominal"},
}


def _nccl_all_reduce_text(ranks: int = 8) -> str:
    """A small nccl-tests all_reduce_perf output (8 GPUs of one node, 1 MiB to 64 MiB)."""
    lines = [
        "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807",
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 67108864 step: 2(factor)"
        " warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for rank in range(ranks):
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {3000 + rank:6d} on     node-01 device {rank:2d}"
            f" [0000:{16 * rank + 24:02x}:00] NVIDIA A100-SXM4-80GB"
        )
    lines += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    factor = 2 * (ranks - 1) / ranks
    for i, busbw in enumerate((40.0, 70.0, 100.0, 130.0, 150.0, 165.0, 175.0)):
        size = (1 << 20) << i
        algbw = busbw / factor
        time_us = size / (algbw * 1e3)
        row = f"{size:12d} {size // 4:13d}     float     sum      -1 {time_us:8.1f} {algbw:7.2f}"
        row += f" {busbw:7.2f}       0 {time_us:8.1f} {algbw:7.2f} {busbw:7.2f}       0"
        lines.append(row)
    lines += [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 118.43",
        "#",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """COMMEST_* pointed at a temp SQLite and data dir; no token in the environment."""
    data = tmp_path / "data"
    monkeypatch.setenv("COMMEST_DATA_DIR", str(data))
    monkeypatch.setenv("COMMEST_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.sqlite3'}")
    monkeypatch.delenv("COMMEST_API_TOKEN", raising=False)
    monkeypatch.delenv("COMMEST_SERVER", raising=False)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def run(*args: str, stdin: str | None = None) -> Result:
    """One ``commest`` invocation; stdout and stderr apart."""
    return CliRunner().invoke(cli.app, list(args), input=stdin)


def write_json(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def estimate_time(request_file: str) -> float:
    result = run("estimate", "--request", request_file)
    assert result.exit_code == 0, result.stderr
    return float(json.loads(result.stdout)["iteration_time_s"])


# --------------------------------------------------------------------------- estimate


def test_estimate_prints_the_response_json(env: Path) -> None:
    result = run("estimate", "--request", str(ESTIMATE_EXAMPLE))
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["iteration_time_s"] > 0
    assert {"compute", "tp", "pp", "dp", "bubble"} <= set(body["breakdown_s"])
    assert body["gpus"] == 8 * 8 * 24
    assert body["cluster"]["profile"] == "dgx-a100-nominal"


def test_estimate_reads_the_request_from_stdin(env: Path) -> None:
    result = run("estimate", "--request", "-", stdin=ESTIMATE_EXAMPLE.read_text())
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["gpus"] == 1536


def test_estimate_table_shows_terms_ratios_and_collective_provenance(env: Path) -> None:
    result = run("estimate", "--request", str(ESTIMATE_EXAMPLE), "--format", "table")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for text in ("Iteration time", "% of iteration", "compute", "bubble", "Ratios", "Throughput"):
        assert text in out
    assert "Memory per GPU" in out
    assert "Collectives (bandwidth provenance)" in out
    assert "busbw GB/s" in out
    # that example overrides the fitted u: no validated range to show
    assert "likely measured" not in out
    # the H100 example runs the fitted model: the range as the JSON answer gives it
    fitted = str(EXAMPLES / "estimate-llama3-70b-h100.json")
    answer = json.loads(run("estimate", "--request", fitted).stdout)
    low, high = answer["iteration_time_range_s"]
    table = run("estimate", "--request", fitted, "--format", "table").stdout
    assert re.search(rf"likely measured\s*│\s*{low:.4g} - {high:.4g}", table), table
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_estimate_from_megatron_args_with_a_cluster_profile(env: Path) -> None:
    result = run(
        "estimate",
        "--megatron-args",
        GPT3_175B_FLAGS,
        "--gpus",
        "1024",
        "--vocab-size",
        "50257",
        "--cluster-profile",
        "dgx-a100-nominal",
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["gpus"] == 1024
    assert body["micro_batches"] == 1536 // 8  # gb / (b · d), d = 1024 / (8 · 16)
    assert "--lr" in result.stderr  # the ignored flags are named


# The shape of Megatron-LM's examples/pretrain_gpt_distributed.sh: flags in shell variables.
GPT3_175B_SCRIPT = """#!/bin/bash
GPUS_PER_NODE=8
NNODES=16
DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes ${NNODES} --node_rank 0"
GPT_ARGS="
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048
    --micro-batch-size 1 --global-batch-size 1536 --fp16 --vocab-size 50257
"
torchrun $DISTRIBUTED_ARGS pretrain_gpt.py \\
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \\
    $GPT_ARGS --lr 6.0e-5
"""


def test_estimate_from_a_megatron_launch_script_expands_its_shell_variables(env: Path) -> None:
    # README: --megatron-args "$(cat pretrain_gpt.sh)"; it used to say --num-layers was missing.
    result = run(
        "estimate", "--megatron-args", GPT3_175B_SCRIPT, "--cluster-profile", "dgx-a100-nominal"
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["gpus"] == 8 * 16  # torchrun's --nproc_per_node and --nnodes, expanded
    assert body["micro_batches"] == 1536  # d = 128 / (8 · 16) = 1


def test_megatron_args_whose_variables_expand_without_bound_exit_2(env: Path) -> None:
    doubling = "A=--x\n" + "".join('A="$A $A"\n' for _ in range(40))
    result = run("estimate", "--megatron-args", doubling + "$A", "--gpus", "8")
    assert result.exit_code == 2
    assert "expand to more than" in result.stderr


def test_estimate_megatron_args_without_vocab_exits_2_naming_the_flag(env: Path) -> None:
    result = run(
        "estimate", "--megatron-args", GPT3_175B_FLAGS, "--cluster-profile", "dgx-a100-nominal"
    )
    assert result.exit_code == 2
    assert "--vocab-size" in result.stderr
    assert result.stdout == ""


def test_bad_model_exits_2_with_the_field_named(env: Path, tmp_path: Path) -> None:
    request = json.loads(ESTIMATE_EXAMPLE.read_text())
    request["model"] = {
        "num_layers": 8,
        "hidden_size": 1000,
        "num_attention_heads": 7,
        "seq_length": 2048,
        "vocab_size": 51200,
    }
    result = run("estimate", "--request", write_json(tmp_path / "bad.json", request))
    assert result.exit_code == 2
    assert "model.hidden_size" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_misspelt_field_exits_2_with_the_field_named(env: Path, tmp_path: Path) -> None:
    request = json.loads(ESTIMATE_EXAMPLE.read_text())
    request["layout"]["tensr"] = 8
    result = run("estimate", "--request", write_json(tmp_path / "typo.json", request))
    assert result.exit_code == 2
    assert "layout.tensr" in result.stderr


def test_request_that_is_not_json_exits_2(env: Path, tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"model": ', encoding="utf-8")
    result = run("estimate", "--request", str(path))
    assert result.exit_code == 2
    assert "not JSON" in result.stderr
    assert str(path) in result.stderr


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("server", [None, "http://127.0.0.1:9"])
def test_nan_or_infinity_in_a_request_file_exits_2_naming_the_field(
    env: Path, tmp_path: Path, literal: str, server: str | None
) -> None:
    # Python's json reads these literals; httpx then refused to encode them and --server
    # ended in a traceback (exit 1). Now both paths refuse the file before any request.
    text = ESTIMATE_EXAMPLE.read_text().replace('"utilization": 0.5', f'"utilization": {literal}')
    assert literal in text
    path = tmp_path / "nan.json"
    path.write_text(text, encoding="utf-8")
    where = ("--server", server) if server else ()
    junit = tmp_path / "report.xml"
    result = run(
        *where, "check", "--request", str(path), "--max-iteration-time", "21",
        "--junit-xml", str(junit),
    )  # fmt: skip
    assert result.exit_code == 2
    assert "cluster.utilization" in result.stderr
    assert "finite number" in result.stderr
    assert ET.parse(junit).getroot().get("errors") == "1"


@pytest.mark.parametrize("server", ["notaurl", "ftp://127.0.0.1:9", "http://"])
def test_a_server_that_is_not_an_http_url_is_bad_input_not_an_outage(
    env: Path, tmp_path: Path, server: str
) -> None:
    junit = tmp_path / "report.xml"
    result = run(
        "--server", server, "check", "--request", str(ESTIMATE_EXAMPLE),
        "--max-iteration-time", "21", "--junit-xml", str(junit),
    )  # fmt: skip
    assert result.exit_code == 2  # was 3, "cannot reach the commest service"
    assert "--server" in result.stderr
    assert "http://127.0.0.1:8000" in result.stderr
    assert ET.parse(junit).getroot().get("errors") == "1"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("profile", "create", "x", "--gpu-model", "A100", "--gpus-per-node", "8",
          "--peak-tflops", "nan"), "peak_tflops"),
        (("check", "--request", str(ESTIMATE_EXAMPLE), "--max-iteration-time", "inf"),
         "max_iteration_time_s"),
        (("plan", "--request", str(PLAN_EXAMPLE), "--tie-tolerance", "nan"), "tie_tolerance"),
    ],
)  # fmt: skip
def test_a_float_flag_of_nan_or_inf_with_server_exits_2_as_in_process(
    env: Path, args: tuple[str, ...], field: str
) -> None:
    # click reads "nan" and "inf" as floats; httpx then refused to encode the body: a traceback
    remote = run("--server", "http://127.0.0.1:9", *args)
    assert remote.exit_code == 2, remote.output
    assert field in remote.stderr and "finite number" in remote.stderr


def test_a_plan_table_without_layouts_says_why(env: Path) -> None:
    # printed only "evaluated 6414 layouts, 0 feasible": the reason was in the JSON alone
    args = ("plan", "--request", str(PLAN_EXAMPLE), "--memory-headroom", "0.99")
    result = run(*args, "--format", "table")
    assert result.exit_code == 0, result.stderr
    assert "0 feasible" in result.stdout
    assert "Warnings" in result.stdout
    assert "every layout exceeds the usable GPU memory" in " ".join(result.stdout.split())


@pytest.mark.parametrize("verb", ["estimate", "plan", "timeline", "matrix"])
def test_a_request_file_that_is_not_utf8_exits_2(env: Path, tmp_path: Path, verb: str) -> None:
    path = tmp_path / "utf16.json"
    path.write_bytes(ESTIMATE_EXAMPLE.read_text().encode("utf-16"))  # was a traceback, exit 1
    result = run(verb, "--request", str(path))
    assert result.exit_code == 2, result.output
    assert "not UTF-8 text (byte 0xff at offset 0)" in result.stderr


def test_unreachable_server_exits_3(env: Path) -> None:
    result = run("--server", "http://127.0.0.1:9", "estimate", "--request", str(ESTIMATE_EXAMPLE))
    assert result.exit_code == 3
    assert "cannot reach" in result.stderr


# --------------------------------------------------------------------------- check


def test_check_passes_and_fails_against_a_budget_with_junit_xml(env: Path, tmp_path: Path) -> None:
    predicted = estimate_time(str(ESTIMATE_EXAMPLE))
    report = tmp_path / "reports" / "commest.xml"

    ok = run(
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        str(predicted * 1.5),
        "--junit-xml",
        str(report),
    )
    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout.startswith("PASS")
    suite = ET.parse(report).getroot()
    assert suite.tag == "testsuite"
    assert (suite.get("tests"), suite.get("failures")) == ("1", "0")
    case = suite.find("testcase")
    assert case is not None and case.get("name") == ESTIMATE_EXAMPLE.stem
    assert case.find("failure") is None

    limit = predicted / 2
    bad = run(
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        str(limit),
        "--junit-xml",
        str(report),
    )
    assert bad.exit_code == 1, bad.stderr
    assert bad.stdout.startswith("FAIL")
    suite = ET.parse(report).getroot()
    assert suite.get("failures") == "1"
    failure = suite.find("testcase/failure")
    assert failure is not None
    message = failure.get("message", "")
    assert f"{predicted:.6g} s" in message
    assert f"limit {limit:.6g} s" in message


def test_check_needs_exactly_one_criterion(env: Path) -> None:
    result = run("check", "--request", str(ESTIMATE_EXAMPLE))
    assert result.exit_code == 2
    assert "--max-iteration-time" in result.stderr
    both = run(
        "check",
        "--request",
        str(ESTIMATE_EXAMPLE),
        "--max-iteration-time",
        "10",
        "--baseline",
        "main",
    )
    assert both.exit_code == 2


def test_check_with_a_bad_budget_exits_2_naming_the_field(env: Path) -> None:
    result = run("check", "--request", str(ESTIMATE_EXAMPLE), "--max-iteration-time", "-1")
    assert result.exit_code == 2
    assert "max_iteration_time_s" in result.stderr


def test_baseline_set_show_and_check_against_it(env: Path, tmp_path: Path) -> None:
    put = run("baseline", "set", "gpt3-main", "--request", str(ESTIMATE_EXAMPLE))
    assert put.exit_code == 0, put.stderr
    stored = json.loads(put.stdout)
    assert stored["name"] == "gpt3-main"

    shown = run("baseline", "show", "gpt3-main")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["iteration_time_s"] == pytest.approx(stored["iteration_time_s"])

    same = run("check", "--request", str(ESTIMATE_EXAMPLE), "--baseline", "gpt3-main")
    assert same.exit_code == 0, same.stderr

    slower = json.loads(ESTIMATE_EXAMPLE.read_text())
    slower["cluster"]["utilization"] = 0.25  # half the achieved FLOP/s: far slower
    result = run(
        "check",
        "--request",
        write_json(tmp_path / "slower.json", slower),
        "--baseline",
        "gpt3-main",
        "--tolerance",
        "0.05",
    )
    assert result.exit_code == 1

    missing = run("check", "--request", str(ESTIMATE_EXAMPLE), "--baseline", "nope")
    assert missing.exit_code == 2
    assert "nope" in missing.stderr


# --------------------------------------------------------------------------- profiles


def test_profile_create_upload_list_show_bandwidth_delete_round_trip(
    env: Path, tmp_path: Path
) -> None:
    created = run(
        "profile",
        "create",
        "lab-a100",
        "--gpu-model",
        "A100-SXM4-80GB",
        "--gpus-per-node",
        "8",
        "--peak-tflops",
        "312",
        "--utilization",
        "0.45",
        "--description",
        "test cluster",
    )
    assert created.exit_code == 0, created.stderr
    assert json.loads(created.stdout)["gpus_per_node"] == 8

    log = tmp_path / "all_reduce_8gpu.txt"
    log.write_text(_nccl_all_reduce_text(), encoding="utf-8")
    uploaded = run("profile", "upload", "lab-a100", str(log))
    assert uploaded.exit_code == 0, uploaded.stderr
    assert "1 new, 0 already stored" in uploaded.stdout
    assert "collective=all_reduce" in uploaded.stdout
    assert "ranks=8" in uploaded.stdout

    again = run("profile", "upload", "lab-a100", str(log))
    assert again.exit_code == 0, again.stderr
    assert "0 new, 1 already stored" in again.stdout

    listed = run("profile", "list", "--format", "json")
    assert listed.exit_code == 0, listed.stderr
    names = {p["name"] for p in json.loads(listed.stdout)["profiles"]}
    assert {"lab-a100", "dgx-a100-nominal"} <= names
    table = run("profile", "list")
    assert table.exit_code == 0
    assert "lab-a100" in table.stdout

    shown = run("profile", "show", "lab-a100")
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["gpu_model"] == "A100-SXM4-80GB"

    bw = run(
        "bandwidth",
        "--profile",
        "lab-a100",
        "--op",
        "all_reduce",
        "--ranks",
        "8",
        "--nodes",
        "1",
        "--bytes",
        "4MiB",
    )
    assert bw.exit_code == 0, bw.stderr
    answer = json.loads(bw.stdout)
    assert answer["bytes"] == 4 * 1024 * 1024
    assert answer["busbw_gbps"] == pytest.approx(100.0, rel=0.05)  # the measured 4 MiB row

    deleted = run("profile", "delete", "lab-a100")
    assert deleted.exit_code == 0, deleted.stderr
    gone = run("profile", "show", "lab-a100")
    assert gone.exit_code == 2
    assert "lab-a100" in gone.stderr


def test_profile_uploads_list_disable_enable_and_remove(env: Path, tmp_path: Path) -> None:
    created = run("profile", "create", "lab", "--gpu-model", "A100", "--gpus-per-node", "8")
    assert created.exit_code == 0, created.stderr
    log = tmp_path / "all_reduce_8gpu.txt"
    log.write_text(_nccl_all_reduce_text(), encoding="utf-8")
    uploaded = run("profile", "upload", "lab", str(log), "--label", "week 47")
    assert uploaded.exit_code == 0, uploaded.stderr
    assert "busbw" in uploaded.stdout  # the fitted beta in both units

    listed = run("profile", "uploads", "lab", "--format", "json")
    assert listed.exit_code == 0, listed.stderr
    (upload,) = json.loads(listed.stdout)["uploads"]
    assert (upload["filename"], upload["label"]) == ("all_reduce_8gpu.txt", "week 47")
    table = run("profile", "uploads", "lab")
    assert table.exit_code == 0 and "week 47" in table.stdout

    bandwidth = ("bandwidth", "--profile", "lab", "--op", "all_reduce", "--ranks", "8")
    size = ("--nodes", "1", "--bytes", "4MiB")
    measured = json.loads(run(*bandwidth, *size).stdout)
    assert measured["method"] == "measured" and "week 47" in measured["source"]

    upload_id = str(upload["id"])
    disabled = run("profile", "upload-disable", "lab", upload_id)
    assert disabled.exit_code == 0 and "disabled" in disabled.stdout, disabled.stderr
    assert json.loads(run(*bandwidth, *size).stdout)["method"] == "nominal"
    enabled = run("profile", "upload-disable", "lab", upload_id, "--enable")
    assert enabled.exit_code == 0 and "enabled" in enabled.stdout, enabled.stderr
    assert json.loads(run(*bandwidth, *size).stdout)["method"] == "measured"

    removed = run("profile", "upload-remove", "lab", upload_id)
    assert removed.exit_code == 0, removed.stderr
    assert json.loads(run("profile", "uploads", "lab", "--format", "json").stdout)["total"] == 0
    again = run("profile", "upload-remove", "lab", upload_id)
    assert again.exit_code == 2 and upload_id in again.stderr


def test_upload_of_a_file_without_a_table_exits_2(env: Path, tmp_path: Path) -> None:
    assert (
        run("profile", "create", "p1", "--gpu-model", "H100", "--gpus-per-node", "8").exit_code == 0
    )
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\nnot a benchmark\n", encoding="utf-8")
    result = run("profile", "upload", "p1", str(junk))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")


def test_profile_upload_of_a_missing_file_exits_2(env: Path, tmp_path: Path) -> None:
    result = run("profile", "upload", "p1", str(tmp_path / "absent.txt"))
    assert result.exit_code == 2
    assert "absent.txt" in result.stderr


def test_a_wrong_token_is_refused_with_exit_2(env: Path) -> None:
    result = run(
        "--token", "not-the-token", "profile", "create", "x", "--gpu-model", "H100",
        "--gpus-per-node", "8",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "401" in result.stderr


# --------------------------------------------------------------------------- matrix, plan


def test_matrix_csv_has_the_header_and_gpu_rows(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    result = run("matrix", "--request", request, "--format", "csv")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "src,dst,bytes,kind"
    ranks = {int(line.split(",")[0]) for line in lines[1:]}
    assert ranks == set(range(8))


def test_matrix_png_to_a_file(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    out = tmp_path / "m.png"
    result = run(
        "matrix", "--request", request, "--format", "png", "--level", "node", "--output", str(out)
    )
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_matrix_over_the_entry_cap_exits_with_the_413(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMMEST_MAX_MATRIX_ENTRIES", "10")
    get_settings.cache_clear()
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    result = run("matrix", "--request", request, "--format", "csv", "--algorithm", "direct")
    assert result.exit_code != 0
    assert "413" in result.stderr and "COMMEST_MAX_MATRIX_ENTRIES" in result.stderr


def test_matrix_network_view_leaves_out_intra_node_pairs(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    every = run("matrix", "--request", request, "--format", "json", "--level", "node")
    assert every.exit_code == 0, every.stderr
    network = run(
        "matrix", "--request", request, "--format", "json", "--level", "node",
        "--view", "network",
    )  # fmt: skip
    assert network.exit_code == 0, network.stderr
    body = json.loads(network.stdout)
    assert body["view"] == "network"
    assert all(r["src"] != r["dst"] for r in body["rows"])
    assert len(body["rows"]) < len(json.loads(every.stdout)["rows"])


def test_matrix_png_goes_to_stdout_when_it_is_not_a_terminal(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    result = run("matrix", "--request", request, "--format", "png")
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_json_table_and_pictures(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    result = run("timeline", "--request", request)
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["schedule"] == "1f1b" and body["pipeline_stages"] == 2
    assert {e["stage"] for e in body["events"]} == {0, 1}
    table = run("timeline", "--request", request, "--format", "table")
    assert table.exit_code == 0, table.stderr
    assert "pp_comm_ms" in table.stdout and "bubble_ratio" in table.stdout
    out = tmp_path / "t.svg"
    svg = run("timeline", "--request", request, "--format", "svg", "--output", str(out))
    assert svg.exit_code == 0, svg.stderr
    assert out.read_bytes().lstrip().startswith(b"<?xml")
    png = run("timeline", "--request", request, "--format", "png")
    assert png.exit_code == 0 and png.stdout_bytes[:8] == b"\x89PNG\r\n\x1a\n"
    bad = run("timeline", "--request", request, "--max-microbatches-shown", "0")
    assert bad.exit_code == 2 and "max_microbatches_shown" in bad.stderr


def test_megatron_args_take_the_cluster_from_a_request_file(env: Path, tmp_path: Path) -> None:
    cluster_only = {"cluster": {"profile": "dgx-h100-nominal"}, "fidelity": "paper"}
    result = run(
        "estimate",
        "--request",
        write_json(tmp_path / "cluster.json", cluster_only),
        "--megatron-args",
        GPT3_175B_FLAGS.replace("--nnodes 1", "--nnodes 32"),  # torchrun: 32 x 8 GPUs
        "--vocab-size",
        "50257",
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["gpus"] == 256
    assert body["fidelity"] == "paper"
    assert body["cluster"]["profile"] == "dgx-h100-nominal"


def test_plan_ranks_layouts(env: Path, tmp_path: Path) -> None:
    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    result = run("plan", "--request", request, "--gpus", "8", "--top-k", "3")
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["evaluated"] >= 3
    times = [entry["iteration_time_s"] for entry in body["layouts"]]
    assert 1 <= len(times) <= 3
    groups = [entry["group"] for entry in body["layouts"]]  # ties grouped, groups by time
    assert groups == sorted(groups)
    table = run("plan", "--request", request, "--gpus", "8", "--format", "table")
    assert table.exit_code == 0, table.stderr
    assert "Best layouts" in table.stdout


def test_plan_sweeps_block_recompute_beside_full(env: Path, tmp_path: Path) -> None:
    """--recompute-num-layers N (repeat) asks the plan to sweep block recompute beside full;
    each layout names its own, and the table reads 'full, N/chunk'."""
    from api.cli.tables import plan_rows

    request = write_json(tmp_path / "small.json", SMALL_REQUEST)
    args = ("plan", "--request", request, "--gpus", "8", "--top-k", "100")
    result = run(*args, "--recompute-num-layers", "2", "--recompute-num-layers", "4")
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    replayed = {entry["layout"].get("recompute_num_layers") for entry in body["layouts"]}
    assert replayed == {None, 2, 4}
    assert any("block recompute swept" in a for a in body["assumptions"])
    plain = json.loads(run(*args).stdout)
    assert body["evaluated"] > plain["evaluated"]
    rows = plan_rows(body["layouts"])
    assert {row["recompute"] for row in rows} == {"full", "full, 2/chunk", "full, 4/chunk"}


# --------------------------------------------------------------------------- db, validate


def test_db_upgrade_prints_the_head_revision(env: Path) -> None:
    from profiles.db import head_revision

    result = run("db", "upgrade")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().endswith(f"at revision {head_revision()}")
    assert (env / "cli.sqlite3").exists()


def test_validate_prints_json(env: Path) -> None:
    result = run("validate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert isinstance(json.loads(result.stdout), dict | list)


def test_validate_lists_the_rows_asked_for_worst_first(env: Path) -> None:
    result = run("validate", "--source", "megatron_bridge_perf", "--kind", "fp8", "--sort", "error")
    assert result.exit_code == 0, result.stderr
    listed = [line.split() for line in result.stdout.splitlines() if line.startswith("mbridge")]
    assert len(listed) == 19 and {row[1] for row in listed} == {"megatron_bridge_perf"}
    # a training row (the Qwen3 runs inform the eager MoE host time) ends with a "*"
    errors = [abs(float(row[-2] if row[-1] == "*" else row[-1])) for row in listed]
    assert errors == sorted(errors, reverse=True)
    assert sum(row[-1] == "*" for row in listed) == 9
    assert "source megatron_bridge_perf; kind fp8" in result.stdout
    assert "excluded mbridge2509_llama3_8b_h100" in result.stdout  # its source's exclusions
    assert "excluded sc21" not in result.stdout


def test_validate_lists_one_models_rows_under_one_kind_of_trainer(env: Path) -> None:
    # what an estimate of GPT-3 175B under DeepSpeed points to (validated.same_model)
    result = run("validate", "--model", "gpt3-175b", "--kind", "deepspeed", "--summary")
    assert result.exit_code == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "model gpt3-175b" in line]
    assert line.split()[:5] == ["model", "gpt3-175b;", "kind", "deepspeed", "rows"]
    assert int(line.split()[5]) == VALIDATED_BY_MODEL[("deepspeed", (96, 12288, 96, 0, 49152))].runs


def test_validate_refuses_an_unknown_source_naming_the_known_ones(env: Path) -> None:
    result = run("validate", "--source", "megatron")
    assert result.exit_code == 2 and not result.stdout
    assert "'megatron'" in result.stderr and "megatron_bridge_perf" in result.stderr
    result = run("validate", "--summary", "--format", "json")
    assert result.exit_code == 2 and "--summary" in result.stderr


# --------------------------------------------------------------------------- units


def test_problem_line_names_title_detail_field_value_and_rule() -> None:
    line = problem_line(
        422,
        {
            "type": "urn:commest:problem:layout",
            "title": "Invalid layout",
            "status": 422,
            "detail": "layout.tensor=3: must divide num_attention_heads=96",
            "field": "layout.tensor",
            "value": 3,
            "rule": "must divide num_attention_heads=96",
        },
    )
    assert line.startswith("Invalid layout: layout.tensor=3")
    assert "field=layout.tensor" in line and "value=3" in line
    assert "(HTTP 422)" in line
    assert "\n" not in line
    assert exit_code_for_status(422) == 2
    assert exit_code_for_status(503) == 3


def test_problem_line_of_a_non_json_answer() -> None:
    line = problem_line(502, None, "<html>Bad gateway</html>")
    assert line.startswith("HTTP 502")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1 << 20),
        ("64K", 64 << 10),
        ("256MiB", 256 << 20),
        ("1G", 1 << 30),
        ("1e8", 10**8),
        ("2.5E+3", 2500),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("size", ["9" * 400, "1e400", "2e15", "0.5", "1e"])
def test_bandwidth_with_an_absurd_size_exits_2_before_any_request(env: Path, size: str) -> None:
    # "9" * 400 and "1e400" were a float overflow: a traceback, exit 1
    result = run(
        "bandwidth", "--profile", "dgx-a100-nominal", "--op", "all_reduce", "--ranks", "8",
        "--bytes", size,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--bytes" in result.output or "size" in result.output


def test_junit_failure_states_predicted_and_limit() -> None:
    xml = junit_xml(
        CheckOutcome(name="gpt3", passed=False, predicted_s=31.5, limit_s=30.0, margin_s=-1.5)
    )
    suite = ET.fromstring(xml.split("?>", 1)[1])
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.get("message", "").startswith("predicted iteration time 31.5 s vs limit 30 s")
    passed = ET.fromstring(
        junit_xml(
            CheckOutcome(name="gpt3", passed=True, predicted_s=1.0, limit_s=2.0, margin_s=1.0)
        ).split("?>", 1)[1]
    )
    assert passed.find("testcase/failure") is None
    assert passed.get("failures") == "0"


# --------------------------------------------------------------------------- calibrate, serve


def test_profile_calibrate_fits_u_from_the_example_measurements(env: Path) -> None:
    result = run(
        "profile",
        "calibrate",
        "dgx-a100-nominal",
        "--measurements",
        str(EXAMPLES / "calibration-measurements.json"),
    )
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    assert 0 < body["utilization"] <= 1
    assert len(body["residuals"]) == 2
    assert body["applied"] is False


def test_profile_upload_log_then_calibrate_on_stored_runs(env: Path, tmp_path: Path) -> None:
    logs = Path(__file__).resolve().parents[1] / "profiles" / "fixtures" / "training_logs"
    log = tmp_path / "gpt2-run.log"
    log.write_text(
        (logs / "megatron_lm_gpt2_345m_tp2_pp2.txt").read_text().replace("padded vocab", "pv"),
        encoding="utf-8",
    )
    lacking = run("profile", "upload-log", "dgx-a100-nominal", str(log))
    assert lacking.exit_code == 2
    assert "vocab_size" in lacking.stderr
    uploaded = run(
        "profile", "upload-log", "dgx-a100-nominal", str(log), "--vocab-size", "50257",
        "--label", "gpt2", "--set", "recompute=none",
    )  # fmt: skip
    assert uploaded.exit_code == 0, uploaded.stderr
    body = json.loads(uploaded.stdout)
    assert body["file_name"] == "gpt2-run.log" and body["label"] == "gpt2"
    assert body["iteration_time_s"] == pytest.approx(1.0826)
    assert body["hints"] == {"vocab_size": 50257, "recompute": "none"}
    assert "warning: the log ends at iteration 2000" in uploaded.stderr
    bad = run("profile", "upload-log", "dgx-a100-nominal", str(log), "--set", "layers=3")
    assert bad.exit_code == 2 and "FIELD=VALUE" in bad.stderr
    fitted = run("profile", "calibrate", "dgx-a100-nominal", "--use-stored-runs")
    assert fitted.exit_code == 0, fitted.stderr
    assert 0 < json.loads(fitted.stdout)["utilization"] <= 1
    neither = run("profile", "calibrate", "dgx-a100-nominal")
    assert neither.exit_code == 2
    # this small model fits u ~ 0.06: warned, and --apply refused (exit 2) unless --force
    assert "warning: the fitted utilization" in fitted.stderr
    refused = run("profile", "calibrate", "dgx-a100-nominal", "--use-stored-runs", "--apply")
    assert refused.exit_code == 2 and "--force" in refused.stderr
    forced = run(
        "profile", "calibrate", "dgx-a100-nominal", "--use-stored-runs", "--apply", "--force"
    )
    assert forced.exit_code == 0, forced.stderr
    assert json.loads(forced.stdout)["applied"] is True
    assert "warning: the fitted utilization" in forced.stderr


def test_serve_migrates_prints_where_and_runs_the_app_factory(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: calls.append((a, k)))
    result = run("serve", "--host", "0.0.0.0", "--port", "8123")
    assert result.exit_code == 0, result.stderr
    assert "http://localhost:8123" in result.stdout
    assert "http://localhost:8123/docs" in result.stdout
    assert str(env / "data" / "api-token") in result.stdout
    assert "dgx-a100-nominal" in result.stdout  # the nominal profiles were added
    assert len(calls) == 1
    args, kwargs = calls[0]
    assert args == ("api.app:create_app",)
    assert kwargs == {
        "factory": True,
        "host": "0.0.0.0",
        "port": 8123,
        "workers": 1,
        "access_log": True,
        "log_level": "info",
        "log_config": log_config("info"),
    }
    assert (env / "cli.sqlite3").exists()


def test_serve_with_a_database_it_cannot_use_says_why_without_a_traceback(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    calls: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: calls.append(k))
    monkeypatch.setenv("COMMEST_DATABASE_URL", "bogus://")
    get_settings.cache_clear()
    result = run("serve")  # was a ValidationError traceback, exit 1
    assert result.exit_code == 2
    assert "database_url" in result.stderr and "sqlite://" in result.stderr
    blocker = env / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("COMMEST_DATABASE_URL", f"sqlite:///{blocker / 'sub' / 'db.sqlite3'}")
    get_settings.cache_clear()
    result = run("serve")  # was a FileNotFoundError/NotADirectoryError traceback, exit 1
    assert result.exit_code == 3
    assert "cannot be created" in result.stderr and "COMMEST_DATA_DIR" in result.stderr
    assert calls == []


def test_serve_passes_workers_access_log_and_log_level_to_uvicorn(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: calls.append(k))
    result = run("serve", "--workers", "3", "--no-access-log", "--log-level", "WARNING")
    assert result.exit_code == 0, result.stderr
    assert len(calls) == 1
    assert calls[0]["workers"] == 3
    assert calls[0]["access_log"] is False
    assert calls[0]["log_level"] == "warning"
    assert calls[0]["log_config"]["loggers"]["api"]["level"] == "WARNING"
    assert run("serve", "--workers", "0").exit_code == 2
    assert run("serve", "--log-level", "loud").exit_code == 2


# --------------------------------------------------------------------------- remote


@pytest.fixture
def live_server(env: Path) -> Iterator[str]:
    """The app served by uvicorn on a free local port, with the token ``remote-token``."""
    import socket
    import threading
    import time

    import uvicorn
    from pydantic import SecretStr

    from api.app import create_app
    from api.settings import Settings

    settings = Settings(
        database_url=f"sqlite:///{env / 'remote.sqlite3'}",
        data_dir=env / "remote-data",
        api_token=SecretStr("remote-token"),
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_remote_server_answers_like_the_local_service(env: Path, live_server: str) -> None:
    local = run("estimate", "--request", str(ESTIMATE_EXAMPLE))
    remote = run("--server", live_server, "estimate", "--request", str(ESTIMATE_EXAMPLE))
    assert remote.exit_code == 0, remote.stderr
    assert json.loads(remote.stdout) == json.loads(local.stdout)

    create = ("profile", "create", "remote-lab", "--gpu-model", "H100", "--gpus-per-node", "8")
    refused = run("--server", live_server, *create)
    assert refused.exit_code == 2
    assert "401" in refused.stderr
    made = run("--server", live_server, "--token", "remote-token", *create)
    assert made.exit_code == 0, made.stderr
    listed = run("--server", live_server, "profile", "list", "--format", "json")
    assert "remote-lab" in {p["name"] for p in json.loads(listed.stdout)["profiles"]}
    # the local database is another one: the profile is not there
    assert run("profile", "show", "remote-lab").exit_code == 2


def test_remote_writes_use_the_local_token_file_when_no_token_is_given(
    env: Path, live_server: str
) -> None:
    create = ("profile", "create", "by-file", "--gpu-model", "H100", "--gpus-per-node", "8")
    refused = run("--server", live_server, *create)
    assert refused.exit_code == 2  # no token file yet: 401
    token_file = env / "data" / "api-token"  # where a server on this machine keeps it
    assert f"no token was found in {token_file}" in refused.stderr  # where it looked
    assert "COMMEST_DATA_DIR" in refused.stderr
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text("remote-token\n", encoding="utf-8")
    made = run("--server", live_server, *create)
    assert made.exit_code == 0, made.stderr
    assert json.loads(made.stdout)["name"] == "by-file"
    wrong = run("--server", live_server, "--token", "other", *create[:2], "x2", *create[3:])
    assert wrong.exit_code == 2  # a given token wins over the file
    assert "401" in wrong.stderr


def test_server_and_token_are_accepted_after_the_verb_too() -> None:
    argv = ["estimate", "--request", "f.json", "--server", "http://h:1", "--token=t"]
    assert hoist_global_options(argv) == [
        "--server",
        "http://h:1",
        "--token=t",
        "estimate",
        "--request",
        "f.json",
    ]
    assert hoist_global_options(["--server", "u", "plan"]) == ["--server", "u", "plan"]
    assert hoist_global_options(["check", "--server"]) == ["check", "--server"]


# --------------------------------------------------------------------------- the package


def test_every_verb_summary_is_the_first_line_of_its_help() -> None:
    import typer

    from api.cli.app import Verbs
    from api.cli.commands import VERBS

    group = typer.main.get_command(cli.app)
    assert isinstance(group, Verbs)
    assert group.list_commands(None) == list(VERBS)
    for name, verb in VERBS.items():
        command = group.get_command(None, name)
        assert command is not None and command.name == name
        assert (command.help or "").strip().splitlines()[0] == verb.summary, name


def test_help_lists_every_verb_without_importing_any(tmp_path: Path) -> None:
    import subprocess
    import sys

    from api.cli.commands import VERBS

    probe = (
        "import sys\n"
        "from api.cli import main\n"
        "sys.argv = ['commest', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('numpy', 'pydantic', 'sqlalchemy', 'httpx', 'rich', 'fastapi', 'estimator',\n"
        "         'api.cli.commands.estimate', 'api.settings')\n"
        "print('LOADED', ' '.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip().endswith("LOADED"), done.stdout.splitlines()[-1]
    for name in VERBS:
        assert f"\n  {name} " in done.stdout


# --------------------------------------------------------------------------- local == remote


AGREEMENT_TOKEN = "agreement-token"


@pytest.fixture
def shared_server(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real server (uvicorn in a subprocess) on the database the local runs use, with the
    token both are given (COMMEST_API_TOKEN)."""
    from tests.api.servers import Server

    monkeypatch.setenv("COMMEST_API_TOKEN", AGREEMENT_TOKEN)
    get_settings.cache_clear()
    url = f"sqlite:///{env / 'cli.sqlite3'}"
    with Server(url, env / "server-data", token=AGREEMENT_TOKEN) as server:
        yield server.base_url


_VOLATILE = (  # what differs between two writes of the same thing, and its mask
    (re.compile(r'"(created_at|updated_at)": "[^"]*"'), r'"\1": "*"'),
    (re.compile(r'"(id|upload_id)": \d+'), r'"\1": *'),
    (re.compile(r"\b(run|upload) \d+"), r"\1 *"),
    (re.compile(r"\b(local|remote)-"), "*-"),  # the name each side wrote under
)


def _same_text(text: str) -> str:
    """``text`` with ids, times and the writer's name masked."""
    for pattern, mask in _VOLATILE:
        text = pattern.sub(mask, text)
    return text


def _both(server: str, *args: str, stdin: str | None = None) -> tuple[Result, Result]:
    return run(*args, stdin=stdin), run("--server", server, *args, stdin=stdin)


def _agree(local: Result, remote: Result, *, mask: bool = False) -> None:
    """Same exit code, same stdout (byte for byte) and stderr, unless ``mask``ed."""
    assert local.exit_code == remote.exit_code, (local.stderr, remote.stderr)
    if mask:
        assert _same_text(local.stdout) == _same_text(remote.stdout)
        assert _same_text(local.stderr) == _same_text(remote.stderr)
    else:
        assert local.stdout_bytes == remote.stdout_bytes
        assert local.stderr == remote.stderr


def test_every_verb_answers_locally_as_the_server_does(
    env: Path, shared_server: str, tmp_path: Path
) -> None:
    server = shared_server
    gpt3, scalar = str(ESTIMATE_EXAMPLE), str(EXAMPLES / "estimate-paper-scalar-c.json")
    small = write_json(tmp_path / "small.json", SMALL_REQUEST)
    bad = json.loads(ESTIMATE_EXAMPLE.read_text())
    bad["layout"]["tensr"] = 8
    typo = write_json(tmp_path / "typo.json", bad)
    calibration = str(EXAMPLES / "calibration-measurements.json")
    logs = Path(__file__).resolve().parents[1] / "profiles" / "fixtures" / "training_logs"
    training_log = str(logs / "megatron_lm_gpt2_345m_tp2_pp2.txt")
    predicted = estimate_time(gpt3)
    same_everywhere = [
        ("estimate", "--request", gpt3),
        ("estimate", "--request", scalar),
        ("estimate", "--request", gpt3, "--format", "table"),
        (
            "estimate",
            "--megatron-args",
            GPT3_175B_FLAGS,
            "--gpus",
            "1024",
            "--vocab-size",
            "50257",
            "--cluster-profile",
            "dgx-a100-nominal",
        ),
        ("estimate", "--request", typo),  # 422: the misspelt field named
        ("estimate", "--request", gpt3, "--cluster-profile", "no-such-profile"),  # 404
        ("check", "--request", gpt3, "--max-iteration-time", str(predicted * 2)),
        ("check", "--request", gpt3, "--max-iteration-time", str(predicted / 2)),  # exit 1
        ("check", "--request", gpt3, "--max-iteration-time", "1", "--format", "json"),
        ("check", "--request", gpt3, "--baseline", "none-stored"),  # 404
        ("plan", "--request", small, "--gpus", "8", "--top-k", "3"),
        ("plan", "--request", small, "--gpus", "8", "--format", "table"),
        ("matrix", "--request", small, "--format", "csv"),
        ("matrix", "--request", small, "--format", "json", "--level", "node"),
        ("matrix", "--request", small, "--format", "png"),
        ("matrix", "--request", small, "--format", "svg"),  # 422: not a format
        ("timeline", "--request", small),
        ("timeline", "--request", small, "--format", "table", "--max-microbatches-shown", "4"),
        ("timeline", "--request", small, "--format", "svg"),
        ("timeline", "--request", small, "--format", "gif"),  # 422: not a format
        (
            "bandwidth",
            "--profile",
            "dgx-a100-nominal",
            "--op",
            "allreduce",
            "--ranks",
            "64",
            "--nodes",
            "8",
            "--bytes",
            "256MiB",
        ),
        ("bandwidth", "--profile", "dgx-a100-nominal", "--op", "scatter", "--ranks", "8"),
        (
            "bandwidth",
            "--profile",
            "dgx-h100-nominal",
            "--op",
            "all_gather",
            "--ranks",
            "16",
            "--nodes",
            "2",
            "--format",
            "table",
        ),
        ("profile", "list", "--format", "json"),
        ("profile", "list"),
        ("profile", "show", "dgx-h100-nominal"),
        ("profile", "show", "no-such-profile"),
        ("baseline", "show", "no-such-baseline"),
        ("baseline", "show", ".."),  # 422: not a name
        ("profile", "upload-log", "dgx-a100-nominal", training_log, "--set", "tensor=0"),  # 422
        (
            "--token",
            "wrong",
            "profile",
            "create",
            "x",
            "--gpu-model",
            "H100",
            "--gpus-per-node",
            "8",
        ),
    ]
    for args in same_everywhere:
        local, remote = _both(server, *args)
        _agree(local, remote)
    assert run("estimate", "--request", typo).exit_code == 2  # the cases above did fail

    log = tmp_path / "all_reduce_8gpu.txt"
    log.write_text(_nccl_all_reduce_text(), encoding="utf-8")
    for side, prefix in (((), "local"), (("--server", server), "remote")):
        name = f"{prefix}-lab"
        steps = [
            (
                "profile",
                "create",
                name,
                "--gpu-model",
                "A100-SXM4-80GB",
                "--gpus-per-node",
                "8",
                "--peak-tflops",
                "312",
                "--utilization",
                "0.45",
            ),
            ("profile", "upload", name, str(log)),
            ("profile", "upload", name, str(log)),  # already stored
            ("baseline", "set", f"{prefix}-base", "--request", gpt3),
        ]
        for args in steps:
            result = run(*side, *args)
            assert result.exit_code == 0, (args, result.stderr)
    for pair in (
        (
            ("profile", "create", "local-lab", "--gpu-model", "X", "--gpus-per-node", "8"),
            ("profile", "create", "remote-lab", "--gpu-model", "X", "--gpus-per-node", "8"),
        ),
        (("profile", "show", "local-lab"), ("profile", "show", "remote-lab")),
        (("baseline", "show", "local-base"), ("baseline", "show", "remote-base")),
        (
            (
                "bandwidth",
                "--profile",
                "local-lab",
                "--op",
                "all_reduce",
                "--ranks",
                "8",
                "--bytes",
                "4MiB",
            ),
            (
                "bandwidth",
                "--profile",
                "remote-lab",
                "--op",
                "all_reduce",
                "--ranks",
                "8",
                "--bytes",
                "4MiB",
            ),
        ),
        (
            ("check", "--request", gpt3, "--baseline", "local-base", "--format", "json"),
            ("check", "--request", gpt3, "--baseline", "remote-base", "--format", "json"),
        ),
        (
            ("profile", "upload-log", "local-lab", training_log, "--set", "recompute=none"),
            ("profile", "upload-log", "remote-lab", training_log, "--set", "recompute=none"),
        ),
        (
            ("profile", "uploads", "local-lab", "--format", "json"),
            ("profile", "uploads", "remote-lab", "--format", "json"),
        ),
        (("profile", "delete", "local-lab"), ("profile", "delete", "remote-lab")),
        (("profile", "calibrate", "dgx-a100-nominal", "--measurements", calibration),) * 2,
    ):
        local_args, remote_args = pair
        local, remote = run(*local_args), run("--server", server, *remote_args)
        _agree(local, remote, mask=True)
        if local_args[1] != "create":  # the profiles exist: every one of these succeeds
            assert local.exit_code == 0, (local_args, local.stderr)
    # what one side wrote, the other reads the same
    for args in (("profile", "list", "--format", "json"), ("baseline", "show", "remote-base")):
        _agree(*_both(server, *args))


def test_a_bad_commest_variable_exits_2_naming_it(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMMEST_MAX_PLAN_LAYOUTS", "lots")
    get_settings.cache_clear()
    result = run("estimate", "--request", str(EXAMPLES / "estimate-paper-scalar-c.json"))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: COMMEST_MAX_PLAN_LAYOUTS='lots': ")


# --------------------------------------------------------------------------- the SQLite fast path


@pytest.fixture
def started_sqlite(tmp_path: Path) -> Iterator[Path]:
    """A SQLite file started as the server starts one, with a custom profile without runs
    and one with an uploaded run."""
    from api.runtime import Runtime
    from api.settings import Settings
    from profiles import repository

    path = tmp_path / "fast.sqlite3"
    runtime = Runtime(Settings(database_url=f"sqlite:///{path}", data_dir=tmp_path / "data"))
    try:
        runtime.start()
        with runtime.transaction() as session:
            repository.create_profile(
                session=session,
                name="lab",
                gpu_model="H100",
                gpus_per_node=8,
                peak_tflops=989.0,
                peak_tflops_by_dtype={"fp8": 1979.0},
                gpu_memory_bytes=80 * 10**9,
                utilization=0.4,
                utilization_source="given",
            )
            repository.create_profile(
                session=session, name="lab-runs", gpu_model="A100", gpus_per_node=8
            )
            repository.upload_runs(
                session=session, profile_name="lab-runs", text=_nccl_all_reduce_text()
            )
    finally:
        runtime.close()
    yield path


def _server_snapshot(path: Path, name: str) -> Any:
    """The snapshot the server reads (api.caches, through SQLAlchemy)."""
    from api.caches import ProviderCache, load_snapshot
    from profiles.db import make_engine

    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            return load_snapshot(connection=connection, name=name, cache=ProviderCache())
    finally:
        engine.dispose()


def test_the_sqlite_reader_agrees_with_the_servers_snapshot(started_sqlite: Path) -> None:
    from dataclasses import fields

    from api.cli.sqlite_profiles import SqliteProfiles
    from estimator.bandwidth import Collective, TrafficKind
    from profiles.nominal import NOMINAL_SPECS

    reader = SqliteProfiles(started_sqlite)
    for name in NOMINAL_SPECS:
        fast, server = reader.profile(name), _server_snapshot(started_sqlite, name)
        assert fast is not None, name
        for field in fields(fast):
            if field.name != "bandwidth":
                assert getattr(fast, field.name) == getattr(server, field.name), field.name
        for op in (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.ALLTOALL):
            for ranks, nodes in ((8, 1), (64, 8)):
                for size in (1e3, 1e6, 1e9):
                    try:
                        expected = server.bandwidth.explain(TrafficKind.DP, op, ranks, nodes, size)
                    except Exception as exc:  # a profile without curves answers nothing
                        with pytest.raises(type(exc)):
                            fast.bandwidth.explain(TrafficKind.DP, op, ranks, nodes, size)
                        continue
                    assert fast.bandwidth.explain(TrafficKind.DP, op, ranks, nodes, size) == (
                        expected
                    )
    assert reader.profile("lab") is None  # its own: fallback curves by GPU family, server's path
    assert reader.profile("lab-runs") is None  # runs: the server's path builds the provider
    assert reader.profile("no-such-profile") is None  # the server's path names the error


def test_the_sqlite_reader_answers_only_a_started_database(
    started_sqlite: Path, tmp_path: Path
) -> None:
    import sqlite3

    from api.cli.sqlite_profiles import SqliteProfiles

    missing = tmp_path / "absent.sqlite3"
    assert SqliteProfiles(missing).profile("dgx-a100-nominal") is None
    assert not missing.exists()  # never created
    connection = sqlite3.connect(started_sqlite, isolation_level=None)
    try:
        reader = SqliteProfiles(started_sqlite)
        assert reader.profile("dgx-a100-nominal") is not None
        (head,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        connection.execute("UPDATE alembic_version SET version_num = 'older'")
        assert reader.profile("dgx-a100-nominal") is None  # not at head
        connection.execute("UPDATE alembic_version SET version_num = ?", (head,))
        assert reader.profile("dgx-a100-nominal") is not None
        connection.execute("DELETE FROM profiles WHERE name = 'dgx-h100-nominal'")
        assert reader.profile("dgx-a100-nominal") is None  # a nominal profile missing
    finally:
        connection.close()


def test_the_snapshot_columns_are_the_servers() -> None:
    import sqlite3

    from api.caches import _SNAPSHOT
    from api.cli.sqlite_profiles import SNAPSHOT_SQL
    from api.snapshots import SNAPSHOT_COLUMNS

    assert tuple(c.name for c in _SNAPSHOT.selected_columns) == SNAPSHOT_COLUMNS
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(
            "CREATE TABLE profiles (id, revision, name, gpus_per_node, peak_tflops,"
            " peak_flops_json, gpu_memory_bytes, utilization, utilization_source, nominal,"
            " gpu_model)"
        )
        connection.execute("CREATE TABLE runs (profile_id)")
        cursor = connection.execute(SNAPSHOT_SQL, ("x",))
        assert tuple(d[0] for d in cursor.description) == (*SNAPSHOT_COLUMNS, "has_runs")
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (("estimate", "--request", str(ESTIMATE_EXAMPLE)), set()),
        (("estimate", "--request", str(EXAMPLES / "estimate-paper-scalar-c.json")), set()),
        (("check", "--request", str(ESTIMATE_EXAMPLE), "--max-iteration-time", "100"), set()),
        (("estimate", "--request", str(ESTIMATE_EXAMPLE), "--format", "table"), {"rich"}),
        (("profile", "list", "--format", "json"), {"sqlalchemy"}),  # the database, no web
    ],
)
def test_a_local_estimate_loads_no_web_database_or_plotting_library(
    env: Path, args: tuple[str, ...], allowed: set[str]
) -> None:
    import os
    import subprocess
    import sys

    assert run("estimate", "--request", str(ESTIMATE_EXAMPLE)).exit_code == 0  # started
    probe = (
        "import sys\n"
        "from api.cli import main\n"
        f"sys.argv = ['commest', *{list(args)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as done:\n"
        "    assert not done.code, done.code\n"
        "heavy = ('sqlalchemy', 'alembic', 'fastapi', 'starlette', 'uvicorn', 'httpx',\n"
        "         'matplotlib', 'rich', 'pydantic_settings')\n"
        "print('LOADED', *(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=dict(os.environ),
    )
    loaded = set(done.stdout.strip().splitlines()[-1].split()[1:])
    assert loaded == allowed, done.stderr


def test_an_unreadable_training_log_is_named_as_such(env: Path, tmp_path: Path) -> None:
    log = tmp_path / "not-a-log.txt"
    log.write_text("hello\n", encoding="utf-8")
    refused = run("profile", "upload-log", "dgx-a100-nominal", str(log))
    assert refused.exit_code == 2
    assert "Unreadable training log" in refused.stderr
    assert "benchmark" not in refused.stderr


def test_the_breakdown_table_has_no_range_row_without_a_range() -> None:
    from rich.console import Console

    from api.cli.tables import breakdown_table

    def rendered(result: dict[str, Any]) -> str:
        console = Console(record=True, width=100)
        console.print(breakdown_table(result))
        return console.export_text()

    base = {"iteration_time_s": 2.0, "breakdown_s": {"compute": 2.0}}
    assert "likely measured" not in rendered({**base, "iteration_time_range_s": None})
    assert "likely measured" in rendered({**base, "iteration_time_range_s": [1.9, 2.3]})


def test_plan_table_names_experts_folded_over_tp() -> None:
    """A planned layout with expert_tensor_parallel 1 reads '<ep> etp1' in the plan table's
    ep column; one at the layer's TP keeps the bare EP size."""
    from api.cli.tables import plan_rows

    def entry(**layout: object) -> dict[str, object]:
        base = {"pipeline": 1, "tensor": 2, "data": 8, "expert_parallel": 16}
        return {"rank": 1, "iteration_time_s": 1.0, "layout": {**base, **layout}}

    folded, at_tp = plan_rows([entry(expert_tensor_parallel=1), entry(expert_tensor_parallel=None)])
    assert folded["ep"] == "16 etp1"
    assert at_tp["ep"] == 16
