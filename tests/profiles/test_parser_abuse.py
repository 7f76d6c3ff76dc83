"""Issue 6: hostile inputs to the parsers return rows or raise the one ParseError."""

import math
import random

import pytest

from estimator.errors import ParseError
from profiles.parsers import parse_benchmark_text

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  1001 on node-a device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  1002 on node-a device  1 [0x0b] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
ROW = (
    "  {size:>12}  {count:>12}     float     sum      -1  {t:>8}  {alg:>6}  {bus:>6}      0"
    "  {t:>8}  {alg:>6}  {bus:>6}      0\n"
)


def table(rows: list[tuple[int, str]]) -> str:
    body = "".join(
        ROW.format(size=size, count=max(size // 4, 1), t=t, alg="1.00", bus="1.00")
        for size, t in rows
    )
    return "# Collective test starting: all_reduce_perf\n" + HEADER + body


def test_fifty_megabytes_of_noise_raises_parse_error_quoting_lines() -> None:
    rng = random.Random(6)
    alphabet = "abcdefghijklmnopqrstuvwxyz 0123456789#:-.\t"
    line = "".join(rng.choice(alphabet) for _ in range(100)) + "\n"
    noise = line * (50 * 1024 * 1024 // len(line))
    assert len(noise) >= 50_000_000
    with pytest.raises(ParseError) as err:
        parse_benchmark_text(noise)
    assert err.value.lines and err.value.lines[0][0] >= 1


def test_binary_garbage_raises_parse_error() -> None:
    rng = random.Random(7)
    garbage = bytes(rng.randrange(256) for _ in range(200_000)).decode("latin-1")
    with pytest.raises(ParseError):
        parse_benchmark_text(garbage)


def test_a_billion_byte_message_is_a_valid_row() -> None:
    run = parse_benchmark_text(table([(1024, "5.00"), (1_000_000_000, "4200.0")])).runs[0]
    sizes = {p.size_bytes for p in run.points}
    assert 1_000_000_000 in sizes


@pytest.mark.parametrize("bad_time", ["nan", "inf", "-5.00", "0.00", "-inf"])
def test_rows_with_impossible_times_are_dropped_with_a_warning(bad_time: str) -> None:
    result = parse_benchmark_text(table([(1024, "5.00"), (2048, bad_time), (4096, "6.00")]))
    run = result.runs[0]
    assert {p.size_bytes for p in run.points} == {1024, 4096}
    assert all(math.isfinite(p.time_us) and p.time_us > 0 for p in run.points)
    assert run.warnings or result.warnings


def test_an_absurd_size_field_never_becomes_a_point() -> None:
    result = parse_benchmark_text(table([(1024, "5.00"), (10**30, "6.00")]))
    assert all(p.size_bytes < 10**20 for run in result.runs for p in run.points)


def test_reordered_and_duplicated_rows_still_parse() -> None:
    text = table([(4096, "6.00"), (1024, "5.00"), (1024, "5.00"), (2048, "5.50")])
    run = parse_benchmark_text(text).runs[0]
    assert {p.size_bytes for p in run.points} == {1024, 2048, 4096}
