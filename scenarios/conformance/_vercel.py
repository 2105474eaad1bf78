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

from durasim.checkers import ConcurrencyWitness, replay_witness
from durasim.worlds import VercelFactory

from ._report import ConformanceReport, Finding
from ._run import run_conformance

__all__ = [
    "Difference",
    "VercelVerdict",
    "check_repros",
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
                lines.append("plain-Node reproduction: written with --repro DIR")
            elif finding.witness is not None:
                lines.append(
                    "plain-Node reproduction: none (the race did not show again in "
                    "20 replays of its witness)"
                )
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


def check_repros(
    factory: VercelFactory, scripts: Iterable[Path], *, race_rounds: int | None = None
) -> list[tuple[Path, bool, str]]:
    """Run each reproduction in plain Node: ``(script, reproduced, its last line)``.

    A script reproduces when it exits 1 after printing ``REPRODUCED`` (an uncaught error
    also exits 1, without that line).  ``race_rounds``: run each race's script this many
    rounds, not the :data:`RACE_ROUNDS` it was written with (its ``ROUNDS`` argument); a
    contract violation's script runs its one round either way.
    """
    if race_rounds is not None and (
        isinstance(race_rounds, bool) or not isinstance(race_rounds, int) or race_rounds < 1
    ):
        raise ValueError(f"race_rounds={race_rounds!r}: pass a whole number of rounds, 1 or more")
    results = []
    for script in scripts:
        args: tuple[str, ...] = ()
        if race_rounds is not None and script.read_text().startswith(_RACE_HEADER):
            args = (str(race_rounds),)
        done = factory.run_script(script, args=args)
        output = (done.stdout + done.stderr).strip().splitlines()
        last = output[-1] if output else f"exit status {done.returncode}, no output"
        reproduced = done.returncode == 1 and "REPRODUCED" in done.stdout
        results.append((script, reproduced, last))
    return results


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
        rounds = 1
        if finding.layer == "concurrency":
            transcript = _race_transcript(factory, finding)
            rounds = RACE_ROUNDS
        else:
            transcript = factory.transcripts.get(finding.name.split("::")[-1])
        if transcript:
            repros[finding.name] = repro_script(
                package.name,
                package.version,
                finding,
                transcript,
                factory.database_url,
                rounds=rounds,
                config=factory.config,
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


def _race_transcript(factory: VercelFactory, finding: Finding) -> list[dict[str, Any]] | None:
    """The calls of a run of the concurrency layer's witness that showed its anomaly again.

    The witness's group runs on a fresh recording World until the anomaly shows
    (``None`` if the race did not happen again in :func:`replay_witness`'s tries).
    """
    witness = finding.witness
    if not isinstance(witness, ConcurrencyWitness):
        return None
    name = f"concurrency: {finding.name}"
    transcript: list[dict[str, Any]] = []
    factory.transcripts[name] = transcript
    factory.record_as = name
    try:
        records = replay_witness(factory, witness, before_try=transcript.clear)
    finally:
        factory.record_as = None
    return transcript if records is not None else None


# --- plain-Node reproductions -----------------------------------------------------------

#: Keys (and positional string arguments) naming ids: renamed in each round after the first,
#: so that the rounds of a race script do not collide in one World.
_ID_KEYS = frozenset({"runId", "token", "correlationId", "hookId", "stepId", "waitId"})
_VERCEL_RUN = re.compile(r"^wrun_[0-9A-HJKMNP-TV-Z]{26}$")
#: Rounds of a race's script (each a fresh set of ids in one World).
RACE_ROUNDS = 200

#: The first line of a race's script (:func:`check_repros` tells races by it).
_RACE_HEADER = "// Reproduction of a race "


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


def _ids(value: Any, key: str | None, found: dict[str, bool]) -> None:
    """Collect the id strings of a wire value into ``found`` (value -> is a run id)."""
    if isinstance(value, dict):
        if not any(tag in value for tag in ("$bytes", "$date", "$undefined")):
            for inner_key, inner in value.items():
                _ids(inner, inner_key, found)
    elif isinstance(value, list):
        for inner in value:
            _ids(inner, key, found)
    elif isinstance(value, str) and (key in _ID_KEYS or _VERCEL_RUN.match(value)):
        found.setdefault(value, key == "runId" or bool(_VERCEL_RUN.match(value)))


def _item_shape(item: Any, runs: dict[str, str]) -> str:
    if not isinstance(item, dict):
        return "item"
    kind = item.get("eventType") or item.get("status") or "item"
    run_id = item.get("runId")
    run = runs.get(run_id) if isinstance(run_id, str) else None
    return f"{kind}@{run}" if run else str(kind)


def answer_shape(record: dict[str, Any], runs: dict[str, str]) -> str:
    """What a reproduction compares of an answer: its outcome, event types, statuses, run order.

    The same function is written in JavaScript in every script (``shape``); ``runs``
    names the run ids (``run1``...) so that orders compare across fresh ids.
    """
    if "error" in record:
        return f"throws {record['error']}"
    answer = record.get("answer")
    if answer is None:
        return "none"
    if isinstance(answer, list):
        return "[" + ",".join(_item_shape(item, runs) for item in answer) + "]"
    if isinstance(answer, dict):
        if isinstance(answer.get("data"), list):
            return "page[" + ",".join(_item_shape(item, runs) for item in answer["data"]) + "]"
        if isinstance(answer.get("event"), dict):
            return f"event {answer['event'].get('eventType') or 'none'}"
        return _item_shape(answer, runs)
    return "ok"


def _blocks(transcript: list[dict[str, Any]]) -> list[list[list[int]]]:
    """The calls as blocks run one after another; a block's chains were in flight together.

    A chain is the calls of one asyncio task, in order; chains whose spans (first send to
    last answer) overlap form one block.
    """
    chains: dict[str, list[int]] = {}
    for index, call in enumerate(transcript):
        chains.setdefault(str(call.get("task", index)), []).append(index)
    spans = sorted(
        (
            transcript[chain[0]].get("start", chain[0]),
            max(transcript[i].get("end", transcript[i].get("start", i)) for i in chain),
            chain,
        )
        for chain in chains.values()
    )
    blocks: list[list[list[int]]] = []
    reach = None
    for first, last, chain in spans:
        if blocks and reach is not None and first < reach:
            blocks[-1].append(chain)
            reach = max(reach, last)
        else:
            blocks.append([chain])
            reach = last
    return blocks


def repro_script(
    name: str,
    version: str,
    finding: Finding,
    transcript: list[dict[str, Any]],
    database_url: str | None = None,
    *,
    rounds: int = 1,
    config: dict[str, Any] | None = None,
) -> str:
    """A plain-Node script replaying a test's calls on the package, judging each answer.

    Calls that were in flight together in durasim's run are started together
    (``Promise.all``); the others run in order.  Each answer is printed and its shape
    (:func:`answer_shape`) compared with what durasim saw.  With ``rounds`` > 1 (a race)
    the calls run that many times, with fresh ids each round.  The script exits 1 when a
    round reproduced every answer's shape (the violation is there), else 0.  Run ids the
    World minted become variables, so the replay uses the ids it mints.
    """
    names: dict[str, str] = {}
    runs: dict[str, str] = {}
    found: dict[str, bool] = {}
    for call in transcript:
        _ids(call["args"], None, found)
        for arg in call["args"]:
            if isinstance(arg, str):
                found.setdefault(arg, bool(_VERCEL_RUN.match(arg)))
    for call in transcript:  # run names in order of first appearance
        seen: dict[str, bool] = {}
        _ids(call["args"], None, seen)
        seen.update((arg, False) for arg in call["args"] if isinstance(arg, str))
        for value in seen:
            if found.get(value) and value not in runs:
                runs[value] = f"run{len(runs) + 1}"
        minted = call.get("minted")
        if minted and minted not in names:
            names[minted] = runs[minted] = f"run{len(runs) + 1}"
    statics = [value for value in found if value not in names]
    lines: list[str] = []
    for block in _blocks(transcript):
        chains = [
            [_call_line(number, transcript[number], names) for number in chain] for chain in block
        ]
        if len(chains) == 1:
            lines += chains[0]
            continue
        lines.append("await Promise.all([")
        for chain in chains:
            body = " ".join(chain)
            lines.append(f"  (async () => {{ {body} }})(),")
        lines.append("]);")
    expected = {number + 1: answer_shape(call, runs) for number, call in enumerate(transcript)}
    message = "\n".join(f"//   {line}" for line in finding.message.splitlines()[:6])
    extra = "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in (config or {}).items())
    if database_url is None:
        options = f"{{ {extra}dataDir: mkdtempSync(join(tmpdir(), 'repro-')) }}"
        setup = f"//   npm install {name}@{version} && node THIS_FILE.mjs"
    else:
        options = f"{{ {extra}connectionString: process.env.WORKFLOW_POSTGRES_URL }}"
        setup = (
            f"//   npm install {name}@{version}\n"
            "//   export WORKFLOW_POSTGRES_URL=postgres://USER@HOST:5432/EMPTY_DATABASE\n"
            f"//   node node_modules/{name}/dist/cli.js   # the package's own set-up\n"
            "//   node THIS_FILE.mjs"
        )
    minted_vars = "".join(f"let {var};\n" for var in sorted(set(names.values())))
    static_runs = json.dumps([[value, runs[value]] for value in statics if value in runs])
    kind = "a race" if rounds > 1 else "a contract violation"
    usage = f"node THIS_FILE.mjs [ROUNDS]   (default {rounds})"
    return f"""// Reproduction of {kind} found by durasim conformance --vercel.
// Package: {name}@{version}.  No durasim needed:
{setup}
// Rounds: {usage}
// durasim check: {finding.layer}: {finding.name}
// What durasim's contract (docs/protocol.md) expected, and what happened:
{message}
// The script replays durasim's calls (calls in flight together in durasim's run start
// together here) with the test's virtual time (Date follows it, as in the bridge),
// prints each answer and compares its shape (outcome, event types, statuses, run order)
// with what durasim saw (in a race too: the reads made while it was on are its evidence).
// Exit status 1: reproduced (every shape as durasim saw it in at least one of
// {rounds} round(s)); 0: not reproduced.
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
const world = (pkg.createWorld ?? pkg.createLocalWorld)({options});
const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));

const ROUNDS = process.argv[2] === undefined ? {rounds} : Number(process.argv[2]);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) {{
  console.error(`ROUNDS must be a whole number of rounds, 1 or more, not ${{process.argv[2]}}: ` +
    {json.dumps(usage)});
  process.exit(2);
}}
const EXPECTED = {json.dumps(expected, ensure_ascii=False)};
const IDS = new Set({json.dumps(statics, ensure_ascii=False)});
const STATIC_RUNS = {static_runs};
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const RUNS = new Map();
let round = 0;
let matched = true;
{minted_vars}
function renamed(id) {{
  if (round === 0 || !IDS.has(id)) return id;
  if (/^wrun_[0-9A-HJKMNP-TV-Z]{{26}}$/.test(id)) {{
    const code = [3, 2, 1, 0].map((k) => CROCKFORD[(round >> (5 * k)) & 31]).join('');
    return id.slice(0, 15) + code + id.slice(19);
  }}
  return `${{id}}-r${{round}}`;
}}
function fresh(value) {{
  if (typeof value === 'string') return renamed(value);
  if (Array.isArray(value)) return value.map(fresh);
  if (value && typeof value === 'object' && value.constructor === Object) {{
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fresh(v)]));
  }}
  return value;
}}
function shapeItem(item) {{
  if (!item || typeof item !== 'object') return 'item';
  const kind = item.eventType || item.status || 'item';
  const run = typeof item.runId === 'string' ? RUNS.get(item.runId) : undefined;
  return run ? `${{kind}}@${{run}}` : String(kind);
}}
function shape(answer) {{
  if (answer === undefined || answer === null) return 'none';
  if (Array.isArray(answer)) return '[' + answer.map(shapeItem).join(',') + ']';
  if (typeof answer === 'object') {{
    if (Array.isArray(answer.data)) return 'page[' + answer.data.map(shapeItem).join(',') + ']';
    const event = answer.event;
    if (event && typeof event === 'object') return 'event ' + (event.eventType || 'none');
    return shapeItem(answer);
  }}
  return 'ok';
}}
function mint(variable, id) {{
  if (typeof id === 'string') RUNS.set(id, variable);
  return id;
}}

async function call(number, at, path, args) {{
  now = at;
  args = fresh(args);
  const parts = path.split('.');
  const owner = parts.slice(0, -1).reduce((o, p) => o[p], world);
  let answer;
  let got;
  try {{
    answer = await owner[parts.at(-1)](...args);
    got = shape(answer);
    console.log(`#${{number}} ${{path}} ->`, JSON.stringify(answer)?.slice(0, 400));
  }} catch (error) {{
    got = 'throws ' + (error?.constructor?.name || error?.name || typeof error);
    console.log(`#${{number}} ${{path}} threw ${{got.slice(7)}}: ${{error?.message}}`);
  }}
  if (number in EXPECTED && got !== EXPECTED[number]) {{
    matched = false;
    console.log(`   shape ${{got}}; durasim saw ${{EXPECTED[number]}}`);
  }}
  return answer;
}}

let reproduced = 0;
for (round = 0; round < ROUNDS; round++) {{
  matched = true;
  RUNS.clear();
  for (const [id, variable] of STATIC_RUNS) RUNS.set(renamed(id), variable);
  if (ROUNDS > 1) console.log(`-- round ${{round + 1}} of ${{ROUNDS}}`);
{chr(10).join("  " + line for line in lines)}
  if (matched) reproduced += 1;
}}
console.log(reproduced
  ? `REPRODUCED in ${{reproduced}} of ${{ROUNDS}} round(s): every answer had the shape durasim saw`
  : `not reproduced in ${{ROUNDS}} round(s)`);
await world.close?.();
process.exit(reproduced ? 1 : 0);
"""


def _call_line(index: int, call: dict[str, Any], names: dict[str, str]) -> str:
    """One call of a script: ``await call(...)``, keeping a minted run id in its variable."""
    args = _literal(call["args"], names)
    line = f"await call({index + 1}, {int(call['now'])}, {json.dumps(call['path'])}, {args});"
    minted = call.get("minted")
    if minted:
        line = (
            f"{names[minted]} = mint({json.dumps(names[minted])}, "
            + line.rstrip(";").replace("await call(", "(await call(", 1)
            + ")?.event?.runId);"
        )
    return line
