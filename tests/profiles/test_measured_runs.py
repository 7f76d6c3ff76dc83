"""Measured runs stored from training logs, on real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from estimator.errors import LimitError, NotFoundError, ValidationError
from profiles import measured_runs as runs
from profiles import repository as repo
from profiles.calibration import fit_utilization, sample_from_predictions
from profiles.models import MeasuredRun
from profiles.training_logs import LogHints, ParsedTrainingLog, parse_training_log

FIXTURES = Path(__file__).parent / "fixtures" / "training_logs"


def _gpt2() -> str:
    return (FIXTURES / "megatron_lm_gpt2_345m_tp2_pp2.txt").read_text(encoding="utf-8")


def _llama() -> str:
    return (FIXTURES / "megatron_deepspeed_llama_tp2_pp2.txt").read_text(encoding="utf-8")


def _add(
    session: Session,
    text: str,
    profile: str = "a100",
    *,
    file_name: str | None = None,
    label: str | None = None,
) -> runs.MeasuredRunOutcome:
    parsed = parse_training_log(text)
    return runs.add_measured_run(
        session=session,
        profile_name=profile,
        parsed=parsed,
        source_text=text,
        file_name=file_name,
        label=label,
    )


@pytest.fixture
def profiles(session: Session) -> Session:
    for name in ("a100", "h100"):
        repo.create_profile(session=session, name=name, gpu_model="A100", gpus_per_node=8)
    session.commit()
    return session


def test_a_log_is_stored_once_whatever_its_line_ends_and_prefixes(profiles: Session) -> None:
    first = _add(profiles, _gpt2(), file_name="gpt2.log", label="gpt2 tp2 pp2")
    profiles.commit()
    assert not first.already_stored
    stored = first.run
    assert stored.iteration_time_s == pytest.approx(1.0826)
    assert stored.iterations_used == [200, 1000, 2000]
    assert stored.dropped == [
        {"iteration": 100, "reason": "warm-up"},
        {"iteration": 1100, "reason": "evaluation"},
    ]
    assert stored.request["layout"]["tensor"] == 2
    assert (stored.file_name, stored.label, stored.format) == (
        "gpt2.log",
        "gpt2 tp2 pp2",
        "megatron-lm",
    )
    again = "\r\n".join("[default0]:" + line for line in _gpt2().split("\n"))
    second = _add(profiles, again, file_name="other name.log")
    assert second.already_stored
    assert second.run.id == stored.id
    other_profile = _add(profiles, _gpt2(), profile="h100")
    assert not other_profile.already_stored


def test_an_incomplete_log_is_refused_naming_the_query_parameters(profiles: Session) -> None:
    text = _gpt2().replace("padded vocab", "padded vocabulary")
    with pytest.raises(ValidationError) as info:
        _add(profiles, text)
    assert info.value.field == "model.vocab_size"
    assert "vocab_size" in info.value.rule
    profiles.rollback()
    assert profiles.scalar(select(func.count()).select_from(MeasuredRun)) == 0
    parsed = parse_training_log(text, LogHints(vocab_size=50257))
    outcome = runs.add_measured_run(
        session=profiles,
        profile_name="a100",
        parsed=parsed,
        source_text=text,
        hints=runs.hints_dict(LogHints(vocab_size=50257)),
    )
    assert outcome.run.hints == {"vocab_size": 50257}
    assert outcome.run.request["model"]["vocab_size"] == 50432


def test_list_get_delete_and_pages(profiles: Session) -> None:
    a = _add(profiles, _gpt2()).run
    b = _add(profiles, _llama()).run
    profiles.commit()
    assert [r.id for r in runs.list_measured_runs(session=profiles, profile_name="a100")] == [
        a.id,
        b.id,
    ]
    page = runs.list_measured_runs(session=profiles, profile_name="a100", offset=1, limit=1)
    assert [r.id for r in page] == [b.id]
    assert runs.count_measured_runs(session=profiles, profile_name="a100") == 2
    assert runs.get_measured_run(session=profiles, profile_name="a100", run_id=b.id).format == (
        "megatron-deepspeed"
    )
    with pytest.raises(NotFoundError):
        runs.get_measured_run(session=profiles, profile_name="h100", run_id=b.id)
    runs.delete_measured_run(session=profiles, profile_name="a100", run_id=a.id)
    profiles.commit()
    assert runs.count_measured_runs(session=profiles, profile_name="a100") == 1
    with pytest.raises(NotFoundError):
        runs.delete_measured_run(session=profiles, profile_name="a100", run_id=a.id)


def test_deleting_the_profile_deletes_its_runs(profiles: Session) -> None:
    _add(profiles, _gpt2())
    profiles.commit()
    repo.delete_profile(session=profiles, name="a100")
    profiles.commit()
    assert profiles.scalar(select(func.count()).select_from(MeasuredRun)) == 0


def test_calibration_runs_by_id_or_all_and_the_same_closed_form_fit(profiles: Session) -> None:
    with pytest.raises(ValidationError) as info:
        runs.calibration_runs(session=profiles, profile_name="a100")
    assert "training-logs" in info.value.rule
    a = _add(profiles, _gpt2()).run
    b = _add(profiles, _llama()).run
    profiles.commit()
    every = runs.calibration_runs(session=profiles, profile_name="a100")
    assert [r.run_id for r in every] == [a.id, b.id]
    named = runs.calibration_runs(session=profiles, profile_name="a100", run_ids=[b.id])
    assert named[0].measured_iteration_time_s == pytest.approx(1.2103)
    assert named[0].request["layout"]["zero_stage"] == 0
    with pytest.raises(NotFoundError):
        runs.calibration_runs(session=profiles, profile_name="h100", run_ids=[a.id])
    with pytest.raises(ValidationError):
        runs.calibration_runs(session=profiles, profile_name="a100", run_ids=[a.id, a.id])
    with pytest.raises(LimitError):
        runs.calibration_runs(session=profiles, profile_name="a100", run_ids=list(range(1001)))
    # T(u) = A/u + B with predictions T(1) = 0.6 s, T(0.5) = 1.1 s: A = 0.5, B = 0.1; one
    # measured 1.0826 s gives 1/u = (T - B)/A exactly.
    sample = sample_from_predictions(
        at_full_s=0.6, at_half_s=1.1, measured_s=every[0].measured_iteration_time_s
    )
    assert fit_utilization([sample]).utilization == pytest.approx(0.5 / (1.0826 - 0.1))


def test_content_digest_ignores_decoration_but_not_the_hints() -> None:
    plain: ParsedTrainingLog = parse_training_log(_gpt2())
    fenced = parse_training_log("```\n" + _gpt2() + "\n```\n")
    assert plain.content_sha256 == fenced.content_sha256
    llama = parse_training_log(_llama())
    hinted = parse_training_log(_llama(), LogHints(warmup_iterations=0))
    assert hinted.iterations_used != llama.iterations_used
    assert hinted.content_sha256 != llama.content_sha256
