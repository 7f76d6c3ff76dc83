"""Benchmark-output parsers: nccl-tests / rccl-tests and OSU (profiles.parsers)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from estimator.errors import ParseError, ValidationError
from profiles.parsed import ParsedPoint, ParsedRun, ParseResult
from profiles.parsers import apply_hints, parse_benchmark_text

FIXTURES = Path(__file__).parent / "fixtures"


class Hints(TypedDict, total=False):
    """Query-parameter hints, as ``apply_hints`` takes them."""

    op: str
    ranks: int
    nodes: int
    backend: str
    dtype: str


HEADER = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"


def load(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def parse(name: str) -> ParseResult:
    return parse_benchmark_text(load(name))


def one(name: str) -> ParsedRun:
    result = parse(name)
    assert len(result.runs) == 1
    return result.runs[0]


def point(run: ParsedRun, size: int, *, in_place: bool = False) -> ParsedPoint:
    matches = [p for p in run.points if p.size_bytes == size and p.in_place is in_place]
    assert len(matches) == 1
    return matches[0]


# -- nccl-tests ------------------------------------------------------------------------------


def test_all_reduce_8_gpus_one_node_new_format() -> None:
    run = one("nccl_all_reduce_8gpu.txt")
    assert (run.collective, run.tool, run.backend) == ("all_reduce", "nccl-tests", "nccl")
    assert (run.ranks, run.nodes, run.ranks_per_node) == (8, 1, 8)
    assert run.gpu_model == "NVIDIA H100 80GB HBM3"
    assert (run.dtype, run.redop) == ("float", "sum")
    assert run.tool_version == "2.17.6"
    assert run.source_test == "all_reduce_perf"
    assert run.hosts == ["dgx-a-01"]
    assert run.missing == []
    assert run.warnings == []
    assert len(run.points) == 2 * 25  # 8 B .. 128 MiB, out-of-place and in-place
    assert run.avg_busbw_gbps == pytest.approx(137.644)
    row = point(run, 134217728)
    assert row.count == 33554432
    assert row.time_us == pytest.approx(384.83)
    assert row.algbw_gbps == pytest.approx(134217728 / 384.83 / 1e3)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 7 / 8)
    assert row.busbw_gbps == pytest.approx(610.35, abs=0.01)  # as nccl-tests printed it
    assert row.wrong == 0
    assert point(run, 134217728, in_place=True).time_us == pytest.approx(388.68)
    assert run.first_line == 2 and run.last_line == 45


def test_old_format_without_redop_and_root_columns() -> None:
    run = one("nccl_old_all_gather_noredop.txt")
    assert run.collective == "all_gather"  # from the command line ./build/all_gather_perf
    assert (run.ranks, run.nodes, run.gpu_model) == (12, 1, "Tesla V100-SXM3-32GB")
    assert run.redop is None and run.dtype == "float"
    assert run.tool_version is None
    row = point(run, 100663296)
    assert row.wrong is None  # the old "error" column is a max error, not a count
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 11 / 12)


def test_old_format_without_root_infers_all_reduce_from_columns() -> None:
    run = one("nccl_old_all_reduce_noroot.txt")
    assert run.collective == "all_reduce"
    assert any("inferred" in w for w in run.warnings)
    assert (run.ranks, run.gpu_model, run.avg_busbw_gbps) == (4, "Tesla K80", 2.54)
    assert point(run, 1073741824).time_us == 635380.0


def test_all_gather_sizes_are_output_buffer_and_busbw_factor() -> None:
    run = one("nccl_all_gather_8gpu.txt")
    assert (run.collective, run.redop, run.ranks) == ("all_gather", None, 8)
    row = point(run, 1073741824)
    assert row.count == 1073741824 // (4 * 8)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 7 / 8)
    assert row.busbw_gbps == pytest.approx(287.51, abs=0.01)


def test_alltoall() -> None:
    run = one("nccl_alltoall_8gpu.txt")
    assert (run.collective, run.tool_version, run.ranks) == ("alltoall", "2.18.3", 8)
    assert len(run.points) == 2 * 16
    assert point(run, 32768).busbw_gbps == pytest.approx(32768 / 25.13 / 1e3 * 7 / 8)


def test_sendrecv_two_nodes() -> None:
    run = one("nccl_sendrecv_2node.txt")
    assert (run.collective, run.ranks, run.nodes, run.ranks_per_node) == ("sendrecv", 2, 2, 1)
    assert run.hosts == ["ip-10-0-1-11", "ip-10-0-1-12"]
    row = point(run, 268435456)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps)


def test_reduce_scatter_drops_zero_size_rows_with_a_warning() -> None:
    run = one("nccl_reduce_scatter_2x4.txt")
    assert (run.collective, run.ranks, run.nodes, run.ranks_per_node) == ("reduce_scatter", 8, 2, 4)
    assert run.gpu_model == "NVIDIA A800-SXM4-80GB"
    assert min(p.size_bytes for p in run.points) == 32
    assert any("size 0" in w and "lines 19, 20" in w for w in run.warnings)
    assert point(run, 67108864).busbw_gbps == pytest.approx(67108864 / 1701.72 / 1e3 * 7 / 8)


def test_multi_node_16_ranks_over_2_hosts() -> None:
    run = one("nccl_all_reduce_16gpu_2node.txt")
    assert (run.ranks, run.nodes, run.ranks_per_node) == (16, 2, 8)
    assert run.hosts == ["worker-1", "worker-0"]
    assert (run.collective, run.dtype) == ("all_reduce", "bfloat16")
    assert run.source_test == "all_reduce_perf"  # from all_reduce_perf_mpi on the srun line
    row = point(run, 8589934592, in_place=True)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 15 / 16)


def test_srun_labels_info_noise_crlf_in_markdown_fence() -> None:
    run = one("nccl_srun_label_crlf_fence.txt")
    assert (run.collective, run.dtype, run.ranks, run.nodes) == ("all_reduce", "half", 8, 1)
    assert run.gpu_model == "NVIDIA H200"
    assert len(run.points) == 2 * 9
    assert run.warnings == []
    assert point(run, 1048576).time_us == pytest.approx(23.5)


def test_mpirun_tag_output_with_mpi_warnings_and_crlf() -> None:
    run = one("nccl_mpirun_tagged_crlf.txt")
    assert (run.ranks, run.nodes, run.tool_version) == (4, 1, "2.13.8")
    assert len(run.points) == 2 * 11
    assert run.first_line == 6  # the version line, after the MPI warning block
    assert run.avg_busbw_gbps == pytest.approx(109.965)


def test_run_that_died_midway_keeps_complete_rows_and_names_dropped_lines() -> None:
    run = one("nccl_died_midway.txt")
    assert (run.ranks, run.nodes) == (16, 2)
    assert max(p.size_bytes for p in run.points) == 131072
    assert len(run.points) == 2 * 15
    assert any("line 41" in w for w in run.warnings)
    assert any("trailer" in w and "8589934592" in w for w in run.warnings)
    assert run.avg_busbw_gbps is None


def test_two_tables_float_and_half() -> None:
    runs = parse("nccl_two_tables_float_half.txt").runs
    assert [r.dtype for r in runs] == ["float", "half"]
    assert [r.first_line for r in runs] == [1, 30]
    assert [r.avg_busbw_gbps for r in runs] == [pytest.approx(375.615), pytest.approx(379.99)]
    assert point(runs[1], 1048576).count == 524288


def test_two_collectives_named_by_their_command_lines() -> None:
    runs = parse("nccl_two_collectives.txt").runs
    assert [r.collective for r in runs] == ["all_gather", "reduce_scatter"]
    assert [r.redop for r in runs] == [None, "sum"]


def test_one_table_with_mixed_dtypes_gives_one_run_per_dtype() -> None:
    runs = parse("nccl_dtype_all_mixed.txt").runs
    assert [(r.dtype, len(r.points)) for r in runs] == [("float", 6), ("bfloat16", 6)]
    assert all(r.avg_busbw_gbps is None for r in runs)  # the average mixes both


def test_rccl_tests_on_mi300x() -> None:
    run = one("rccl_all_reduce_mi300x.txt")
    assert (run.backend, run.tool, run.tool_version) == ("rccl", "nccl-tests", "develop:83d38d9")
    assert (run.gpu_model, run.ranks, run.nodes) == ("AMD Instinct MI300X", 8, 1)


def test_table_without_context_leaves_ranks_and_nodes_missing() -> None:
    run = one("nccl_table_only.txt")
    assert run.collective == "all_reduce"  # busbw/algbw = 1.75 > 1 and count·4 = size
    assert run.missing == ["ranks", "nodes"]
    assert point(run, 1048576, in_place=True).busbw_gbps == 134.63  # printed figure kept


def test_redop_sum_root_minus_one_with_count_equal_size_but_no_evidence_stays_open() -> None:
    text = (
        f"{HEADER}\n  1024    256  float   sum    -1  10.00  0.10  0.10  0  10.00  0.10  0.10  0\n"
    )
    run = parse_benchmark_text(text).runs[0]
    assert run.collective is None
    assert run.missing == ["collective", "ranks", "nodes"]


def test_reduce_scatter_inferred_from_count_ratio() -> None:
    text = (
        f"{HEADER}\n  4096    128  float   sum    -1  10.00  0.41  0.36  0  10.00  0.41  0.36  0\n"
    )
    assert parse_benchmark_text(text).runs[0].collective == "reduce_scatter"


def test_newest_format_with_per_iteration_columns_and_timestamp() -> None:
    text = "\n".join(
        [
            "# nccl-tests version 2.20.0 nccl-headers=23102 nccl-library=23102",
            "# Collective test starting: all_reduce_perf",
            "#  Rank  0 Group  0 Pid 10 on node-a device  0 [0000:01:00] NVIDIA B200",
            "#  Rank  1 Group  0 Pid 11 on node-a device  1 [0000:02:00] NVIDIA B200",
            "#  size  count  type  redop  root  time  algbw  busbw  #wrong  i_min  i_max  i_p99"
            "  i_cv%  time  algbw  busbw  #wrong  i_min  i_max  i_p99  i_cv%  timestamp",
            "  1048576  262144  float  sum  -1  20.00  52.43  52.43  0  19.1  21.0  20.9  1.20"
            "  21.00  49.93  49.93  N/A  20.1  22.0  21.9  1.30  2025-06-01 12:00:00",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 51.18",
        ]
    )
    run = one_from(text)
    assert (run.ranks, run.tool_version, run.gpu_model) == (2, "2.20.0", "NVIDIA B200")
    assert point(run, 1048576).time_us == 20.0
    assert point(run, 1048576, in_place=True).wrong is None  # N/A
    assert point(run, 1048576, in_place=True).busbw_gbps == pytest.approx(1048576 / 21.0 / 1e3)


def one_from(text: str) -> ParsedRun:
    runs = parse_benchmark_text(text).runs
    assert len(runs) == 1
    return runs[0]


def test_rows_with_nan_inf_negative_or_zero_time_are_dropped_with_a_warning() -> None:
    lines = load("nccl_all_reduce_8gpu.txt").split("\n")
    header = lines.index(next(s for s in lines if s.startswith("#        (B)")))
    bad = {1: ("12.00", "nan"), 2: ("12.00", "inf"), 3: ("12.00", "-12.00"), 4: ("12.00", "0.00")}
    for offset, (old, new) in bad.items():
        lines[header + offset] = lines[header + offset].replace(old, new, 1)
    run = one_from("\n".join(lines))
    assert len(run.points) == 50 - 4
    assert all(math.isfinite(p.time_us) and p.time_us > 0 for p in run.points)
    assert all(math.isfinite(p.busbw_gbps) for p in run.points)
    numbers = ", ".join(str(header + 1 + k) for k in bad)
    assert any(numbers in w for w in run.warnings)


def test_huge_size_field_is_dropped_not_stored() -> None:
    text = load("nccl_all_reduce_8gpu.txt").replace(
        "           8             2     float", " 1000000000000000000             2     float", 1
    )
    run = one_from(text)
    assert all(p.size_bytes <= 2**53 for p in run.points)
    assert len(run.points) == 48


def test_duplicate_header_from_several_processes_is_read_once() -> None:
    head = (
        "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong"
    )
    row = "  1024  256  float  sum  -1  10.00  0.10  0.18  0  10.00  0.10  0.18  0"
    result = parse_benchmark_text(f"{head}\n{head}\n{row}\n")
    assert len(result.runs) == 1 and result.warnings == []


def test_lines_longer_than_4096_chars_are_skipped_with_a_warning() -> None:
    text = load("nccl_all_reduce_8gpu.txt") + "x" * 5000 + "\n"
    result = parse_benchmark_text(text)
    assert any("longer than 4096" in w and "line 48" in w for w in result.warnings)


# -- OSU -------------------------------------------------------------------------------------


def test_osu_allreduce_host_buffers() -> None:
    run = one("osu_allreduce.txt")
    assert (run.collective, run.tool, run.backend) == ("all_reduce", "osu", "mpi")
    assert (run.source_test, run.tool_version, run.dtype) == ("osu_allreduce", "7.3", "int8")
    assert run.ranks is None and run.missing == ["ranks", "nodes"]
    row = point(run, 1048576)
    assert row.time_us == pytest.approx(119.61)
    assert row.algbw_gbps == pytest.approx(1048576 / 119.61 / 1e3)
    assert math.isnan(row.busbw_gbps)
    assert len(run.points) == 19


def test_osu_allreduce_with_device_buffers() -> None:
    run = one("osu_allreduce_cuda.txt")
    assert run.collective == "all_reduce" and run.source_test == "osu_allreduce"
    assert any("CUDA" in w for w in run.warnings)
    assert point(run, 16777216).time_us == pytest.approx(301.12)


def test_osu_latency_is_sendrecv_between_two_ranks() -> None:
    run = one("osu_latency.txt")
    assert (run.collective, run.ranks, run.source_test) == ("sendrecv", 2, "osu_latency")
    assert run.tool_version == "5.6.2"
    assert run.missing == ["nodes"]
    row = point(run, 4194304)
    assert row.time_us == pytest.approx(382.92)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps)
    assert any("line 3" in w for w in run.warnings)  # the size-0 row


def test_osu_latency_with_device_buffers_notes_the_buffers() -> None:
    run = one("osu_latency_cuda.txt")
    assert (run.collective, run.ranks, run.tool_version) == ("sendrecv", 2, "7.2")
    assert any("DEVICE (D)" in w for w in run.warnings)


def test_osu_bw_time_is_size_over_bandwidth() -> None:
    run = one("osu_bw.txt")
    assert (run.collective, run.source_test, run.ranks) == ("sendrecv", "osu_bw", 2)
    row = point(run, 4194304)
    assert row.algbw_gbps == pytest.approx(11760.30 / 1e3)
    assert row.time_us == pytest.approx(4194304 / 11760.30)


def test_osu_bw_with_device_buffers() -> None:
    run = one("osu_bw_cuda.txt")
    assert len(run.points) == 26 and run.dtype == "int8"
    assert point(run, 33554432).busbw_gbps == pytest.approx(93.13052)
    assert any("DEVICE (D)" in w for w in run.warnings)


def test_osu_xccl_allreduce_backend_nccl() -> None:
    run = one("osu_xccl_allreduce.txt")
    assert (run.backend, run.source_test, run.tool_version) == ("nccl", "osu_xccl_allreduce", "7.5")


def test_unsupported_osu_test_is_reported() -> None:
    text = "# OSU MPI Bi-Directional Bandwidth Test v7.3\n# Size  Bandwidth (MB/s)\n1  2.0\n"
    with pytest.raises(ParseError, match="Bi-Directional"):
        parse_benchmark_text(text)


def test_nccl_and_osu_in_one_text() -> None:
    text = load("nccl_sendrecv_2node.txt") + "\n" + load("osu_latency.txt")
    runs = parse_benchmark_text(text).runs
    assert [r.tool for r in runs] == ["nccl-tests", "osu"]


# -- apply_hints -----------------------------------------------------------------------------


def test_hints_fill_osu_ranks_and_recompute_busbw() -> None:
    run = apply_hints(one("osu_allreduce.txt"), ranks=32, nodes=2)
    assert (run.ranks, run.nodes, run.ranks_per_node, run.missing) == (32, 2, 16, [])
    row = point(run, 1048576)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 31 / 32)


def test_hints_scale_osu_allgather_per_rank_sizes() -> None:
    run = apply_hints(one("osu_allgather.txt"), ranks=8, nodes=1)
    row = point(run, 8 * 1048576)
    assert row.time_us == pytest.approx(424.43)
    assert row.algbw_gbps == pytest.approx(8 * 1048576 / 424.43 / 1e3)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 7 / 8)
    again = apply_hints(run, ranks=8)
    assert again.points == run.points


def test_hints_that_contradict_the_text_lose_with_a_warning() -> None:
    original = one("nccl_all_reduce_8gpu.txt")
    run = apply_hints(original, op="all_gather", ranks=16, nodes=2, backend="rccl", dtype="bf16")
    assert (run.collective, run.ranks, run.nodes, run.backend, run.dtype) == (
        "all_reduce",
        8,
        1,
        "nccl",
        "float",
    )
    assert len(run.warnings) == 5 and all("the text wins" in w for w in run.warnings)
    assert original.warnings == []  # the input is not changed
    assert apply_hints(original, dtype="fp32").warnings == []  # same type, another spelling


def test_hints_fill_a_bare_table() -> None:
    run = apply_hints(one("nccl_table_only.txt"), ranks=8, nodes=1, backend="NCCL")
    assert (run.ranks, run.nodes, run.ranks_per_node, run.backend) == (8, 1, 8, "nccl")


@pytest.mark.parametrize(
    ("name", "hints", "field"),
    [
        ("osu_allreduce.txt", {}, "ranks"),
        ("osu_allreduce.txt", {"ranks": 4}, "nodes"),
        ("osu_latency.txt", {}, "nodes"),
        ("nccl_table_only.txt", {"nodes": 1}, "ranks"),
    ],
)
def test_missing_fields_name_the_query_parameter(name: str, hints: Hints, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        apply_hints(one(name), **hints)
    assert info.value.field == field and info.value.value is None
    assert f"add the query parameter {field}=" in info.value.message


def test_missing_collective_names_op() -> None:
    text = (
        f"{HEADER}\n  1024    256  float   none    -1  10.00  0.10  0.10  0  10.00  0.10  0.10  0\n"
    )
    run = parse_benchmark_text(text).runs[0]
    with pytest.raises(ValidationError) as info:
        apply_hints(run, ranks=2, nodes=1)
    assert info.value.field == "op"
    fixed = apply_hints(run, op="sendrecv", ranks=2, nodes=1)
    assert fixed.collective == "sendrecv" and fixed.points[0].busbw_gbps == 0.10


@pytest.mark.parametrize(
    ("hints", "field"),
    [
        ({"op": "allsum"}, "op"),
        ({"ranks": 0}, "ranks"),
        ({"nodes": -1}, "nodes"),
        ({"ranks": 4, "nodes": 8}, "nodes"),
        ({"backend": " "}, "backend"),
    ],
)
def test_bad_hints_are_validation_errors(hints: Hints, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        apply_hints(one("osu_allreduce.txt"), **hints)
    assert info.value.field == field


def test_single_rank_defaults_to_one_node() -> None:
    run = apply_hints(one("osu_allreduce.txt"), ranks=1)
    assert run.nodes == 1


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "  \n\r\n\t\n"])
def test_empty_text(text: str) -> None:
    with pytest.raises(ParseError, match="empty") as info:
        parse_benchmark_text(text)
    assert "expected an nccl-tests table" in info.value.message


def test_random_prose_quotes_first_lines_with_numbers() -> None:
    text = "\n".join(f"line of prose number {i}" for i in range(1, 9))
    with pytest.raises(ParseError) as info:
        parse_benchmark_text(text)
    assert info.value.lines == [(i, f"line of prose number {i}") for i in range(1, 6)]
    assert "line 1: 'line of prose number 1'" in info.value.message
    assert "OSU output (# Size  Avg Latency(us))" in info.value.message


def test_binary_garbage() -> None:
    text = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00".decode("latin-1")
    with pytest.raises(ParseError) as info:
        parse_benchmark_text(text)
    assert [n for n, _ in info.value.lines] == [1, 2, 3]


def test_table_header_without_readable_rows_quotes_the_rows() -> None:
    text = (
        f"{HEADER}\n"
        "  1024  256  float  sum  -1  nan  0.1  0.1  0  -3  0.1  0.1  0\n"
        "  2048  512  float\n"
    )
    with pytest.raises(ParseError, match="no readable rows") as info:
        parse_benchmark_text(text)
    assert [n for n, _ in info.value.lines] == [2, 3]


def test_header_block_without_table() -> None:
    text = "\n".join(load("nccl_all_reduce_8gpu.txt").split("\n")[:12])
    with pytest.raises(ParseError) as info:
        parse_benchmark_text(text)
    assert info.value.lines[0][0] == 1


# -- properties ------------------------------------------------------------------------------

_ALL = sorted(p.name for p in FIXTURES.glob("*.txt"))


def _mutate(text: str, data: st.DataObject) -> str:
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(0, 4))):
        if not lines:
            break
        i = data.draw(st.integers(0, len(lines) - 1))
        kind = data.draw(st.sampled_from(["cut", "dup", "drop", "num", "trunc", "swap"]))
        if kind == "cut":
            lines = lines[:i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "drop":
            del lines[i]
        elif kind == "trunc":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]))))]
        elif kind == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            tokens = lines[i].split()
            if tokens:
                k = data.draw(st.integers(0, len(tokens) - 1))
                tokens[k] = data.draw(
                    st.sampled_from(
                        [
                            "nan",
                            "inf",
                            "-inf",
                            "-1.5",
                            "0",
                            "1000000000000",
                            "9" * 30,
                            "N/A",
                            "1e309",
                            "-0",
                            "0x10",
                            "1_000",
                            "",
                            "\x00",
                        ]
                    )
                )
                lines[i] = "  ".join(tokens)
    return "\n".join(lines)


def _check(text: str) -> None:
    try:
        result = parse_benchmark_text(text)
    except ParseError as error:
        assert all(isinstance(n, int) and n >= 1 for n, _ in error.lines)
        return
    assert result.runs
    for run in result.runs:
        assert run.points
        for p in run.points:
            assert p.size_bytes > 0 and math.isfinite(p.time_us) and p.time_us > 0
            assert math.isfinite(p.algbw_gbps) and p.algbw_gbps >= 0
            assert math.isnan(p.busbw_gbps) or p.busbw_gbps >= 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_ALL), data=st.data())
def test_mutated_fixtures_parse_or_raise_parse_error(name: str, data: st.DataObject) -> None:
    _check(_mutate(load(name), data))


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=2000))
def test_any_text_parses_or_raises_parse_error(text: str) -> None:
    _check(text)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
                    "# OSU MPI Allreduce Latency Test v7.3",
                    "# Size       Avg Latency(us)",
                    "# Size      Bandwidth (MB/s)",
                    "# Avg bus bandwidth    : ",
                    "#  Rank  0 Group  0 Pid 1 on h device  0 [0x01] GPU",
                    "# Collective test starting: foo_perf",
                ]
            ),
            st.lists(
                st.one_of(
                    st.integers(-10, 10**15).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(str),
                    st.sampled_from(["float", "sum", "-1", "N/A", "none", "half"]),
                ),
                max_size=16,
            ).map("  ".join),
        ),
        max_size=30,
    )
)
def test_table_like_text_parses_or_raises_parse_error(lines: list[str]) -> None:
    _check("\n".join(lines))


def test_markdown_paste_without_hash_marks() -> None:
    run = one("nccl_no_hash_markdown.txt")
    assert (run.collective, run.ranks, run.nodes) == ("all_reduce", 2, 1)
    assert run.source_test == "all_reduce_perf"
    assert point(run, 16777216).time_us == 200.0
    assert run.avg_busbw_gbps == pytest.approx(39.6)


def test_nccl_tests_without_mpi_reports_each_process_alone() -> None:
    run = one("nccl_without_mpi_repeated_rank0.txt")
    assert run.ranks == 1 and run.nodes == 1
    assert any("without MPI" in w for w in run.warnings)
    assert any("sizes repeat" in w for w in run.warnings)
    assert all(p.busbw_gbps == 0.0 for p in run.points)  # one rank: all_reduce moves nothing


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(_ALL),
    op=st.one_of(st.none(), st.sampled_from(["all_reduce", "allgather", "alltoall", "bogus"])),
    ranks=st.one_of(st.none(), st.integers(-2, 64)),
    nodes=st.one_of(st.none(), st.integers(-2, 16)),
    backend=st.one_of(st.none(), st.sampled_from(["nccl", "mpi", "", "RCCL"])),
    dtype=st.one_of(st.none(), st.sampled_from(["bf16", "float", "fp8_e4m3", "weird"])),
)
def test_apply_hints_returns_a_complete_run_or_raises_validation_error(
    name: str,
    op: str | None,
    ranks: int | None,
    nodes: int | None,
    backend: str | None,
    dtype: str | None,
) -> None:
    run = parse(name).runs[-1]
    try:
        out = apply_hints(run, op=op, ranks=ranks, nodes=nodes, backend=backend, dtype=dtype)
    except ValidationError as error:
        assert error.field in {"op", "ranks", "nodes", "backend", "dtype"}
        return
    assert out.missing == []
    assert out.nodes is not None and out.ranks is not None and out.nodes <= out.ranks
    assert all(math.isfinite(p.busbw_gbps) and p.busbw_gbps >= 0 for p in out.points)
