"""A JUnit XML report of one ``commest check``, for CI systems that render test results.

One ``<testsuite name="commest">`` holding one ``<testcase>`` named after the request file;
a failed check adds a ``<failure>`` that states the predicted iteration time against the limit.
The layout follows the de-facto schema read by Jenkins, GitLab and GitHub test reporters.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What one check decided; times in seconds."""

    name: str
    passed: bool
    predicted_s: float
    limit_s: float
    margin_s: float
    detail: str = ""
    elapsed_s: float = 0.0


def junit_xml(outcome: CheckOutcome) -> str:
    """The report as an XML document (a string with the XML declaration)."""
    failures = 0 if outcome.passed else 1
    suite = ET.Element(
        "testsuite",
        {
            "name": "commest",
            "tests": "1",
            "failures": str(failures),
            "errors": "0",
            "skipped": "0",
            "time": f"{outcome.elapsed_s:.3f}",
        },
    )
    case = ET.SubElement(
        suite,
        "testcase",
        {"classname": "commest.check", "name": outcome.name, "time": f"{outcome.elapsed_s:.3f}"},
    )
    summary = (
        f"predicted iteration time {outcome.predicted_s:.6g} s vs limit {outcome.limit_s:.6g} s"
        f" (margin {outcome.margin_s:+.6g} s)"
    )
    if not outcome.passed:
        failure = ET.SubElement(
            case, "failure", {"message": summary, "type": "IterationTimeExceeded"}
        )
        failure.text = f"{summary}\n{outcome.detail}".rstrip()
    out = ET.SubElement(case, "system-out")
    out.text = summary
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_junit_xml(path: Path, outcome: CheckOutcome) -> None:
    """Write the report to ``path`` (UTF-8), creating its parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(outcome), encoding="utf-8")
