"""A JUnit XML report of one ``commest check``, for CI systems that render test results.

One ``<testsuite name="commest">`` holding one ``<testcase>`` named after the request file;
a failed check adds a ``<failure>`` that states the predicted iteration time against the limit
and every failed comparison (memory, thresholds); a check that could not be made (bad input,
a 4xx answer, an unreachable server) adds an ``<error>`` saying why. The suite's
``<properties>`` carry the figures (every term, the ratios, the memory). The layout follows
the de-facto schema read by Jenkins, GitLab and GitHub test reporters.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What one check decided; times in seconds.

    ``comparisons``: one line per comparison made (the time criterion, memory, thresholds);
    ``reasons``: the lines of the failed ones; ``error``: why no decision could be made.
    """

    name: str
    passed: bool
    predicted_s: float
    limit_s: float
    margin_s: float
    detail: str = ""
    elapsed_s: float = 0.0
    comparisons: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    error: str | None = None
    error_type: str = "CheckError"


def errored(
    name: str,
    message: str,
    *,
    error_type: str,
    elapsed_s: float = 0.0,
    properties: tuple[tuple[str, str], ...] = (),
) -> CheckOutcome:
    """The outcome of a check that could not be made (``message`` says why)."""
    nan = float("nan")
    return CheckOutcome(
        name=name,
        passed=False,
        predicted_s=nan,
        limit_s=nan,
        margin_s=nan,
        elapsed_s=elapsed_s,
        properties=properties,
        error=message,
        error_type=error_type,
    )


def _summary(outcome: CheckOutcome) -> str:
    summary = (
        f"predicted iteration time {outcome.predicted_s:.6g} s vs limit {outcome.limit_s:.6g} s"
        f" (margin {outcome.margin_s:+.6g} s)"
    )
    others = [line for line in outcome.reasons if not line.startswith("iteration ")]
    return "; ".join([summary, *others])


def junit_xml(outcome: CheckOutcome) -> str:
    """The report as an XML document (a string with the XML declaration)."""
    failures = 0 if outcome.passed or outcome.error is not None else 1
    suite = ET.Element(
        "testsuite",
        {
            "name": "commest",
            "tests": "1",
            "failures": str(failures),
            "errors": "0" if outcome.error is None else "1",
            "skipped": "0",
            "time": f"{outcome.elapsed_s:.3f}",
        },
    )
    if outcome.properties:
        props = ET.SubElement(suite, "properties")
        for key, value in outcome.properties:
            ET.SubElement(props, "property", {"name": key, "value": value})
    case = ET.SubElement(
        suite,
        "testcase",
        {"classname": "commest.check", "name": outcome.name, "time": f"{outcome.elapsed_s:.3f}"},
    )
    if outcome.error is not None:
        error = ET.SubElement(case, "error", {"message": outcome.error, "type": outcome.error_type})
        error.text = f"{outcome.error}\n{outcome.detail}".rstrip()
        out = ET.SubElement(case, "system-out")
        out.text = f"ERROR: {outcome.error}"
    else:
        summary = _summary(outcome)
        if not outcome.passed:
            kind = (
                "IterationTimeExceeded"
                if outcome.predicted_s > outcome.limit_s
                else "CheckThresholdFailed"
            )
            failure = ET.SubElement(case, "failure", {"message": summary, "type": kind})
            failure.text = "\n".join([summary, *outcome.comparisons, outcome.detail]).rstrip()
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join([summary, *outcome.comparisons]) if outcome.comparisons else summary
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_junit_xml(path: Path, outcome: CheckOutcome) -> None:
    """Write the report to ``path`` (UTF-8), creating its parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(outcome), encoding="utf-8")
