"""The conformance report as JSON or JUnit XML (``durasim conformance --report FILE``).

docs/conformance.md, "Machine-readable reports", documents both schemas.  The
JSON form carries everything the text report shows, structured; the JUnit XML
form lists every check as a ``testcase`` (one ``testsuite`` per layer) so that
CI systems show it like any test run.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ._report import Case, ConformanceReport, Finding, LayerReport

__all__ = ["JSON_FORMAT", "report_to_json", "report_to_junit", "write_report"]

#: The ``format`` field of the JSON report, and its version.
JSON_FORMAT = "durasim-conformance-report"
JSON_VERSION = 1


def _finding(finding: Finding) -> dict[str, str]:
    return {
        "name": finding.name,
        "message": finding.message,
        "reproduction": finding.reproduction,
        "seed": finding.seed,
        "rerun": finding.rerun,
    }


def _layer(layer: LayerReport) -> dict[str, Any]:
    return {
        "name": layer.name,
        "status": layer.status,
        "passed": layer.passed,
        "failed": len(layer.failed),
        "not_applicable": dict(layer.skipped),
        "not_applicable_reason": layer.not_applicable,
        "not_run_reason": layer.not_run,
        "known_red": layer.known_red,
        "seconds": round(layer.seconds, 3),
        "examples": layer.examples,
        "budget_spent": layer.budget_spent,
        "note": layer.note,
        "failures": [_finding(f) for f in layer.failed],
        "cases": [{"name": c.name, "outcome": c.outcome, "detail": c.detail} for c in layer.cases],
    }


def report_to_json(report: ConformanceReport) -> str:
    """The report as a JSON document (indented, keys in a fixed order)."""
    document = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "target": report.target,
        "world": report.world,
        "seed": report.seed,
        "strict": report.strict,
        "ok": report.ok,
        "verdict": report.verdict,
        "capabilities": list(report.capabilities),
        "lacking": list(report.lacking),
        "gaps": report.gaps,
        "layers": [_layer(layer) for layer in report.layers],
    }
    return json.dumps(document, indent=2) + "\n"


def _failure_text(finding: Finding) -> str:
    parts = [finding.message]
    if finding.seed:
        parts.append(f"seed: {finding.seed}")
    if finding.rerun:
        parts.append(f"rerun: {finding.rerun}")
    if finding.reproduction:
        parts += ["minimal reproduction:", finding.reproduction]
    return "\n".join(parts)


def _cases(layer: LayerReport) -> list[tuple[Case, Finding | None]]:
    """Each check with its finding; a finding no check names becomes a check of its own."""
    unclaimed = list(layer.failed)
    paired: list[tuple[Case, Finding | None]] = []
    for case in layer.cases:
        finding = None
        if case.outcome == "failed" and unclaimed:
            named = [f for f in unclaimed if f.name == case.name]
            finding = named[0] if named else unclaimed[0]
            unclaimed.remove(finding)
        paired.append((case, finding))
    paired += [(Case(name=f.name, outcome="failed"), f) for f in unclaimed]
    if not paired and (layer.not_applicable or layer.not_run):
        why = layer.not_applicable or layer.not_run
        paired.append((Case(name=layer.name, outcome="not applicable", detail=why), None))
    return paired


def report_to_junit(report: ConformanceReport) -> str:
    """The report as JUnit XML: a ``testsuite`` per layer, a ``testcase`` per check.

    Not applicable checks are ``skipped`` (``failure`` under ``strict``); known
    reds of the book are ``skipped`` with their explanation.
    """
    root = ET.Element("testsuites", name=f"durasim conformance: {report.target}")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for layer in report.layers:
        suite = ET.SubElement(root, "testsuite", name=layer.name, time=f"{layer.seconds:.3f}")
        properties = ET.SubElement(suite, "properties")
        for key, value in (
            ("world", report.world),
            ("seed", str(report.seed)),
            ("status", layer.status),
            ("note", layer.note),
        ):
            ET.SubElement(properties, "property", name=key, value=value)
        counts = {"tests": 0, "failures": 0, "skipped": 0}
        for case, finding in _cases(layer):
            counts["tests"] += 1
            element = ET.SubElement(
                suite, "testcase", classname=f"durasim.conformance.{layer.name}", name=case.name
            )
            if finding is not None:
                counts["failures"] += 1
                first = finding.message.split("\n", 1)[0]
                failure = ET.SubElement(element, "failure", message=first)
                failure.text = _failure_text(finding)
            elif case.outcome in ("not applicable", "known red"):
                why = f"{case.outcome}: {case.detail}" if case.detail else case.outcome
                if report.strict and case.outcome == "not applicable":
                    counts["failures"] += 1
                    ET.SubElement(element, "failure", message=f"--strict: {why}")
                else:
                    counts["skipped"] += 1
                    ET.SubElement(element, "skipped", message=why)
        for key, count in counts.items():
            suite.set(key, str(count))
            totals[key] += count
    for key, total in totals.items():
        root.set(key, str(total))
    root.set("time", f"{sum(layer.seconds for layer in report.layers):.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_report(report: ConformanceReport, path: str | Path) -> Path:
    """Write ``report`` to ``path``: JSON for ``.json``, JUnit XML for ``.xml``.

    Raises:
        ValueError: any other suffix.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".json":
        text = report_to_json(report)
    elif suffix == ".xml":
        text = report_to_junit(report)
    else:
        raise ValueError(
            f"--report {target}: the format comes from the suffix; "
            "name a .json (JSON) or .xml (JUnit XML) file"
        )
    target.write_text(text, encoding="utf-8")
    return target
