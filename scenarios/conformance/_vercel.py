"""``durasim conformance --vercel``: a Vercel World judged against durasim's contract.

The suite runs as for any World (:func:`run_conformance`) over
:class:`~durasim.worlds.VercelWorld`; then each failure is classified with the
profile of documented differences of the package's spec version
(``vercel_profiles.json``, reviewed by a person, one reason per entry):

* a failure no entry matches is a **violation** (the exit status counts these only);
* a failure an entry matches is a **documented difference**;
* an entry whose tests ran and passed is **stale** (the difference no longer happens);
* checks the World cannot take part in are **not applicable**.

Each contract violation comes with a plain-Node script replaying the calls the test
made (:func:`repro_script`), to file upstream without durasim.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from durasim.worlds import VercelFactory

from ._report import ConformanceReport, Finding
from ._run import run_conformance

__all__ = [
    "Difference",
    "VercelVerdict",
    "load_profile",
    "repro_script",
    "run_vercel_conformance",
]

_PROFILES = "vercel_profiles.json"


@attrs.frozen
class Difference:
    """One documented difference: the tests it covers and why it is not a violation.

    Attributes:
        test: a glob over failure names (``test_contract_input.py::*``).
        reason: why the two contracts legitimately differ here.
        message: a regular expression the failure's message must contain ('' for any).
        packages: the packages it applies to (empty: every package of the spec version).
    """

    test: str
    reason: str
    message: str = ""
    packages: tuple[str, ...] = ()

    def matches(self, finding: Finding) -> bool:
        """Whether ``finding`` is this difference."""
        if not fnmatch.fnmatchcase(f"{finding.layer}: {finding.name}", self.test):
            return False
        return not self.message or re.search(self.message, finding.message) is not None


def load_profile(
    spec_version: int, package: str, path: Path | None = None
) -> tuple[Difference, ...]:
    """The documented differences for ``package`` at ``spec_version`` (the shipped file)."""
    if path is None:
        text = resources.files(__package__).joinpath(_PROFILES).read_text()
    else:
        text = path.read_text()
    data = json.loads(text)
    found: list[Difference] = []
    for profile in data["profiles"]:
        if spec_version not in profile["spec_versions"]:
            continue
        for entry in profile["differences"]:
            packages = tuple(entry.get("packages", ()))
            if packages and package not in packages:
                continue
            found.append(
                Difference(
                    test=entry["test"],
                    reason=entry["reason"],
                    message=entry.get("message", ""),
                    packages=packages,
                )
            )
    return tuple(found)


@attrs.frozen(kw_only=True)
class VercelVerdict:
    """The report of ``durasim conformance --vercel``.

    Attributes:
        package: ``@workflow/world-local@4.4.1``.
        spec_version: the package's ``specVersion``.
        report: the suite's own report.
        violations: failures no documented difference covers.
        differences: each covered failure with the difference that covers it.
        stale: differences whose tests ran and no longer fail.
        not_applicable: checks the World cannot take part in.
        repros: a plain-Node script per violation (by failure name), when one exists.
    """

    package: str
    spec_version: int
    report: ConformanceReport
    violations: tuple[Finding, ...]
    differences: tuple[tuple[Finding, Difference], ...]
    stale: tuple[Difference, ...]
    not_applicable: int
    repros: dict[str, str] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        """No violation (documented differences and stale entries do not count)."""
        return not self.violations

    @property
    def line(self) -> str:
        """``N violations, M documented differences, K not applicable``."""
        return (
            f"{len(self.violations)} violations, {len(self.differences)} documented "
            f"differences, {self.not_applicable} not applicable"
        )

    def render(self) -> str:
        """What ``durasim conformance --vercel`` prints."""
        lines = [
            f"durasim conformance --vercel {self.package} (spec version {self.spec_version})",
            "",
            *(layer.summary() for layer in self.report.layers),
        ]
        for number, finding in enumerate(self.violations, 1):
            lines += ["", f"--- violation {number}: {finding.layer}: {finding.name}"]
            lines.append(finding.message)
            if finding.rerun:
                lines.append(f"rerun: {finding.rerun}")
            if finding.reproduction:
                lines += ["durasim reproduction:", finding.reproduction.rstrip()]
            if finding.name in self.repros:
                lines.append("plain-Node reproduction: written with --repro DIR (or below)")
        if self.differences:
            lines += ["", "documented differences (vercel_profiles.json):"]
            by_reason: dict[str, int] = {}
            for _, difference in self.differences:
                by_reason[difference.reason] = by_reason.get(difference.reason, 0) + 1
            lines += [f"  {count:>4}  {reason}" for reason, count in by_reason.items()]
        if self.stale:
            lines += ["", "stale differences (listed, but the tests now pass: update the profile):"]
            lines += [f"  {d.test}: {d.reason}" for d in self.stale]
        lines += [
            "",
            f"verdict: {self.line}" + (f"; {len(self.stale)} stale" if self.stale else ""),
        ]
        return "\n".join(lines)

    def write_repros(self, directory: Path) -> list[Path]:
        """One ``NN-<test>.mjs`` per violation with a script; the paths written."""
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for number, finding in enumerate(self.violations, 1):
            script = self.repros.get(finding.name)
            if script is None:
                continue
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", finding.name.split("::")[-1])[:80]
            path = directory / f"{number:02d}-{slug}.mjs"
            path.write_text(script)
            written.append(path)
        return written


def classify(
    report: ConformanceReport, profile: Iterable[Difference]
) -> tuple[list[Finding], list[tuple[Finding, Difference]], list[Difference]]:
    """Split the failures into violations and differences; find stale differences."""
    entries = list(profile)
    violations: list[Finding] = []
    covered: list[tuple[Finding, Difference]] = []
    used: set[int] = set()
    for layer in report.layers:
        for finding in layer.failed:
            for index, entry in enumerate(entries):
                if entry.matches(finding):
                    covered.append((finding, entry))
                    used.add(index)
                    break
            else:
                violations.append(finding)
    passed = [
        f"{layer.name}: {case.name}"
        for layer in report.layers
        for case in layer.cases
        if case.outcome == "passed"
    ]
    stale = [
        entry
        for index, entry in enumerate(entries)
        if index not in used
        and not entry.message
        and any(fnmatch.fnmatchcase(name, entry.test) for name in passed)
    ]
    return violations, covered, stale


def _not_applicable(report: ConformanceReport) -> int:
    count = 0
    for layer in report.layers:
        count += sum(n for _, n in layer.skipped)
        if layer.not_applicable:
            count += 1
    return count


def run_vercel_conformance(
    factory: VercelFactory,
    *,
    layers: Iterable[str] | None = None,
    examples: int | None = None,
    seed: int = 0,
    only: str | None = None,
    profile: Path | None = None,
    progress: Any = None,
) -> VercelVerdict:
    """Run the suite over a Vercel World package and judge it with its profile."""
    package = factory.package
    probe = factory.probe()
    spec_version = int(probe.get("specVersion") or 0)
    report = run_conformance(
        factory,
        target=f"--vercel {package.label}",
        layers=layers,
        examples=examples,
        seed=seed,
        only=only,
        progress=progress,
    )
    entries = load_profile(spec_version, package.name, profile)
    violations, covered, stale = classify(report, entries)
    repros: dict[str, str] = {}
    for finding in violations:
        transcript = factory.transcripts.get(finding.name.split("::")[-1])
        if transcript:
            repros[finding.name] = repro_script(
                package.name, package.version, finding, transcript, factory.database_url
            )
    factory.close()
    return VercelVerdict(
        package=package.label,
        spec_version=spec_version,
        report=report,
        violations=tuple(violations),
        differences=tuple(covered),
        stale=tuple(stale),
        not_applicable=_not_applicable(report),
        repros=repros,
    )


# --- plain-Node reproductions -----------------------------------------------------------


def _literal(value: Any, names: dict[str, str]) -> str:
    """A JavaScript literal for a value on the host's wire (bytes and dates rebuilt)."""
    if isinstance(value, dict):
        if "$bytes" in value:
            return f"bytes({json.dumps(value['$bytes'])})"
        if "$date" in value:
            return f"new Date({int(value['$date'])})"
        if "$undefined" in value:
            return "undefined"
        inner = ", ".join(f"{json.dumps(k)}: {_literal(v, names)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v, names) for v in value) + "]"
    if isinstance(value, str) and value in names:
        return names[value]
    return json.dumps(value)


def repro_script(
    name: str,
    version: str,
    finding: Finding,
    transcript: list[dict[str, Any]],
    database_url: str | None = None,
) -> str:
    """A plain-Node script replaying a test's calls on the package, printing each answer.

    Run ids the World minted become variables, so the replay uses the ids it mints.
    """
    names: dict[str, str] = {}
    calls: list[str] = []
    for number, call in enumerate(transcript, 1):
        args = _literal(call["args"], names)
        minted = call.get("minted")
        target = ""
        if minted and minted not in names:
            names[minted] = f"run{len(names) + 1}"
            target = f"const {names[minted]} = "
        line = (
            f"{target}await call({number}, {int(call['now'])}, {json.dumps(call['path'])}, {args});"
        )
        if minted:
            line = line.replace("await call(", "(await call(", 1).rstrip(";") + ")?.event?.runId;"
        calls.append(line)
    expected = "\n".join(f"//   {line}" for line in finding.message.splitlines()[:6])
    if database_url is None:
        config = "{ dataDir: mkdtempSync(join(tmpdir(), 'repro-')) }"
        setup = f"//   npm install {name}@{version} && node THIS_FILE.mjs"
    else:
        config = "{ connectionString: process.env.WORKFLOW_POSTGRES_URL }"
        setup = (
            f"//   npm install {name}@{version}\n"
            "//   export WORKFLOW_POSTGRES_URL=postgres://USER@HOST:5432/EMPTY_DATABASE\n"
            f"//   node node_modules/{name}/dist/cli.js   # the package's own set-up\n"
            "//   node THIS_FILE.mjs"
        )
    return f"""// Reproduction of a contract violation found by durasim conformance --vercel.
// Package: {name}@{version}.  No durasim needed:
{setup}
// durasim test: {finding.name}
// What durasim's contract (docs/protocol.md) expected, and what happened:
{expected}
// The script replays the test's calls in order and prints each answer; the clock is
// the test's virtual time (Date follows it, as in the bridge).
import {{ mkdtempSync }} from 'node:fs';
import {{ tmpdir }} from 'node:os';
import {{ join }} from 'node:path';

let now = {int(transcript[0]["now"]) if transcript else 0};
const RealDate = Date;
globalThis.Date = class extends RealDate {{
  constructor(...args) {{ if (args.length) super(...args); else super(now); }}
  static now() {{ return now; }}
}};
const pkg = await import({json.dumps(name)});
const world = (pkg.createWorld ?? pkg.createLocalWorld)({config});
const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));

async function call(number, at, path, args) {{
  now = at;
  const parts = path.split('.');
  const owner = parts.slice(0, -1).reduce((o, p) => o[p], world);
  try {{
    const answer = await owner[parts.at(-1)](...args);
    console.log(`#${{number}} ${{path}} ->`, JSON.stringify(answer));
    return answer;
  }} catch (error) {{
    console.log(`#${{number}} ${{path}} threw ${{error.constructor.name}}: ${{error.message}}`);
    return undefined;
  }}
}}

{chr(10).join(calls)}
await world.close?.();
process.exit(0);
"""
