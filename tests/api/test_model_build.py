"""The CLI's deferred model build answers exactly as the eagerly built models do.

``api.model_build.DEFER`` (set by the CLI entry point for every verb but ``serve``) makes
``api.schemas`` build a model's validator on first use, not at import (docs/design.md §8.3).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from api import model_build
from api.schemas import EstimateRequest, PlanRequest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEFERRED = """
import json, sys
from api import model_build
model_build.DEFER = True
from api.schemas import EstimateRequest, PlanRequest
assert not EstimateRequest.__pydantic_complete__, "built at import"
assert not PlanRequest.__pydantic_complete__, "built at import"
body = json.loads(sys.argv[1])
print(EstimateRequest.model_validate(body).model_dump_json())
assert not PlanRequest.__pydantic_complete__, "an unused model was built"
"""


def test_this_process_builds_eagerly_for_the_web_app() -> None:
    assert model_build.DEFER is False
    assert EstimateRequest.__pydantic_complete__ and PlanRequest.__pydantic_complete__


def test_a_deferred_build_validates_and_dumps_the_same() -> None:
    body = json.loads((EXAMPLES / "estimate-gpt3-175b.json").read_text())
    done = subprocess.run(
        [sys.executable, "-c", DEFERRED, json.dumps(body)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == EstimateRequest.model_validate(body).model_dump_json()
