"""Upgrade replay tests: recorded histories replayed against the code as it is now.

A *history* is one run's log, exported with ``durasim inspect events ID --json``
(JSON lines, lossless), kept in a directory (a project's ``tests/histories/``),
or read straight from a World.  :func:`replay_history` replays it on the
workflow code importable in this process, as a worker of the new code would:

* every event must match what the code issues now (a :class:`ReplayDivergence`
  names both sides: what the log holds, what the code does);
* a run that ended by the workflow's own hand must end the same way: the
  cold-replay oracle (:func:`verify_replay_log`) runs one real delivery and
  compares the terminal event, byte for byte.

No step body runs.  :func:`assert_histories_replay` is the pytest helper: keep
the exports in ``tests/`` and call it in a test, so every change is replayed
against the runs it would meet in production (docs/versioning.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from durasim.runtime import ReplayDivergence
from durasim.runtime.lowlevel import (
    DEPLOYMENT_ATTR,
    DEPLOYMENT_ENV,
    DeploymentError,
    Replay,
    check_deployment_id,
    deployment_of,
    enqueue_wake,
    find_workflow,
)
from durasim.runtime.serialization import SerializationError, serialize
from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    DurasimError,
    Event,
    EventRequest,
    EventType,
    World,
)

from ._export import event_to_json, load_logs
from ._oracle import read_log, verify_replay_log

__all__ = [
    "HistoryVerdict",
    "assert_histories_replay",
    "export_history",
    "migrate_run",
    "replay_histories",
    "replay_history",
    "replay_world",
]

T = EventType


@attrs.frozen
class HistoryVerdict:
    """What replaying one history on the current code showed.

    Attributes:
        run_id: the run.
        workflow: its workflow id.
        kind: ``ok``, ``diverged`` (the code no longer matches the log),
            ``outcome-differs`` (it matches, but ends the run otherwise),
            ``missing`` (the workflow is not importable here) or ``skipped``
            (nothing to replay: the run never started).
        detail: the divergence (both sides) or what differs.
        source: where the history came from (a file, a World).
    """

    run_id: str
    workflow: str
    kind: str
    detail: str = ""
    source: str = ""

    @property
    def ok(self) -> bool:
        """Whether the history replays on the current code."""
        return self.kind in ("ok", "skipped")

    def render(self) -> str:
        where = f" ({self.source})" if self.source else ""
        head = f"{self.kind}: run {self.run_id} of {self.workflow}{where}"
        return f"{head}\n  {self.detail}" if self.detail else head


def _replay_events(events: Sequence[Event]) -> Replay:
    """Replay ``events`` (up to the run's end) on the current code; raises a divergence."""
    created = events[0]
    started = next(e for e in events if e.type is T.RUN_STARTED)
    replay = Replay(
        find_workflow(str(created.data["workflow_name"])),
        run_id=created.run_id,
        input=created.data["input"],
        started_at=started.created_at,
    )
    replay.preload(list(events))
    replay.begin()
    for event in events:
        if event.type in RUN_TERMINAL_TYPES:
            break
        replay.deliver(event)
    return replay


def _outcome_differs(replay: Replay, events: Sequence[Event]) -> str:
    terminal = next((e for e in events if e.type in RUN_TERMINAL_TYPES), None)
    if terminal is None or terminal.type is T.RUN_CANCELLED:
        return ""
    if not replay.done:
        return f"the log ends with {terminal.label}, but the code still waits at its end"
    ok, value = replay.outcome()
    if terminal.type is T.RUN_COMPLETED:
        if not ok:
            return f"the run completed, but the code raises {value!r}"
        try:
            same = serialize(value) == terminal.data["output"]
        except SerializationError:
            same = False
        return "" if same else f"the code returns {value!r}, another output than recorded"
    return f"the run failed, but the code returns {value!r}" if ok else ""


async def replay_history(events: Sequence[Event], *, source: str = "") -> HistoryVerdict:
    """Replay one run's log on the workflow code of this process (see the module docstring)."""
    if not events or events[0].type is not T.RUN_CREATED:
        return HistoryVerdict("?", "?", "diverged", "the history does not begin with run_created")
    run_id, workflow = events[0].run_id, str(events[0].data.get("workflow_name"))
    if not any(e.type is T.RUN_STARTED for e in events):
        return HistoryVerdict(run_id, workflow, "skipped", "the run never started", source)
    try:
        find_workflow(workflow)
    except LookupError as exc:
        return HistoryVerdict(run_id, workflow, "missing", str(exc), source)
    try:
        replay = _replay_events(events)
    except ReplayDivergence as exc:
        return HistoryVerdict(run_id, workflow, "diverged", str(exc), source)
    verdict = await verify_replay_log(events)
    if verdict.kind == "replay.unseedable":
        # A log no client could write back (a noop): judge the replay's own outcome.
        differs = _outcome_differs(replay, events)
        kind = "outcome-differs" if differs else "ok"
        return HistoryVerdict(run_id, workflow, kind, differs, source)
    if not verdict.ok:
        kind = "diverged" if verdict.kind == "replay.diverged" else "outcome-differs"
        return HistoryVerdict(run_id, workflow, kind, verdict.render(), source)
    return HistoryVerdict(run_id, workflow, "ok", "", source)


def _load(paths: Iterable[Path | str]) -> list[tuple[str, list[Event]]]:
    histories: list[tuple[str, list[Event]]] = []
    for given in paths:
        path = Path(given)
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        if not files:
            load_logs(path)  # raises the clear error: no history there
        for file in files:
            histories += [(str(file), events) for events in load_logs(file).values()]
    return histories


async def replay_histories(paths: Iterable[Path | str]) -> list[HistoryVerdict]:
    """Replay every history in ``paths`` (``.jsonl`` files or directories of them)."""
    return [await replay_history(events, source=source) for source, events in _load(paths)]


async def replay_world(
    world: World, run_ids: Sequence[str] = (), *, unfinished_only: bool = False
) -> list[HistoryVerdict]:
    """Replay runs straight from ``world``: ``run_ids``, or every run (in flight ones only)."""
    ids = list(run_ids)
    if not ids:
        cursor = None
        while True:
            page = await world.runs.list(cursor=cursor)
            ids += [r.run_id for r in page.runs if not (unfinished_only and r.status.terminal)]
            cursor = page.cursor
            if cursor is None:
                break
    source = str(getattr(world, "path", type(world).__name__))
    return [await replay_history(await read_log(world, i), source=source) for i in ids]


def assert_histories_replay(*paths: Path | str) -> list[HistoryVerdict]:
    """The pytest helper: every history under ``paths`` replays on the current code.

    Raises:
        AssertionError: listing every history that does not, each with both sides.
    """
    verdicts = asyncio.run(replay_histories(paths))
    if not verdicts:
        raise AssertionError(f"no history found in {', '.join(map(str, paths))}")
    broken = [v for v in verdicts if not v.ok]
    if broken:
        raise AssertionError(
            f"{len(broken)} of {len(verdicts)} recorded histories do not replay on this code:\n"
            + "\n".join(v.render() for v in broken)
        )
    return verdicts


async def migrate_run(world: World, run_id: str, to: str) -> HistoryVerdict:
    """Pin ``run_id`` to version ``to``, if the code here is ``to`` and replays its log.

    The code imported in this process must be version ``to`` (its
    :func:`~durasim.runtime.lowlevel.deployment_of`); its replay of the run's log
    must not diverge.  Then an ``attr_set`` of ``durasim.deployment`` moves the run
    (out-of-band, ``writer="durasim migrate"``) and a wake-up is queued for that
    version's workers.  Returns the replay's verdict.

    Raises:
        DeploymentError: ``to`` is not valid, the code here is another version,
            the replay diverges, or the run has ended.
    """
    check_deployment_id(to, where="--to")
    run = await world.runs.get(run_id)
    if run.status.terminal:
        raise DeploymentError(f"run {run_id} is {run.status.value}: only a live run moves")
    try:
        here = deployment_of(find_workflow(run.workflow_name))
    except LookupError as exc:
        raise DeploymentError(
            f"run {run_id} runs {run.workflow_name}, which the code imported here does not "
            f"define ({exc}); import the modules of version {to!r}"
        ) from None
    if here != to:
        raise DeploymentError(
            f"the code imported here is version {here!r}, not {to!r}: the replay check must "
            f"run the code of {to!r} (import its modules, or set {DEPLOYMENT_ENV}={to} if "
            "that is how its workers name it)"
        )
    verdict = await replay_history(await read_log(world, run_id), source="migrate")
    if not verdict.ok:
        raise DeploymentError(
            f"run {run_id} cannot move to version {to!r}: its log does not replay on that "
            f"code ({verdict.kind}):\n  {verdict.detail}"
        )
    await world.events.create(
        run_id,
        EventRequest.of("attr_set", changes=((DEPLOYMENT_ATTR, to),), writer="durasim migrate"),
    )
    await enqueue_wake(world, run_id, key=f"migrate:{run_id}:{to}", deployment=to)
    return verdict


async def export_history(world: World, run_id: str, path: Path | str) -> Path:
    """Write ``run_id``'s log to ``path`` as ``durasim inspect events ID --json`` does."""
    path = Path(path)
    events = await read_log(world, run_id)
    if not events:
        raise DurasimError(f"run {run_id!r} has no events to export")
    path.write_text("".join(event_to_json(e) + "\n" for e in events), encoding="utf-8")
    return path
