"""Preparing uploads (pure): digests on parsed content, per-file errors, flags, hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from estimator.errors import ParseError, ValidationError
from profiles.uploads import Hints, UploadInput, parse_upload, parse_uploads, upload_flags

FIXTURES = Path(__file__).parent / "fixtures"
AR_8GPU = (FIXTURES / "nccl_all_reduce_8gpu.txt").read_text()
OSU_1GIB = (FIXTURES / "osu_xccl_allreduce_1gib.txt").read_text()


def _crlf_fenced(text: str) -> str:
    return "```text\r\n" + text.replace("\n", "\r\n") + "```\r\n"


def test_crlf_and_a_markdown_fence_keep_the_content_digest() -> None:
    plain = parse_upload(UploadInput(AR_8GPU))
    pasted = parse_upload(UploadInput(_crlf_fenced(AR_8GPU)))
    assert plain.sha256 != pasted.sha256
    assert plain.content_digest == pasted.content_digest


def test_other_hints_make_other_content() -> None:
    at_16 = parse_upload(UploadInput(OSU_1GIB, hints=Hints(ranks=16, nodes=2)))
    at_32 = parse_upload(UploadInput(OSU_1GIB, hints=Hints(ranks=32, nodes=4)))
    assert at_16.content_digest != at_32.content_digest


def test_a_changed_number_is_other_content() -> None:
    changed = AR_8GPU.replace("8192", "8193", 1)
    assert changed != AR_8GPU
    first, second = parse_uploads([UploadInput(AR_8GPU), UploadInput(changed)])
    assert first.content_digest != second.content_digest


def test_errors_name_the_file_they_are_about() -> None:
    with pytest.raises(ValidationError) as info:
        parse_upload(UploadInput(OSU_1GIB, filename="osu.txt"))
    assert info.value.field == "files[osu.txt].ranks" and info.value.context["file"] == "osu.txt"
    with pytest.raises(ParseError, match=r"file 'notes\.txt'"):
        parse_upload(UploadInput("hello\nworld\n", filename="notes.txt"))


@pytest.mark.parametrize(
    ("name", "quoted"),
    [
        ("nccl_failure_header_only.txt", "NCCL failure all_reduce.cu:95 'unhandled cuda error'"),
        ("nccl_failure_remote_peer.txt", "NCCL failure common.cu:921 'unhandled system error'"),
    ],
)
def test_a_failed_run_says_so_and_quotes_the_failure(name: str, quoted: str) -> None:
    text = (FIXTURES / "failures" / name).read_text()
    with pytest.raises(ParseError) as info:
        parse_upload(UploadInput(text, filename=name))
    assert quoted in str(info.value) and "failure" in str(info.value)
    assert any(quoted in line for _, line in info.value.lines)


def test_a_table_with_a_failure_after_it_warns_with_the_line() -> None:
    prepared = parse_upload(UploadInput((FIXTURES / "nccl_died_midway.txt").read_text()))
    assert any("Test NCCL failure common.cu:1029" in w for w in prepared.warnings)


def test_file_names_are_kept_without_directories_and_labels_are_checked() -> None:
    prepared = parse_upload(UploadInput(AR_8GPU, filename="C:\\logs\\run 1.txt", label=" a100 "))
    assert (prepared.filename, prepared.label) == ("run 1.txt", "a100")
    with pytest.raises(ValidationError) as info:
        parse_upload(UploadInput(AR_8GPU, label="x" * 200))
    assert info.value.field == "label"


def test_per_file_hints_override_the_request_hints() -> None:
    merged = Hints(ranks=8, nodes=1, backend="nccl").merged(Hints(ranks=16, nodes=2))
    assert merged == Hints(ranks=16, nodes=2, backend="nccl")


def test_a_gpu_of_another_family_is_flagged() -> None:
    text = (FIXTURES / "rccl_all_reduce_mi300x.txt").read_text()
    flags = upload_flags(
        parse_upload(UploadInput(text)), profile_name="a100", profile_gpu_model="A100-SXM4-80GB"
    )
    assert [f.code for f in flags] == ["gpu_mismatch"]
    assert "MI300X" in flags[0].message and "A100" in flags[0].message


def test_the_same_family_is_not_flagged() -> None:
    flags = upload_flags(
        parse_upload(UploadInput(AR_8GPU)), profile_name="h100", profile_gpu_model="H100 SXM"
    )
    assert flags == []


def test_a_bandwidth_beyond_the_links_is_flagged() -> None:
    # 1 GiB all_reduce over 16 ranks on 2 nodes in 1,348 us: 1,493 GB/s busbw, where 2 DGX A100
    # nodes carry at most 8 × 25 GB/s (× 2 for in-network reduction, × 1.25 margin: 500 GB/s).
    text = OSU_1GIB.replace("13482.01", "1348.20")
    prepared = parse_upload(UploadInput(text, hints=Hints(ranks=16, nodes=2)))
    (flag,) = upload_flags(prepared, profile_name="a100", profile_gpu_model="A100")
    assert flag.code == "exceeds_hardware" and "1493" in flag.message
    real = parse_upload(UploadInput(OSU_1GIB, hints=Hints(ranks=16, nodes=2)))
    assert upload_flags(real, profile_name="a100", profile_gpu_model="A100") == []
