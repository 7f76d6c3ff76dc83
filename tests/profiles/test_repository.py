"""Repository functions against real databases (SQLite file and PostgreSQL)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from estimator.bandwidth import Collective, TrafficKind
from estimator.errors import ConflictError, NotFoundError, ParseError, ValidationError
from profiles import repository as repo
from profiles.calibration import CalibrationSample, fit_utilization
from profiles.db import transaction
from profiles.models import Calibration, Point, Profile, Run, Upload
from profiles.nominal import NOMINAL_SPECS
from profiles.parsed import ParsedPoint, ParsedRun

FIXTURES = Path(__file__).parent / "fixtures"
TEXT = "# all_reduce_perf, hand-made\n    1024  256 float sum -1  12.0 ...\n"


def _parsed(
    op: str | None = "all_reduce",
    ranks: int | None = 16,
    nodes: int | None = 2,
    *,
    alpha_us: float = 10.0,
    beta_gbps: float = 50.0,
    backend: str = "nccl",
) -> ParsedRun:
    points = []
    for exponent in range(10, 21, 2):
        size = 2**exponent
        t = alpha_us + size / (beta_gbps * 1e3)
        algbw = size / (t * 1e3)
        for in_place in (False, True):
            points.append(
                ParsedPoint(size, size // 4, t, algbw, algbw * 2 * 15 / 16, in_place, wrong=0)
            )
    return ParsedRun(
        collective=op,
        tool="nccl-tests",
        backend=backend,
        ranks=ranks,
        nodes=nodes,
        ranks_per_node=None,
        gpu_model="NVIDIA H100 80GB HBM3",
        dtype="float",
        redop="sum",
        tool_version="2.13.8",
        points=points,
    )


def _counts(session: Session) -> dict[str, int]:
    session.rollback()  # a fresh snapshot
    return {
        model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
        for model in (Profile, Upload, Run, Point, Calibration)
    }


def _profile(session: Session, name: str = "cluster-a") -> Profile:
    return repo.create_profile(session=session, name=name, gpu_model="H100", gpus_per_node=8)


def test_create_profile_stores_it_with_utc_timestamps(session: Session) -> None:
    repo.create_profile(
        session=session,
        name="cluster-a",
        gpu_model="H100",
        gpus_per_node=8,
        peak_tflops=989.0,
        peak_tflops_by_dtype={"bf16": 989.0},
        utilization=0.4,
    )
    session.commit()
    session.expunge_all()
    profile = repo.get_profile(session=session, name="cluster-a")
    assert (profile.gpus_per_node, profile.peak_tflops_by_dtype) == (8, {"bf16": 989.0})
    assert profile.utilization_source == "given" and profile.nominal is False
    assert profile.created_at.tzinfo is not None
    assert profile.created_at.utcoffset() == UTC.utcoffset(None)


def test_duplicate_profile_name_raises_conflict_and_keeps_the_transaction(
    session: Session,
) -> None:
    _profile(session)
    with pytest.raises(ConflictError, match="cluster-a"):
        _profile(session)
    _profile(session, "cluster-b")  # the session is still usable
    session.commit()
    assert [p.name for p in repo.list_profiles(session=session)] == ["cluster-a", "cluster-b"]


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "naïve", "a/b"])
def test_invalid_profile_name_is_refused(session: Session, name: str) -> None:
    with pytest.raises(ValidationError) as info:
        _profile(session, name)
    assert info.value.field == "name"


def test_unknown_profile_is_not_found(session: Session) -> None:
    with pytest.raises(NotFoundError):
        repo.get_profile(session=session, name="nope")
    with pytest.raises(NotFoundError):
        repo.update_profile(session=session, name="nope", changes={"description": "x"})
    with pytest.raises(NotFoundError):
        repo.delete_profile(session=session, name="nope")


def test_update_profile_changes_fields_and_refuses_a_taken_name(session: Session) -> None:
    _profile(session)
    _profile(session, "cluster-b")
    updated = repo.update_profile(
        session=session, name="cluster-a", changes={"utilization": 0.5, "description": "d"}
    )
    assert (updated.utilization, updated.utilization_source, updated.description) == (
        0.5,
        "given",
        "d",
    )
    with pytest.raises(ConflictError):
        repo.update_profile(session=session, name="cluster-a", changes={"name": "cluster-b"})
    assert repo.get_profile(session=session, name="cluster-a").utilization == 0.5


def test_concurrent_creators_get_one_success_and_conflicts(
    db_sessions: sessionmaker[Session],
) -> None:
    def create(_: int) -> str:
        try:
            with transaction(db_sessions) as s:
                _profile(s, "contested")
        except ConflictError:
            return "conflict"
        return "created"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(create, range(32)))
    assert outcomes.count("created") == 1 and outcomes.count("conflict") == 31


def test_upload_same_text_twice_stores_once(session: Session) -> None:
    _profile(session)
    first = repo.store_parsed_runs(
        session=session, profile_name="cluster-a", text=TEXT, runs=[_parsed()]
    )
    session.commit()
    second = repo.store_parsed_runs(
        session=session, profile_name="cluster-a", text=TEXT, runs=[_parsed()]
    )
    session.commit()
    assert (first.already_stored, second.already_stored) == (False, True)
    assert [r.id for r in second.runs] == [r.id for r in first.runs]
    counts = _counts(session)
    assert (counts["uploads"], counts["runs"], counts["points"]) == (1, 1, 12)


def test_upload_keeps_the_text_verbatim(session: Session) -> None:
    _profile(session)
    text = "line one\r\nline two\n\ttab  \n"
    outcome = repo.store_parsed_runs(
        session=session, profile_name="cluster-a", text=text, runs=[_parsed()]
    )
    session.commit()
    session.expunge_all()
    stored = repo.get_upload(session=session, profile_name="cluster-a", upload_id=outcome.upload.id)
    assert stored.raw_text == text and stored.size_bytes == len(text.encode())


def test_stored_run_carries_its_fitted_alpha_and_beta(session: Session) -> None:
    _profile(session)
    outcome = repo.store_parsed_runs(
        session=session, profile_name="cluster-a", text=TEXT, runs=[_parsed(alpha_us=7.0)]
    )
    (run,) = outcome.runs
    assert run.alpha_us == pytest.approx(7.0, rel=1e-9)
    assert run.beta_gbps == pytest.approx(50.0, rel=1e-9)
    assert run.ranks_per_node == 8


def test_upload_missing_a_field_leaves_the_database_unchanged(session: Session) -> None:
    _profile(session)
    session.commit()
    before = _counts(session)
    with pytest.raises(ValidationError) as info:
        repo.store_parsed_runs(
            session=session,
            profile_name="cluster-a",
            text=TEXT,
            runs=[_parsed(), _parsed(nodes=None)],
        )
    assert info.value.field == "runs[1].nodes"
    session.commit()
    assert _counts(session) == before


def test_upload_failing_midway_leaves_nothing_even_if_the_caller_commits(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    _profile(session)
    session.commit()
    before = _counts(session)
    real_flush = Session.flush
    calls = {"n": 0}

    def flaky_flush(self: Session, objects: object = None) -> None:
        calls["n"] += 1
        real_flush(self)
        if calls["n"] == 2:  # after the upload row and the first runs are written
            raise RuntimeError("disk full")

    monkeypatch.setattr(Session, "flush", flaky_flush)
    with pytest.raises(RuntimeError, match="disk full"):
        repo.store_parsed_runs(
            session=session,
            profile_name="cluster-a",
            text=TEXT,
            runs=[_parsed(), _parsed(ranks=8, nodes=1)],
        )
    monkeypatch.undo()
    assert calls["n"] >= 2
    session.commit()
    assert _counts(session) == before


def test_unparseable_text_leaves_the_database_unchanged(session: Session) -> None:
    pytest.importorskip("profiles.parsers")
    _profile(session)
    session.commit()
    before = _counts(session)
    with pytest.raises(ParseError):
        repo.upload_runs(session=session, profile_name="cluster-a", text="hello\nworld\n")
    session.commit()
    assert _counts(session) == before


def test_upload_runs_parses_nccl_tests_output(session: Session) -> None:
    pytest.importorskip("profiles.parsers")
    _profile(session)
    text = (FIXTURES / "nccl_all_reduce_16gpu_2node.txt").read_text()
    outcome = repo.upload_runs(session=session, profile_name="cluster-a", text=text)
    session.commit()
    (run,) = outcome.runs
    assert (run.collective, run.ranks, run.nodes) == ("all_reduce", 16, 2)
    assert len(run.points) == 10
    provider = repo.load_bandwidth(session=session, profile_name="cluster-a")
    answer = provider.explain(TrafficKind.DP, Collective.ALL_REDUCE, 16, 2, 1073741824)
    assert answer.method == "measured"
    assert answer.busbw_gbps == pytest.approx(884.19, abs=0.01)  # the printed busbw


def test_concurrent_identical_uploads_store_once(db_sessions: sessionmaker[Session]) -> None:
    with transaction(db_sessions) as s:
        _profile(s)

    def upload(_: int) -> bool:
        with transaction(db_sessions) as s:
            outcome = repo.store_parsed_runs(
                session=s, profile_name="cluster-a", text=TEXT, runs=[_parsed()]
            )
            return outcome.already_stored

    with ThreadPoolExecutor(max_workers=8) as pool:
        stored = list(pool.map(upload, range(8)))
    assert stored.count(False) == 1
    with db_sessions() as s:
        assert _counts(s)["uploads"] == 1 and _counts(s)["runs"] == 1


def test_text_with_nul_is_refused(session: Session) -> None:
    _profile(session)
    with pytest.raises(ValidationError):
        repo.store_parsed_runs(
            session=session, profile_name="cluster-a", text="a\x00b", runs=[_parsed()]
        )


def test_delete_profile_removes_its_uploads_runs_and_points(session: Session) -> None:
    _profile(session)
    repo.store_parsed_runs(session=session, profile_name="cluster-a", text=TEXT, runs=[_parsed()])
    session.commit()
    repo.delete_profile(session=session, name="cluster-a")
    session.commit()
    assert _counts(session) == dict.fromkeys(
        ("profiles", "uploads", "runs", "points", "calibrations"), 0
    )


def test_list_runs_filters_and_get_run_checks_the_profile(session: Session) -> None:
    _profile(session)
    _profile(session, "cluster-b")
    outcome = repo.store_parsed_runs(
        session=session,
        profile_name="cluster-a",
        text=TEXT,
        runs=[_parsed(), _parsed("all_gather", 8, 1)],
    )
    gathers = repo.list_runs(session=session, profile_name="cluster-a", op="allgather")
    assert [r.collective for r in gathers] == ["all_gather"]
    run_id = outcome.runs[0].id
    assert repo.get_run(session=session, profile_name="cluster-a", run_id=run_id).id == run_id
    with pytest.raises(NotFoundError):
        repo.get_run(session=session, profile_name="cluster-b", run_id=run_id)


def test_load_bandwidth_answers_from_stored_runs(session: Session) -> None:
    _profile(session)
    repo.store_parsed_runs(session=session, profile_name="cluster-a", text=TEXT, runs=[_parsed()])
    session.commit()
    provider = repo.load_bandwidth(session=session, profile_name="cluster-a")
    answer = provider.explain(TrafficKind.DP, Collective.ALL_REDUCE, 16, 2, 4096)
    t = 10.0 + 4096 / 50e3
    assert answer.method == "measured"
    assert answer.busbw_gbps == 2 * 15 / 16 * 4096 / (t * 1e3)
    assert "run " in answer.source


def test_nominal_profiles_are_present_after_ensure_and_ensure_is_idempotent(
    session: Session,
) -> None:
    assert sorted(repo.ensure_nominal_profiles(session=session)) == sorted(NOMINAL_SPECS)
    session.commit()
    assert repo.ensure_nominal_profiles(session=session) == []
    profile = repo.get_profile(session=session, name="dgx-a100-nominal")
    assert profile.nominal and profile.peak_tflops == 312.0 and profile.gpus_per_node == 8
    provider = repo.load_bandwidth(session=session, profile_name="dgx-a100-nominal")
    answer = provider.explain(TrafficKind.TP, Collective.ALL_REDUCE, 8, 1, 2**30)
    assert answer.method == "nominal"


def test_save_calibration_records_it_and_sets_a_fitted_utilization(session: Session) -> None:
    _profile(session)
    samples = [CalibrationSample(10.0, 1.0, 26.0, label="a"), CalibrationSample(4.0, 0.5, 10.5)]
    result = fit_utilization(samples)
    repo.save_calibration(
        session=session,
        profile_name="cluster-a",
        inputs={"layouts": ["a", "b"]},
        samples=samples,
        result=result,
    )
    session.commit()
    profile = repo.get_profile(session=session, name="cluster-a")
    assert profile.utilization == pytest.approx(0.4) and profile.utilization_source == "fitted"
    (stored,) = repo.list_calibrations(session=session, profile_name="cluster-a")
    assert stored.residuals[0]["label"] == "a" and stored.inputs == {"layouts": ["a", "b"]}


def test_put_baseline_creates_then_replaces(session: Session) -> None:
    first, created = repo.put_baseline(
        session=session, name="gpt-175b", request={"p": 8}, iteration_time_s=12.5
    )
    session.commit()
    second, created_again = repo.put_baseline(
        session=session, name="gpt-175b", request={"p": 16}, iteration_time_s=10.0
    )
    session.commit()
    assert (created, created_again) == (True, False) and first.id == second.id
    stored = repo.get_baseline(session=session, name="gpt-175b")
    assert (stored.request, stored.iteration_time_s) == ({"p": 16}, 10.0)
    with pytest.raises(NotFoundError):
        repo.get_baseline(session=session, name="other")


def test_transaction_rolls_back_on_error(db_sessions: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError, match="boom"), transaction(db_sessions) as s:
        _profile(s)
        s.flush()
        raise RuntimeError("boom")
    with db_sessions() as s:
        assert repo.count_profiles(session=s) == 0
