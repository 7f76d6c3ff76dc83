"""api.schemas helpers that build responses from domain objects."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from pydantic import ValidationError as PydanticValidationError

from api.schemas import BandwidthResponse, Members, ThroughputOut, finite_answer
from estimator.errors import ValidationError


@dataclass
class _Throughput:
    tokens_per_s: float
    model_tflops_per_gpu: float = 1.0
    hardware_tflops_per_gpu: float = 1.0
    mfu: float = 0.5

    @property
    def hfu(self) -> float:
        raise AssertionError("hfu was read from the object")


def test_members_add_to_and_override_the_object_without_reading_it() -> None:
    source = _Throughput(tokens_per_s=1.0)
    built = ThroughputOut.model_validate(Members(source, mfu=0.25, hfu=0.3))
    assert (built.tokens_per_s, built.mfu, built.hfu) == (1.0, 0.25, 0.3)


def test_a_non_finite_answer_becomes_a_validation_error_naming_the_inputs() -> None:
    with pytest.raises(ValidationError) as caught, finite_answer({"ranks": 1, "bytes": 8.0}):
        ThroughputOut.model_validate(Members(_Throughput(tokens_per_s=math.inf), hfu=0.5))
    assert caught.value.field == "ranks, bytes"
    assert caught.value.value == {"ranks": 1, "bytes": 8.0}
    assert "tokens_per_s" in caught.value.rule


def test_other_failures_to_build_an_answer_are_not_disguised() -> None:
    with pytest.raises(PydanticValidationError), finite_answer({"ranks": 1}):
        BandwidthResponse.model_validate({"profile": "x"})  # a bug, not the user's input
