"""A Vercel World (``@workflow/world-*``) as a durasim World, through a Node host.

:class:`VercelWorld` implements durasim's World protocol over an unmodified Vercel World
running in its own Node process (:class:`~durasim.worlds._vercel_host.NodeHost`).  It
translates each call for the package's spec version (3: the 4.x line; 6/7: the 5.0 beta
line), lets the Vercel World accept or refuse every write itself, and derives what Vercel
has no API for (positions on 4.x, waits, hook status) from Vercel's own log.  What durasim
can ask and Vercel cannot express (the in-band fence, ``expected_seq``, batches, several
statuses in one list, the pull queue) is refused with :class:`NotExpressible`: a test that
needs it fails visibly, it never passes by accident.  docs/vercel.md has the mapping.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import re
import secrets
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from ._entities import (
    BatchResult,
    Capabilities,
    ChunkPage,
    Delivery,
    EventPage,
    EventResult,
    HookRecord,
    HookStatus,
    Message,
    RunPage,
    RunRecord,
    RunStatus,
    Snapshot,
    StepRecord,
    StepStatus,
    StreamInfo,
    WaitRecord,
)
from ._errors import (
    DurasimError,
    EntityConflict,
    EventNotFound,
    HookNotFound,
    InvalidRequest,
    RunExpired,
    RunNotFound,
    StepNotFound,
    TooEarly,
    WaitNotFound,
    WorldError,
)
from ._events import Event, EventRequest, EventType, check_run_id
from ._fold import fold_log
from ._setup import FactoryError, WorldSetup
from ._time import Clock, SystemClock
from ._vercel_host import (
    InstalledPackage,
    NodeHost,
    VercelCallError,
    install_vercel_package,
    require_node,
)

__all__ = [
    "DatabaseClock",
    "NotExpressible",
    "VercelFactory",
    "VercelWorld",
    "install_database_clock",
    "vercel_factory",
]

_VERCEL_RUN_ID = re.compile(r"^wrun_[0-9A-HJKMNP-TV-Z]{26}$")
_ERROR_PREFIX = "durasim:b64:"
_PAGE = 1000


class NotExpressible(DurasimError):
    """durasim asked for something the Vercel World's interface cannot express.

    Not a :class:`WorldError`: a test that needs it fails, it is never taken for a refusal.
    """


# --- errors ----------------------------------------------------------------------------

_BY_NAME: dict[str, type[WorldError]] = {
    "EntityConflictError": EntityConflict,
    "RunExpiredError": RunExpired,
    "TooEarlyError": TooEarly,
    "WorkflowRunNotFoundError": RunNotFound,
    "HookNotFoundError": HookNotFound,
    "ZodError": InvalidRequest,
    "UnsafeEntityIdError": InvalidRequest,
}
_INVALID = re.compile(r"^(Invalid|Unsafe) ")
_NOT_FOUND = re.compile(r"\b(run|step|hook|event|wait)\b[^\n]*\bnot found\b", re.IGNORECASE)
_FOUND_TYPES: dict[str, type[WorldError]] = {
    "run": RunNotFound,
    "step": StepNotFound,
    "hook": HookNotFound,
    "event": EventNotFound,
    "wait": WaitNotFound,
}


def translate_error(exc: VercelCallError, *, run_id: str | None, now: datetime) -> Exception:
    """A Vercel error as durasim's error type, by its class name (then its not-found text).

    Anything else stays a :class:`VercelCallError` (not a refusal: a test fails on it).
    """
    facts: dict[str, Any] = {"run_id": run_id} if run_id else {}
    message = f"{exc.name} from the Vercel World: {exc.message}"
    kind = _BY_NAME.get(exc.name)
    if kind is TooEarly:
        after = exc.retry_after
        if isinstance(after, int | float):
            from datetime import timedelta  # noqa: PLC0415

            after = now + timedelta(seconds=after)
        return TooEarly(message, retry_after=after, **facts)
    if kind is HookNotFound:
        return HookNotFound(message, **facts)
    if kind is not None:
        return kind(message, **facts)
    if exc.status == 400 or _INVALID.match(exc.message):
        return InvalidRequest(message, **facts)
    match = _NOT_FOUND.search(exc.message)
    if match and (exc.status in (None, 404)):
        return _FOUND_TYPES[match.group(1).lower()](message, **facts)
    return exc


# --- the spec versions -------------------------------------------------------------------


@attrs.frozen
class Spec:
    """What differs between the published lines of Vercel's World interface."""

    version: int

    @property
    def modern(self) -> bool:
        """The 5.0 beta line (spec 6/7): resume ids, cancel reasons."""
        return self.version >= 6


def _error_out(value: Any) -> Any:
    """durasim's error bytes as Vercel's error field (text: Vercel's errors are JSON)."""
    if isinstance(value, bytes):
        return _ERROR_PREFIX + base64.b64encode(value).decode()
    return value


def _error_in(value: Any) -> bytes | None:
    """Vercel's error field back as durasim's bytes."""
    if value is None:
        return None
    if isinstance(value, str) and value.startswith(_ERROR_PREFIX):
        return base64.b64decode(value[len(_ERROR_PREFIX) :])
    if isinstance(value, bytes):
        return value
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        inner = value["message"]
        if inner.startswith(_ERROR_PREFIX):
            return base64.b64decode(inner[len(_ERROR_PREFIX) :])
    return json.dumps(value, sort_keys=True, default=str).encode()


def _code(error: Any) -> str | None:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _context_out(data: dict[str, Any]) -> dict[str, Any] | None:
    """execution_context bytes and attributes (4.x has no name for them) in executionContext."""
    context: dict[str, Any] = {}
    if "execution_context" in data:
        raw = data["execution_context"]
        context["durasim_execution_context"] = (
            base64.b64encode(raw).decode() if isinstance(raw, bytes) else raw
        )
    if "attributes" in data:
        context["durasim_attributes"] = [list(pair) for pair in data["attributes"]]
    return context or None


def _context_in(context: Any) -> tuple[bytes | None, tuple[tuple[str, str], ...]]:
    if not isinstance(context, dict):
        return None, ()
    raw = context.get("durasim_execution_context")
    blob = base64.b64decode(raw) if isinstance(raw, str) else None
    pairs = tuple(
        (str(k), str(v)) for k, v in context.get("durasim_attributes") or () if v is not None
    )
    return blob, pairs


_FIELDS_OUT: dict[str, str] = {
    "workflow_name": "workflowName",
    "deployment_id": "deploymentId",
    "step_name": "stepName",
    "retry_after": "retryAfter",
    "is_webhook": "isWebhook",
    "resume_at": "resumeAt",
    "error_code": "errorCode",
    "conflicting_run_id": "conflictingRunId",
}
_FIELDS_IN = {v: k for k, v in _FIELDS_OUT.items()}
#: durasim fields Vercel has no name for (dropped by its schemas): refused, not lost.
_UNNAMED: dict[str, frozenset[str]] = {
    "step_created": frozenset({"inline", "creator_message_id"}),
    "step_started": frozenset({"owner_message_id", "start_reason", "attempt"}),
    "wait_completed": frozenset({"resume_at"}),
    "hook_received": frozenset({"token"}),
    "hook_conflict": frozenset({"token", "conflicting_hook_id", "metadata", "is_webhook"}),
}


@attrs.define
class _Ids:
    """durasim run ids <-> Vercel run ids, kept in ``ids.json`` for a reopened World."""

    path: Path
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    to_vercel: dict[str, str] = attrs.field(factory=dict)
    to_durasim: dict[str, str] = attrs.field(factory=dict)

    @classmethod
    def load(cls, path: Path) -> _Ids:
        ids = cls(path)
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            stored = {}
        for ours, theirs in stored.items():
            ids.add(ours, theirs)
        return ids

    def add(self, ours: str, theirs: str) -> None:
        self.to_vercel[ours] = theirs
        self.to_durasim[theirs] = ours
        self.path.write_text(json.dumps(self.to_vercel))

    def vercel(self, run_id: Any) -> Any:
        return self.to_vercel.get(run_id, run_id) if isinstance(run_id, str) else run_id

    def durasim(self, run_id: Any) -> Any:
        return self.to_durasim.get(run_id, run_id) if isinstance(run_id, str) else run_id


def _status(value: Any, kind: type[Any]) -> Any:
    try:
        return kind(value)
    except ValueError as exc:
        raise NotExpressible(f"the Vercel World answered a status {value!r}: {exc}") from exc


class VercelWorld:
    """durasim's World protocol over one Vercel World in its own Node process."""

    def __init__(
        self, host: NodeHost, info: dict[str, Any], *, clock: Clock, directory: Path
    ) -> None:
        self.host = host
        self.info = info
        self.spec = Spec(int(info.get("specVersion") or 1))
        self._clock = clock
        self.ids = _Ids.load(directory / "ids.json")
        #: Fields Vercel has no name for, kept by the adapter by Vercel event id (not
        #: durable): ``wait_completed``'s ``early`` (Vercel never checks that a wait is
        #: due) and, on spec 3, ``run_cancelled``'s ``reason``.
        self.kept: dict[str, Any] = {}
        declared = info.get("capabilities") or {}
        self._capabilities = Capabilities(
            in_band_fence=False,
            batch=False,
            conditional_writes=False,
            queue=False,
            streams=False,
            attr_set=False,
            hook_resume_dedup=bool(self.spec.modern and declared.get("hookResumeDedup")),
            input_validation=True,
            strict_lifecycles=True,
            durable=False,
        )
        self.runs = _Runs(self)
        self.steps = _Steps(self)
        self.events = _Events(self)
        self.hooks = _Hooks(self)
        self.waits = _Waits(self)
        self.queue = _Queue()
        self.streams = _Streams()
        self.on_close: Callable[[], None] | None = None
        #: For a World whose database stamps times (world-postgres): its clock row,
        #: moved to durasim's clock before each call (:class:`DatabaseClock`).
        self.database_clock: DatabaseClock | None = None
        self._closed = False

    @property
    def capabilities(self) -> Capabilities:
        """What the bridge can express for this spec version (docs/vercel.md)."""
        return self._capabilities

    @property
    def clock(self) -> Clock:
        """durasim's clock; the Node process's ``Date`` follows it."""
        return self._clock

    @property
    def package(self) -> InstalledPackage:
        """The hosted package."""
        return self.host.package

    async def close(self) -> None:
        """Close the Vercel World and end its Node process (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.host.close()
        if self.on_close is not None:
            self.on_close()

    async def call(self, path: str, *args: Any, run_id: str | None = None) -> Any:
        """One call into the Vercel World; its error translated (:func:`translate_error`)."""
        if self.database_clock is not None:
            self.database_clock.follow(self._clock.now())
        try:
            return await self.host.call(path, *args)
        except VercelCallError as exc:
            raise translate_error(exc, run_id=run_id, now=self._clock.now()) from None

    # --- reading Vercel's log -------------------------------------------------------

    async def raw_log(self, run_id: str) -> list[dict[str, Any]]:
        """Every event of the run as Vercel lists them (its order: createdAt, eventId)."""
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            pagination: dict[str, Any] = {"limit": _PAGE, "sortOrder": "asc"}
            if cursor:
                pagination["cursor"] = cursor
            page = await self.call(
                "events.list",
                {"runId": self.ids.vercel(run_id), "pagination": pagination, "resolveData": "all"},
                run_id=run_id,
            )
            out.extend(page.get("data") or [])
            cursor = page.get("cursor")
            if not page.get("hasMore") or not cursor:
                return out

    async def log(self, run_id: str) -> list[Event]:
        """The run's log in durasim's terms: positions from Vercel's order, derived fields."""
        return self.to_events(run_id, await self.raw_log(run_id))

    def to_events(self, run_id: str, raw: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        tokens: dict[str, str] = {}
        resumes: dict[str, datetime] = {}
        attempts: dict[str, int] = {}
        for seq, item in enumerate(raw, 1):
            events.append(self._event(run_id, seq, item, (tokens, resumes, attempts)))
        return events

    def _event(
        self,
        run_id: str,
        seq: int,
        item: Any,
        seen: tuple[dict[str, str], dict[str, datetime], dict[str, int]],
    ) -> Event:
        tokens, resumes, attempts = seen
        kind = str(item.get("eventType"))
        try:
            etype = EventType(kind)
        except ValueError as exc:
            raise NotExpressible(f"Vercel event type {kind!r} has no durasim name") from exc
        cid = item.get("correlationId") or None
        vdata: Any = item.get("eventData") or {}
        data: dict[str, Any] = {}
        if etype is EventType.RUN_CREATED:
            data["workflow_name"] = vdata.get("workflowName")
            data["input"] = vdata.get("input")
            if vdata.get("deploymentId"):
                data["deployment_id"] = vdata["deploymentId"]
            blob, pairs = _context_in(vdata.get("executionContext"))
            if blob is not None:
                data["execution_context"] = blob
            if pairs:
                data["attributes"] = pairs
        elif etype is EventType.RUN_COMPLETED:
            data["output"] = vdata.get("output")
        elif etype is EventType.RUN_FAILED:
            data["error"] = _error_in(vdata.get("error"))
            if vdata.get("errorCode") is not None:
                data["error_code"] = vdata["errorCode"]
        elif etype is EventType.RUN_CANCELLED:
            if vdata.get("cancelReason") is not None:
                data["reason"] = vdata["cancelReason"]
            elif str(item.get("eventId")) in self.kept:
                data["reason"] = self.kept[str(item.get("eventId"))]
        elif etype is EventType.STEP_CREATED:
            data["step_name"] = vdata.get("stepName")
            data["input"] = vdata.get("input")
        elif etype is EventType.STEP_STARTED:
            attempts[cid or ""] = attempts.get(cid or "", 0) + 1
            data["attempt"] = vdata.get("attempt") or attempts[cid or ""]
        elif etype in (EventType.STEP_RETRYING, EventType.STEP_FAILED):
            data["error"] = _error_in(vdata.get("error"))
            if etype is EventType.STEP_RETRYING and vdata.get("retryAfter") is not None:
                data["retry_after"] = vdata["retryAfter"]
        elif etype is EventType.STEP_COMPLETED:
            data["result"] = vdata.get("result")
        elif etype is EventType.HOOK_CREATED:
            data["token"] = vdata.get("token")
            tokens[cid or ""] = str(vdata.get("token"))
            if vdata.get("metadata") is not None:
                data["metadata"] = vdata["metadata"]
            if vdata.get("isWebhook") is not None:
                data["is_webhook"] = vdata["isWebhook"]
        elif etype is EventType.HOOK_RECEIVED:
            data["payload"] = vdata.get("payload")
            resume = item.get("resumeId") or vdata.get("resumeId")
            if resume is not None:
                data["resume_id"] = resume
            token = vdata.get("token") or tokens.get(cid or "")
            if token is not None:
                data["token"] = token
        elif etype is EventType.HOOK_CONFLICT:
            data["token"] = vdata.get("token")
            if vdata.get("conflictingRunId") is not None:
                data["conflicting_run_id"] = self.ids.durasim(vdata["conflictingRunId"])
        elif etype is EventType.WAIT_CREATED:
            data["resume_at"] = vdata.get("resumeAt")
            resumes[cid or ""] = vdata.get("resumeAt")
        elif etype is EventType.WAIT_COMPLETED:
            if str(item.get("eventId")) in self.kept:
                data["early"] = self.kept[str(item.get("eventId"))]
            resume_at = vdata.get("resumeAt") or resumes.get(cid or "")
            if resume_at is not None:
                data["resume_at"] = resume_at
        return Event(
            run_id=run_id,
            seq=seq,
            type=etype,
            created_at=item.get("createdAt") or self._clock.now(),
            correlation_id=cid,
            in_band=etype is EventType.RUN_CREATED,  # durasim: run_created is always in-band
            data=data,
        )

    # --- entities ---------------------------------------------------------------------

    def run_record(self, raw: Any, run_id: str | None = None) -> RunRecord:
        blob, pairs = _context_in(raw.get("executionContext"))
        return RunRecord(
            run_id=run_id or self.ids.durasim(raw.get("runId")),
            workflow_name=raw.get("workflowName"),
            status=_status(raw.get("status"), RunStatus),
            input=raw.get("input") if isinstance(raw.get("input"), bytes) else b"",
            created_at=raw.get("createdAt"),
            updated_at=raw.get("updatedAt") or raw.get("createdAt"),
            deployment_id=raw.get("deploymentId") or None,
            execution_context=blob,
            output=raw.get("output"),
            error=_error_in(raw.get("error")),
            error_code=raw.get("errorCode") or _code(raw.get("error")),
            cancel_reason=raw.get("cancelReason"),
            attributes=dict(pairs),
            started_at=raw.get("startedAt"),
            completed_at=raw.get("completedAt"),
        )

    def step_record(self, raw: Any, run_id: str) -> StepRecord:
        return StepRecord(
            run_id=run_id,
            step_id=raw.get("stepId"),
            step_name=raw.get("stepName"),
            status=_status(raw.get("status"), StepStatus),
            input=raw.get("input") if isinstance(raw.get("input"), bytes) else b"",
            attempt=int(raw.get("attempt") or 0),
            created_at=raw.get("createdAt"),
            updated_at=raw.get("updatedAt") or raw.get("createdAt"),
            output=raw.get("output"),
            error=_error_in(raw.get("error")),
            retry_after=raw.get("retryAfter"),
            started_at=raw.get("startedAt"),
            completed_at=raw.get("completedAt"),
        )

    async def run(self, run_id: str) -> RunRecord:
        raw = await self.call("runs.get", self.ids.vercel(run_id), run_id=run_id)
        record = self.run_record(raw, run_id)
        if record.status is RunStatus.CANCELLED and record.cancel_reason is None:
            # the reason is the first run_cancelled's (Vercel's run entity may lack it)
            for item in await self.raw_log(run_id):
                if item.get("eventType") == "run_cancelled":
                    reason = (item.get("eventData") or {}).get("cancelReason")
                    reason = reason or self.kept.get(str(item.get("eventId")))
                    if isinstance(reason, str):
                        record = attrs.evolve(record, cancel_reason=reason)
                    break
        return record


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def vercel_run_id(now: datetime, sequence: int) -> str:
    """A ``wrun_<ULID>`` stamped ``now`` (the virtual clock), as Vercel's clients mint them.

    Its random part is ``sequence``, the World's count of minted ids: ids increase in the
    order they are minted, as from the monotonic ULID factory of Vercel's client, and the
    same calls mint the same ids (a World's answers depend on its calls only).
    """
    value = (int(now.timestamp() * 1000) << 80) | (sequence & ((1 << 80) - 1))
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "wrun_" + "".join(reversed(chars))


def _vercel_id_for_creation(kind: str, run_id: str | None, ids: _Ids, now: datetime) -> Any:
    """The run id an event write sends: durasim's own mapped to a Vercel id, or as given.

    A durasim-legal id Vercel cannot take (``r1``) gets a Vercel id minted here and kept
    BEFORE the call, so concurrent creations of one durasim id send one Vercel id and
    Vercel judges the duplicate.  Any event write mints it, not only ``run_created``: a
    write racing ahead of its run's creation must reach the same Vercel run (Vercel then
    judges a write to a run it does not have).  A malformed id goes through, for Vercel's
    rules to judge.
    """
    del kind  # every event type maps alike
    if run_id is None or run_id in ids.to_vercel:
        return ids.vercel(run_id)
    try:
        check_run_id(run_id)
    except (InvalidRequest, TypeError):
        return run_id
    if _VERCEL_RUN_ID.match(run_id):
        return run_id
    with ids.lock:
        if run_id not in ids.to_vercel:
            ids.add(run_id, vercel_run_id(now, len(ids.to_vercel)))
    return ids.to_vercel[run_id]


class _Events:
    def __init__(self, world: VercelWorld) -> None:
        self.w = world

    def _request(self, request: EventRequest, run_id: str | None) -> dict[str, Any]:
        """durasim's request as Vercel's (a malformed one goes through for Vercel to judge)."""
        etype = getattr(request, "type", None)
        kind = getattr(etype, "value", etype)
        data = dict(getattr(request, "data", {}) or {})
        if kind in ("attr_set", "noop") and not self.w.spec.modern:
            raise NotExpressible(f"spec version {self.w.spec.version} has no {kind} event")
        out: dict[str, Any] = {"eventType": kind, "specVersion": self.w.spec.version}
        cid = getattr(request, "correlation_id", None)
        if cid is not None:
            out["correlationId"] = cid
        vdata: dict[str, Any] = {}
        unnamed = sorted(set(data) & _UNNAMED.get(str(kind), frozenset()))
        if unnamed:
            raise NotExpressible(
                f"{kind}: Vercel's {kind} has no field for {', '.join(unnamed)} "
                "(its schemas drop unknown fields)"
            )
        for key, value in data.items():
            if key in ("execution_context", "attributes"):
                continue
            if key == "error":
                vdata["error"] = _error_out(value)
            elif key == "reason":
                if self.w.spec.modern:
                    vdata["cancelReason"] = value
                # spec 3 has no field: the adapter keeps it (VercelWorld.kept)
            elif key in ("resume_id", "early"):
                continue  # a parameter, below; early: kept by the adapter
            elif key == "conflicting_run_id":
                vdata["conflictingRunId"] = self.w.ids.vercel(value)
            else:
                vdata[_FIELDS_OUT.get(str(key), str(key))] = value
        if kind == "run_created":
            vdata.setdefault("deploymentId", "")
            context = _context_out(data)
            if context is not None:
                vdata["executionContext"] = context
        if vdata or kind not in ("run_started", "run_cancelled", "hook_disposed", "step_started"):
            out["eventData"] = vdata
        return out

    async def create(
        self,
        run_id: str | None,
        request: EventRequest,
        *,
        in_band: bool = False,
        expected_seq_in_band: int | None = None,
        seen_seq: int | None = None,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> EventResult:
        if in_band or expected_seq_in_band is not None:
            raise NotExpressible("the in-band fence is in no published Vercel World (spec 9)")
        if expected_seq is not None:
            raise NotExpressible("expected_seq: Vercel's stateUpdatedAt guard is unimplemented")
        w = self.w
        body = self._request(request, run_id)
        params: dict[str, Any] = {"resolveData": "all"}
        if occurred_at is not None:
            params["occurredAt"] = occurred_at
        resume_id = (getattr(request, "data", None) or {}).get("resume_id")
        if resume_id is not None:
            params["resumeId"] = resume_id
        target = _vercel_id_for_creation(body["eventType"], run_id, w.ids, w.clock.now())
        ours = run_id
        before: set[str] = set()
        if resume_id is not None and ours is not None:
            # a deduplicated resume answers the canonical event: allocated 0 (derived)
            with contextlib.suppress(WorldError, VercelCallError):
                before = {str(e.get("eventId")) for e in await w.raw_log(ours)}
        answer = await w.call("events.create", target, body, params, run_id=run_id)
        sent = getattr(request, "data", None) or {}
        created = answer.get("event") if isinstance(answer, dict) else None
        if isinstance(created, dict) and created.get("eventId"):
            for key in ("early", "reason"):
                if key in sent and (key == "early" or not w.spec.modern):
                    w.kept[str(created["eventId"])] = sent[key]
        raw_event = answer.get("event")
        vercel_run = (raw_event or {}).get("runId") or (answer.get("run") or {}).get("runId")
        if ours is None:
            ours = vercel_run
        assert ours is not None
        raw_log = await w.raw_log(ours)
        log = w.to_events(ours, raw_log)
        event: Event | None = None
        if raw_event is not None:
            for item, translated in zip(raw_log, log, strict=True):
                if item.get("eventId") == raw_event.get("eventId"):
                    event = translated
                    break
            if event is None:
                raise NotExpressible(
                    f"the Vercel World answered event {raw_event.get('eventId')} that its "
                    f"events.list of run {vercel_run} does not show"
                )
        run = await w.run(ours)
        cid = getattr(request, "correlation_id", None)
        step = hook = wait = None
        kind = body["eventType"]
        folded = fold_log(log)
        if cid is not None and kind.startswith("step_"):
            try:
                step = await w.steps.get(ours, cid)
            except StepNotFound:
                step = None
        elif cid is not None and kind.startswith("hook_"):
            hook = folded.hooks.get(cid)
        elif cid is not None and kind.startswith("wait_"):
            wait = folded.waits.get(cid)
        unseen: tuple[Event, ...] = ()
        if seen_seq is not None:
            upto = event.seq if event is not None else len(log) + 1
            unseen = tuple(e for e in log if seen_seq < e.seq < upto)
        return EventResult(
            event=event,
            run=run,
            step=step,
            hook=hook,
            wait=wait,
            unseen=unseen,
            allocated=1
            if raw_event is not None and str(raw_event.get("eventId")) not in before
            else 0,
        )

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **options: Any
    ) -> BatchResult:
        raise NotExpressible("no published Vercel World has an all-or-nothing batch")

    async def get(self, run_id: str, seq: int) -> Event:
        log = await self.w.log(run_id)
        if not isinstance(seq, int) or not 1 <= seq <= len(log):
            raise EventNotFound(f"run {run_id} has no event at position {seq}", run_id=run_id)
        return log[seq - 1]

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        log = await self.w.log(run_id)
        page = log[after_seq : after_seq + limit]
        return EventPage(
            events=tuple(page),
            snapshot=Snapshot(seq=len(log), seq_in_band=1 if log else 0),
            has_more=after_seq + limit < len(log),
        )


class _Runs:
    def __init__(self, world: VercelWorld) -> None:
        self.w = world

    async def get(self, run_id: str) -> RunRecord:
        return await self.w.run(run_id)

    async def list(
        self,
        *,
        workflow_name: str | None = None,
        status: RunStatus | Sequence[RunStatus] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        params: dict[str, Any] = {"resolveData": "all"}
        if workflow_name is not None:
            params["workflowName"] = workflow_name
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            if len(statuses) != 1:
                raise NotExpressible(
                    f"runs.list takes one status in Vercel's interface, not {len(statuses)}"
                )
            params["status"] = str(statuses[0])
        pagination: dict[str, Any] = {"limit": limit, "sortOrder": "desc"}
        if cursor is not None:
            pagination["cursor"] = cursor
        params["pagination"] = pagination
        page = await self.w.call("runs.list", params)
        runs = tuple(self.w.run_record(raw) for raw in page.get("data") or [])
        return RunPage(runs=runs, cursor=page.get("cursor") if page.get("hasMore") else None)


class _Steps:
    def __init__(self, world: VercelWorld) -> None:
        self.w = world

    async def get(self, run_id: str, step_id: str) -> StepRecord:
        raw = await self.w.call("steps.get", self.w.ids.vercel(run_id), step_id, run_id=run_id)
        return self.w.step_record(raw, run_id)

    async def list(self, run_id: str) -> tuple[StepRecord, ...]:
        out: list[StepRecord] = []
        cursor = None
        while True:
            pagination: dict[str, Any] = {"limit": _PAGE, "sortOrder": "asc"}
            if cursor:
                pagination["cursor"] = cursor
            page = await self.w.call(
                "steps.list",
                {"runId": self.w.ids.vercel(run_id), "pagination": pagination},
                run_id=run_id,
            )
            out.extend(self.w.step_record(raw, run_id) for raw in page.get("data") or [])
            cursor = page.get("cursor")
            if not page.get("hasMore") or not cursor:
                return tuple(out)


async def _folded(world: VercelWorld, run_id: str) -> Any:
    log = await world.log(run_id)
    if not log:
        raise RunNotFound(f"run {run_id} has no log in the Vercel World", run_id=run_id)
    return fold_log(log)


class _Hooks:
    """Hooks with a status: derived from Vercel's log (Vercel deletes ended hooks)."""

    def __init__(self, world: VercelWorld) -> None:
        self.w = world

    async def get(self, run_id: str, hook_id: str) -> HookRecord:
        folded = await _folded(self.w, run_id)
        hook = folded.hooks.get(hook_id)
        if hook is None:
            raise HookNotFound(f"run {run_id} has no hook {hook_id!r}", run_id=run_id)
        return hook  # type: ignore[no-any-return]

    async def get_by_token(self, token: str) -> HookRecord:
        try:
            raw = await self.w.call("hooks.getByToken", token)
        except HookNotFound as exc:  # Vercel's error names no token: the refusal's facts do
            raise HookNotFound(str(exc), token=token) from None
        run_id = self.w.ids.durasim(raw.get("runId"))
        folded = await _folded(self.w, run_id)
        hook = folded.hooks.get(raw.get("hookId"))
        if hook is None:
            return HookRecord(
                run_id=run_id,
                hook_id=raw.get("hookId"),
                token=raw.get("token"),
                status=HookStatus.ACTIVE,
                created_at=raw.get("createdAt"),
                updated_at=raw.get("createdAt"),
                metadata=raw.get("metadata"),
                is_webhook=bool(raw.get("isWebhook")),
            )
        return hook  # type: ignore[no-any-return]

    async def list(self, run_id: str) -> tuple[HookRecord, ...]:
        folded = await _folded(self.w, run_id)
        return tuple(folded.hooks.values())


class _Waits:
    """Waits: Vercel has no read API for them; derived from its log."""

    def __init__(self, world: VercelWorld) -> None:
        self.w = world

    async def get(self, run_id: str, wait_id: str) -> WaitRecord:
        folded = await _folded(self.w, run_id)
        wait = folded.waits.get(wait_id)
        if wait is None:
            raise WaitNotFound(f"run {run_id} has no wait {wait_id!r}", run_id=run_id)
        return wait  # type: ignore[no-any-return]

    async def list(self, run_id: str) -> tuple[WaitRecord, ...]:
        folded = await _folded(self.w, run_id)
        return tuple(folded.waits.values())


def _absent(what: str) -> NotExpressible:
    return NotExpressible(f"{what}: Vercel's interface has no counterpart (docs/vercel.md)")


class _Queue:
    """Vercel's queue pushes to an HTTP handler: no pull, no leases."""

    async def enqueue(self, queue_name: str, payload: bytes, **options: Any) -> str:
        raise _absent("queue.enqueue")

    async def claim(self, **options: Any) -> Delivery | None:
        raise _absent("queue.claim")

    async def ack(self, delivery: Delivery) -> None:
        raise _absent("queue.ack")

    async def release(self, delivery: Delivery, **options: Any) -> None:
        raise _absent("queue.release")

    async def extend(self, delivery: Delivery, **options: Any) -> Delivery:
        raise _absent("queue.extend")

    async def next_due(self, **options: Any) -> datetime | None:
        raise _absent("queue.next_due")

    async def messages(self) -> tuple[Message, ...]:
        raise _absent("queue.messages")

    async def dead_letters(self) -> tuple[Message, ...]:
        raise _absent("queue.dead_letters")


class _Streams:
    """Streams are not bridged yet (declared absent)."""

    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        raise _absent("streams.write")

    async def close(self, run_id: str, name: str) -> None:
        raise _absent("streams.close")

    async def read(self, run_id: str, name: str, **options: Any) -> ChunkPage:
        raise _absent("streams.read")

    async def info(self, run_id: str, name: str) -> StreamInfo:
        raise _absent("streams.info")

    async def list(self, run_id: str) -> tuple[str, ...]:
        raise _absent("streams.list")


# --- the database's clock ------------------------------------------------------------------

#: The schema holding a World database's virtual time (one row) and ``now()`` reading it.
CLOCK_SCHEMA = "durasim_clock"
#: Schemas whose defaults keep the database's real time: graphile-worker (world-postgres's
#: queue) claims a job by comparing its ``run_at`` with the real ``now()`` inside its own
#: functions, so a virtual ``run_at`` would make jobs due early or never.  The bridge does
#: not drive that queue (it is not expressible), so nothing durasim reads is stamped there.
REAL_TIME_SCHEMAS = ("graphile_worker",)
_TIME_CALL = re.compile(
    r"(?P<literal>'(?:[^']|'')*')"  # text in quotes stays as it is
    r"|(?<![\w.])(?:pg_catalog\.)?"
    r"(?:(?P<call>now|transaction_timestamp|statement_timestamp|clock_timestamp)\(\)"
    r"|(?P<keyword>CURRENT_TIMESTAMP|LOCALTIMESTAMP|CURRENT_DATE)(?:\(\d+\))?(?![\w(]))",
    re.IGNORECASE,
)
_KEYWORD_CAST = {
    "current_timestamp": "",
    "localtimestamp": "::timestamp without time zone",
    "current_date": "::date",
}
_CLOCK_SETUP = (
    f"CREATE SCHEMA {CLOCK_SCHEMA}",
    f"CREATE TABLE {CLOCK_SCHEMA}.clock ("
    " one boolean PRIMARY KEY DEFAULT true CHECK (one),"
    " now timestamptz NOT NULL)",
    f"INSERT INTO {CLOCK_SCHEMA}.clock (now) VALUES (now())",
    # STABLE: one value per statement, as now() has one per transaction
    f"CREATE FUNCTION {CLOCK_SCHEMA}.now() RETURNS timestamptz"
    f" LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT now FROM {CLOCK_SCHEMA}.clock'",
)
_DEFAULTS = """
    SELECT n.nspname, c.relname, a.attname, pg_get_expr(d.adbin, d.adrelid)
    FROM pg_attrdef d
    JOIN pg_class c ON c.oid = d.adrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE c.relkind IN ('r', 'p')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema', %s)
      AND n.nspname NOT LIKE 'pg\\_%%'
      AND NOT (n.nspname = ANY(%s))
    ORDER BY 1, 2, 3
"""


def _virtual_default(expression: str) -> str:
    """A column default with every call of the real clock replaced by the clock row's."""

    def replace(match: re.Match[str]) -> str:
        if match["literal"]:
            return match["literal"]
        if match["call"]:
            return f"{CLOCK_SCHEMA}.now()"
        return f"({CLOCK_SCHEMA}.now()){_KEYWORD_CAST[match['keyword'].lower()]}"

    return _TIME_CALL.sub(replace, expression)


def install_database_clock(conninfo: str) -> list[str]:
    """Make a database's column defaults read :data:`CLOCK_SCHEMA` instead of the real clock.

    Creates the schema (a one-row table and ``durasim_clock.now()``), then re-points every
    column default that calls ``now()``, ``CURRENT_TIMESTAMP`` and their kin, in every
    schema but the system's and :data:`REAL_TIME_SCHEMAS`.  The package is not modified:
    only its database's defaults.  Returns the re-pointed columns (``schema.table.column``).
    """
    psycopg = _psycopg()
    moved: list[str] = []
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
        for statement in _CLOCK_SETUP:
            conn.execute(statement)  # fixed text, no input
        rows = conn.execute(_DEFAULTS, (CLOCK_SCHEMA, list(REAL_TIME_SCHEMAS))).fetchall()
        for schema, table, column, expression in rows:
            virtual = _virtual_default(expression)
            if virtual == expression:
                continue
            conn.execute(
                psycopg.sql.SQL("ALTER TABLE {}.{} ALTER COLUMN {} SET DEFAULT {}").format(
                    psycopg.sql.Identifier(schema),
                    psycopg.sql.Identifier(table),
                    psycopg.sql.Identifier(column),
                    psycopg.sql.SQL(virtual),  # the server's own text
                )
            )
            moved.append(f"{schema}.{table}.{column}")
    return moved


def _psycopg() -> Any:
    """psycopg 3, imported on first use (optional: ``pip install 'durasim[postgres]'``)."""
    try:
        import psycopg  # noqa: PLC0415 -- optional dependency
        import psycopg.sql  # noqa: PLC0415
    except ImportError as exc:
        raise FactoryError(
            f"world-postgres under durasim's clock needs psycopg 3 ({exc}): "
            "pip install 'durasim[postgres]'"
        ) from exc
    return psycopg


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class DatabaseClock:
    """A World database's clock row, kept at durasim's clock (the millisecond the host sends).

    :meth:`follow` runs before every call into the World: when the clock moved since the
    last value written, one ``UPDATE`` (autocommit) moves the row, so the package's
    ``DEFAULT durasim_clock.now()`` stamps virtual time; otherwise it costs a comparison.
    """

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        #: How many times the row was written (measured in docs/vercel.md).
        self.updates = 0
        self._written: int | None = None
        self._conn: Any = None
        self._lock = threading.Lock()

    def follow(self, now: datetime) -> None:
        """Write ``now`` (to the millisecond, as the Node host's ``Date``) if it changed."""
        millis = round(now.timestamp() * 1000)
        with self._lock:
            if millis == self._written:
                return
            if self._conn is None or self._conn.closed:
                self._conn = _psycopg().connect(self.conninfo, autocommit=True)
            self._conn.execute(
                f"UPDATE {CLOCK_SCHEMA}.clock SET now = %s",
                (_EPOCH + timedelta(milliseconds=millis),),
            )
            self._written = millis
            self.updates += 1

    def forget(self) -> None:
        """A new World takes the database: write its clock at its first call."""
        with self._lock:
            self._written = None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# --- the factory ----------------------------------------------------------------------------


@attrs.define
class VercelFactory:
    """``make(setup) -> VercelWorld`` for one Vercel World package: one Node process per World.

    Attributes:
        spec: what was asked for (``@workflow/world-local@4.4.1`` or a package directory).
        database_url: for world-postgres: a server where the factory may create and drop
            one scratch database per World (``postgresql://postgres@127.0.0.1:5432/test``).
        config: extra options passed to the package's ``createWorld``.
    """

    spec: str
    database_url: str | None = None
    config: dict[str, Any] = attrs.field(factory=dict)
    _package: InstalledPackage | None = attrs.field(default=None, init=False)
    _template: str | None = attrs.field(default=None, init=False)
    _admin: NodeHost | None = attrs.field(default=None, init=False)
    _free: list[str] = attrs.field(factory=list, init=False)
    _made: set[str] = attrs.field(factory=set, init=False)
    #: Each scratch database's clock row (kept with the database, reused with it).
    clocks: dict[str, DatabaseClock] = attrs.field(factory=dict, init=False)
    spares: int = 3
    _warm: list[NodeHost] = attrs.field(factory=list, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    #: The calls of each contract test's first World, by test name (for reproductions).
    transcripts: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict, init=False)
    #: When set, the next Worlds record their calls under this name (not the test's).
    record_as: str | None = attrs.field(default=None, init=False)
    _info: dict[str, Any] | None = attrs.field(default=None, init=False)

    def probe(self) -> dict[str, Any]:
        """What the package's World says of itself (``specVersion``, ``capabilities``)."""
        if self._info is None:
            with tempfile.TemporaryDirectory(prefix="durasim-vercel-") as scratch:
                setup = WorldSetup(clock=SystemClock(), ids=_NoIds(), directory=Path(scratch))
                world = self(setup)
                world.host.close()
                if world.on_close is not None:
                    world.on_close()
        assert self._info is not None
        return self._info

    def _host(self, clock: Clock) -> NodeHost:
        """A Node host of its own for one World: a warm spare (its import done), refilled.

        Importing a World package takes about a second of mostly idle time; spares
        started ahead hide it.  Every World still gets a fresh process.
        """
        package = self.package
        with self._lock:
            host = self._warm.pop(0) if self._warm else None
            while len(self._warm) < self.spares:
                spare = NodeHost(package, SystemClock())
                self._warm.append(spare)
                if len(self._warm) == 1:
                    atexit.register(self.close)
        if host is None:
            host = NodeHost(package, clock)
        host.clock = clock
        return host

    def close(self) -> None:
        """End the spare and administration Node processes (idempotent; also at exit)."""
        with self._lock:
            warm, self._warm = self._warm, []
            made, self._made, self._free = self._made, set(), []
            clocks, self.clocks = self.clocks, {}
        for host in warm:
            host.close()
        for clock in clocks.values():
            clock.close()
        for name in sorted(made):
            with contextlib.suppress(VercelCallError):
                self._sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()

    def _sql(self, *statements: str) -> Any:
        """Run statements on the server of ``database_url`` (the package's own pg client)."""
        if self._admin is None:
            self._admin = NodeHost(self.package, SystemClock())
        return self._admin.request(
            "sql", statements=list(statements), connectionString=self.database_url
        )

    @property
    def package(self) -> InstalledPackage:
        """The installed package (installed on first use)."""
        if self._package is None:
            self._package = install_vercel_package(self.spec)
        return self._package

    def _postgres_config(self, setup: WorldSetup) -> tuple[dict[str, Any], DatabaseClock]:
        """A scratch database for one World: a free one emptied, or a new copy of the template.

        Creating a database costs seconds; emptying the package's tables costs
        milliseconds, so databases are reused (never by two open Worlds at once).  The
        database comes with its clock row (:class:`DatabaseClock`), set at the first call.
        """
        assert self.database_url is not None
        base, _, _ = self.database_url.rpartition("/")
        if self._template is None:
            self._template = self._postgres_template(base)
        with self._lock:
            name = self._free.pop() if self._free else None
        if name is None:
            name = f"durasim_vercel_{secrets.token_hex(6)}"
            self._sql(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
        else:
            self._empty(f"{base}/{name}")
        (setup.directory / "database").write_text(name)
        with self._lock:
            clock = self.clocks.setdefault(name, DatabaseClock(f"{base}/{name}"))
        clock.forget()
        return {"connectionString": f"{base}/{name}", "maxPoolSize": 4}, clock

    def _empty(self, url: str) -> None:
        assert self._admin is not None
        self._admin.request(
            "sql",
            statements=[
                "DO $$ DECLARE t text; BEGIN "
                "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') INTO t "
                "FROM pg_tables WHERE schemaname = 'workflow'; "
                "IF t IS NOT NULL THEN EXECUTE 'TRUNCATE ' || t || ' CASCADE'; END IF; END $$"
            ],
            connectionString=url,
        )

    def _postgres_template(self, base: str) -> str:
        """A database migrated by the package's own set-up, copied for every World.

        After the set-up, :func:`install_database_clock` re-points the package's time
        defaults to the database's clock row (``_clock`` in the name: a template made
        before that is not reused).
        """
        package = self.package
        version = re.sub(r"[^0-9a-z]", "_", package.version.lower())
        name = f"durasim_vercel_tmpl_{version}_clock"
        rows = self._sql(f"SELECT datname FROM pg_database WHERE datname = '{name}'")
        if rows:
            return name
        building = f"{name}_{secrets.token_hex(4)}"
        try:
            self._sql(f'CREATE DATABASE "{building}"')
        except VercelCallError as exc:
            raise FactoryError(f"cannot create a database on {self.database_url}: {exc}") from exc
        cli = package.directory / "node_modules" / package.name / "dist" / "cli.js"
        done = subprocess.run(  # noqa: S603 -- the package's own set-up program
            [require_node(), str(cli)],
            env={**os.environ, "WORKFLOW_POSTGRES_URL": f"{base}/{building}"},
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if done.returncode:
            raise FactoryError(f"{package.label} set-up failed: {done.stderr.strip()[-300:]}")
        install_database_clock(f"{base}/{building}")
        try:
            self._sql(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        except VercelCallError:  # another process made it first
            self._sql(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
        return name

    def _release(self, setup: WorldSetup) -> None:
        """The World closed: its database is free for the next one."""
        try:
            name = (setup.directory / "database").read_text()
        except OSError:
            return
        with self._lock:
            self._free.append(name)
            self._made.add(name)

    def __call__(self, setup: WorldSetup) -> VercelWorld:
        host = self._host(setup.clock)
        try:
            config = dict(self.config)
            clock: DatabaseClock | None = None
            if self.database_url is not None:
                postgres, clock = self._postgres_config(setup)
                config.update(postgres)
            else:
                config.setdefault("dataDir", str(setup.directory / "workflow-data"))
            info = host.request("open", config=config)
        except BaseException:
            host.close()
            raise
        self._info = info
        world = VercelWorld(host, info, clock=setup.clock, directory=setup.directory)
        world.database_clock = clock
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit("::", 1)[-1]
        test = test.rsplit(" (", 1)[0]
        if self.record_as is not None:
            host.transcript = self.transcripts.setdefault(self.record_as, [])
        elif test and test not in self.transcripts:
            host.transcript = self.transcripts[test] = []
        if self.database_url is not None:
            world.on_close = lambda: self._release(setup)
        return world

    def run_script(
        self, script: Path, *, args: Sequence[str] = (), timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a plain-Node script against this package, as a user who installed it would.

        The script is copied into the package's install directory (where its bare
        ``import`` resolves) and run with Node, with ``args`` after it; for
        world-postgres it gets a scratch database set up by the package
        (``WORKFLOW_POSTGRES_URL``).
        """
        package = self.package
        env = dict(os.environ)
        with tempfile.TemporaryDirectory(prefix="durasim-vercel-") as scratch:
            setup = WorldSetup(clock=SystemClock(), ids=_NoIds(), directory=Path(scratch))
            if self.database_url is not None:
                postgres, _ = self._postgres_config(setup)
                env["WORKFLOW_POSTGRES_URL"] = postgres["connectionString"]
            copy = package.directory / f".durasim-script-{secrets.token_hex(4)}.mjs"
            copy.write_text(script.read_text())
            try:
                return subprocess.run(  # noqa: S603 -- node on a script durasim wrote
                    [require_node(), str(copy), *args],
                    cwd=package.directory,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
            finally:
                copy.unlink(missing_ok=True)
                self._release(setup)


class _NoIds:
    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{secrets.token_hex(8)}"


def vercel_factory(spec: str, *, database_url: str | None = None) -> VercelFactory:
    """The factory of ``durasim conformance --vercel SPEC`` (docs/vercel.md)."""
    return VercelFactory(spec, database_url=database_url)
