"""Hooks: a workflow waits for payloads from the outside world.

Inside workflow code, :func:`create_hook` journals a ``hook_created`` holding a
token; anyone who knows the token calls :func:`resume_hook` (outside any
workflow), which writes ``hook_received`` durably and wakes the run.  The
workflow reads payloads in log order: ``await hook`` takes the next one,
``async for payload in hook`` takes them all, and ``with hook:`` disposes the
hook (``hook_disposed``, the token is free again) on exit.

A token is held by at most one live hook across all runs.  A ``hook_created``
whose token is taken is journaled by the World as ``hook_conflict``; the
workflow then gets :class:`HookConflictError` at the await (or asks
``await hook.conflict()`` without raising).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import AsyncIterator, Generator
from typing import TYPE_CHECKING, Any, Protocol, cast

import attrs

from durasim.worlds import Event, EventRequest, HookNotFound, World

from ._context import running
from ._errors import HookConflictError, HookDisposedError, HookNotFoundError
from ._guards import unguarded
from ._wake import enqueue_wake
from .serialization import serialize

if TYPE_CHECKING:
    import asyncio

__all__ = ["Hook", "HookConflict", "HookState", "create_hook", "new_token", "resume_hook"]

#: Bytes of randomness in a generated token (192 bits).
TOKEN_BYTES = 24


def new_token() -> str:
    """An unguessable, URL-safe hook token.

    Made from the operating system's randomness even inside workflow code (where the
    sandbox refuses it): a token must not be guessable from the run id, and a replay
    reuses the recorded one.
    """
    with unguarded():
        return secrets.token_urlsafe(TOKEN_BYTES)


@attrs.frozen
class HookConflict:
    """Why a hook could not take its token: another live hook holds it."""

    token: str
    conflicting_run_id: str
    conflicting_hook_id: str


@attrs.define(eq=False)
class HookState:
    """One ``create_hook()`` of the workflow and what the log says about it."""

    correlation_id: str
    token: str
    metadata: bytes | None
    is_webhook: bool
    order: int
    token_given: bool = False  # the workflow chose the token (else the runtime made it)
    created: bool = False
    conflict: HookConflict | None = None
    dispose_issued: bool = False
    disposed: bool = False
    payloads: deque[Any] = attrs.field(factory=deque)
    waiters: deque[asyncio.Future[Any]] = attrs.field(factory=deque)
    settled: list[asyncio.Future[Any]] = attrs.field(factory=list)  # conflict() callers

    def error(self) -> BaseException | None:
        """What an await of this hook raises now, if anything."""
        if self.conflict is not None:
            return HookConflictError(
                f"hook {self.correlation_id}: token {self.token!r} is held by hook "
                f"{self.conflict.conflicting_hook_id} of run {self.conflict.conflicting_run_id}; "
                "use another token, or wait for that run to end or dispose its hook",
                token=self.token,
                conflicting_run_id=self.conflict.conflicting_run_id,
            )
        if self.dispose_issued:
            return HookDisposedError(
                f"hook {self.correlation_id} was disposed by the workflow; it receives nothing "
                "more: await it before leaving its `with` block",
                token=self.token,
            )
        return None


class HookCaller(Protocol):
    """What the engine offers hooks while workflow code runs (the Replay)."""

    def create_hook(self, token: str | None, metadata: Any, *, is_webhook: bool) -> HookState:
        """Journal a new hook; its state."""
        ...

    def next_payload(self, state: HookState) -> asyncio.Future[Any]:
        """A future of the hook's next unread payload (in log order)."""
        ...

    def dispose_hook(self, state: HookState) -> None:
        """Journal the hook's disposal (once)."""
        ...

    def hook_settled(self, state: HookState) -> asyncio.Future[HookConflict | None]:
        """A future resolved once the log says whether the hook holds its token."""
        ...


class Hook:
    """A hook in workflow code: awaitable, async-iterable, a context manager."""

    def __init__(self, caller: HookCaller, state: HookState) -> None:
        self._caller = caller
        self._state = state

    @property
    def token(self) -> str:
        """The token that resumes this hook."""
        return self._state.token

    @property
    def hook_id(self) -> str:
        """The hook's id in the run (``hook/<function>#<n>``, or ``hook=<digest>#<n>``)."""
        return self._state.correlation_id

    def __await__(self) -> Generator[Any, None, Any]:
        return self._caller.next_payload(self._state).__await__()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        return await self._caller.next_payload(self._state)

    async def conflict(self) -> HookConflict | None:
        """Wait until the log says whether this hook holds its token; the conflict, if any."""
        return await self._caller.hook_settled(self._state)

    def dispose(self) -> None:
        """Free the token now (journaled); later awaits raise :class:`HookDisposedError`."""
        try:
            self._caller.dispose_hook(self._state)
        except ReferenceError:
            # The replay running this workflow is gone: freed by the collector while
            # the workflow waited (which clears the weak references to it before its
            # finalizer closes the workflow's coroutines).  Nothing is journaled by a
            # dropped replay; the next delivery replays from the log.
            return

    def __enter__(self) -> Hook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()

    async def __aenter__(self) -> Hook:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.dispose()

    def __repr__(self) -> str:
        return f"Hook({self.hook_id}, token={self.token!r})"


def _caller(what: str) -> HookCaller:
    caller = running().replay("create_hook")
    if caller is None:
        raise HookNotFoundError(
            f"{what} was called outside workflow code: create hooks in a @workflow function; "
            "from outside, resume them with resume_hook(token, payload, world=...)"
        )
    return cast("HookCaller", caller)  # the Replay, checked by duck typing


def create_hook(token: str | None = None, metadata: Any = None) -> Hook:
    """A new hook of the running workflow (workflow code only).

    Args:
        token: the token that resumes it; ``None`` generates an unguessable one
            (recorded in the log, the same on every replay).  Choose your own to
            make it derivable by the sender (``f"approval:{order_id}"``).
        metadata: any serializable value, stored with the hook.
    """
    return _make_hook("create_hook()", token, metadata, is_webhook=False)


def _make_hook(what: str, token: str | None, metadata: Any, *, is_webhook: bool) -> Hook:
    caller = _caller(what)
    return Hook(caller, caller.create_hook(token, metadata, is_webhook=is_webhook))


async def resume_hook(
    token: str, payload: Any, *, world: World, resume_id: str | None = None
) -> Event:
    """Deliver ``payload`` to the live hook holding ``token`` and wake its run.

    Returns once the ``hook_received`` event is durable.  With a ``resume_id``
    (a retried HTTP call, a redelivered message) the payload lands once: a
    repeat returns the recorded event and writes nothing.

    Raises:
        HookNotFoundError: no live hook holds ``token`` (never created, disposed,
            or its run ended); nothing was written.
    """
    data = serialize(payload, root="hook payload")
    try:
        hook = await world.hooks.get_by_token(token)
        written = await world.events.create(
            hook.run_id,
            EventRequest.of("hook_received", hook.hook_id, payload=data, resume_id=resume_id),
        )
    except HookNotFound as exc:
        raise HookNotFoundError(
            f"no live hook holds token {token!r}: it was never created, was disposed, or its "
            "run ended; nothing was written",
            token=token,
        ) from exc
    assert written.event is not None
    key = f"hook:{hook.run_id}:{written.event.seq}"
    await enqueue_wake(world, hook.run_id, key=key, seq=written.event.seq)
    return written.event
