"""The heartbeat: one thread per process renewing every worker's leases, off their loops.

A :class:`Heartbeat` per worker holds its :class:`~._leases.LeaseKeeper` and its
World; the process's one heartbeat thread (its own event loop, started on first
need, lingering :data:`Heartbeat.LINGER_SECONDS` after its last user anywhere)
serves every Heartbeat that has a user: it renews every held lease through the
World's off-loop renewer (``world.queue.lease_renewer()``: a separate
connection for SQLite and PostgreSQL, a locked update for the in-memory World),
made when a renewal is first due and closed when the last user leaves, and it
watches each worker's loop: a step that blocks it longer than
:attr:`~._leases.LeasePolicy.warn_blocked_after` is logged with its name
(:func:`~._leases.running_steps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref

from durasim.worlds import Delivery, World

from ._leases import Extend, LeaseKeeper, LeaseRenewer, _steps_on, log

__all__ = ["Heartbeat"]


class _BeatState:
    """One :class:`Heartbeat`'s share of the heartbeat thread: the World only while a lease is held.

    The thread outlives its last user by :data:`Heartbeat.LINGER_SECONDS`; were it to
    hold the :class:`Heartbeat` (and so the World and its whole log) all that time, a
    worker dropped after :meth:`Worker.drain` would stay alive with everything it
    read.  So the thread holds this, and :meth:`Heartbeat.release` clears ``world``
    and the watched loop as the last user leaves, and takes the state off the
    thread's list (a renewer made from the World is closed at once).  Every field is
    read and written under the hub's lock, but ``_watched`` and ``_watched_thread``
    (read by the watcher on the thread, one atomic load each).
    """

    __slots__ = (
        "_watched",
        "_watched_thread",
        "hub",
        "keeper",
        "registered",
        "renewing",
        "tick",
        "users",
        "world",
    )

    def __init__(self, keeper: LeaseKeeper) -> None:
        self.keeper = keeper
        policy = keeper.policy
        #: How often this state's leases and loop are looked at (the thread beats at the
        #: shortest tick of the states it serves).
        self.tick = min(policy.renew_every, policy.warn_blocked_after) / 2
        self.users = 0
        #: On the hub's list of states served (while a user is in).
        self.registered = False
        #: The hub it was last put on (left by that hub, whichever is the module's now).
        self.hub: _Hub | None = None
        #: The thread holds a renewer made from the World (closed when the last user leaves).
        self.renewing = False
        self.world: World | None = None
        self._watched: asyncio.AbstractEventLoop | None = None
        self._watched_thread = 0

    def serving(self, hub: _Hub) -> bool:
        """Whether a lease is held (a user is in), without taking the World."""
        with hub.lock:
            return self.users > 0

    def in_use(self, hub: _Hub) -> World | None:
        """The World while a lease is held; None once the last user left."""
        with hub.lock:
            return self.world


class _Hub:
    """The process's one heartbeat thread and the states it serves.

    One thread for every :class:`Heartbeat` in the process: starting a thread and
    its event loop per worker cost a run about half a millisecond (``Thread.start``
    waits for the new thread, which then competes for the GIL while it makes its
    loop), more than a one-step run's own work.  Every field is guarded by ``lock``
    (a fork makes the child a fresh hub: :meth:`reset`).
    """

    #: The longest sleep of a thread that serves no state (it lingers, then ends).
    IDLE_TICK = 0.5

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: The states served (an insertion-ordered set).
        self.states: dict[_BeatState, None] = {}
        self.thread: threading.Thread | None = None
        #: Resolved to cut the thread's current sleep short (made by the thread).
        self.wake: asyncio.Future[None] | None = None
        #: The length of the thread's current sleep: a new state with a shorter tick wakes it.
        self.sleeping_for = 0.0
        #: Since when no state is served (the thread ends LINGER_SECONDS later).
        self.idle_since: float | None = None
        #: States of Heartbeats dropped while a user was in, left by the thread at its next
        #: beat (appended by a finalizer, which must not take the lock: the garbage
        #: collector may run it in a thread that holds it).
        self.dropped: list[_BeatState] = []

    def join(self, state: _BeatState) -> None:
        """Serve ``state`` (under the lock); starts the thread if none runs."""
        state.registered = True
        state.hub = self
        self.states[state] = None
        self.idle_since = None
        if state.tick < self.sleeping_for:
            self.poke()
        if self.thread is None:  # none yet, ended after lingering, or died (logged)
            thread = threading.Thread(
                target=_serve, args=(self,), name="durasim-heartbeat", daemon=True
            )
            self.thread, self.sleeping_for = thread, 0.0
            thread.start()

    def leave(self, state: _BeatState) -> None:
        """Stop serving ``state`` (under the lock)."""
        if not state.registered:
            return
        state.registered = False
        del self.states[state]
        if not self.states:
            self.idle_since = time.monotonic()
        if state.renewing:  # its renewer holds the World: closed now, not at the next beat
            self.poke()

    def poke(self) -> None:
        """Cut the thread's sleep short (under the lock)."""
        wake, self.wake, self.sleeping_for = self.wake, None, 0.0
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                wake.get_loop().call_soon_threadsafe(_resolve, wake)

    def reset(self) -> None:
        """In a forked child: the parent's thread does not exist there, nor its renewers.

        Only the child's own deliveries are renewed there (a Heartbeat in use joins
        again at its next :meth:`Heartbeat.acquire`).
        """
        self.lock = threading.Lock()
        for state in self.states:
            state.registered = False
        self.states.clear()
        self.dropped.clear()
        self.thread = None
        self.wake = None
        self.idle_since = None
        self.sleeping_for = 0.0


_hub = _Hub()
os.register_at_fork(after_in_child=_hub.reset)


def _dropped(state: _BeatState) -> None:
    """A :class:`Heartbeat` was collected: the thread lets its state go (any thread, no lock)."""
    state.world = state._watched = None
    hub = state.hub
    if state.registered and hub is not None:  # dropped while a user was in: left at once
        hub.dropped.append(state)
        wake = hub.wake
        if wake is not None:
            with contextlib.suppress(RuntimeError):
                wake.get_loop().call_soon_threadsafe(_resolve, wake)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Heartbeat:
    """Renews a :class:`LeaseKeeper`'s leases and watches a loop, from the heartbeat thread.

    One thread serves every Heartbeat in the process, with its own event loop,
    so a renewer bound to it (a separate database connection) never touches a
    worker's loop.  :meth:`acquire` puts this Heartbeat on the thread's list
    (starting the thread if none runs) and :meth:`release` takes it off as its
    last user leaves; with no Heartbeat to serve for :data:`LINGER_SECONDS` the
    thread ends, so back-to-back workers share one thread, not one each.  While
    no lease is held the thread holds neither the World nor this object: a
    worker dropped after its last delivery is freed at once, lingering thread or
    not.  Each Heartbeat keeps its own loop watcher and its own renewer (made
    when a renewal is first due, closed when its last user leaves); one World's
    slow renewal never holds back another's (each runs as its own task).

    Args:
        world: the World whose queue renews the leases.
        keeper: the held leases.
    """

    #: How long the thread outlives its last user (a burst of deliveries shares it).
    LINGER_SECONDS = 3.0

    def __init__(self, world: World, keeper: LeaseKeeper) -> None:
        self.world = world
        self.keeper = keeper
        self._state = _BeatState(keeper)
        # A worker dropped while a user is in: the thread lets its state go at once.
        weakref.finalize(self, _dropped, self._state)

    @property
    def alive(self) -> bool:
        """Whether the heartbeat thread (the process's one) is running."""
        with _hub.lock:
            thread = _hub.thread
        return thread is not None and thread.is_alive()

    @property
    def serving(self) -> bool:
        """Whether the heartbeat thread serves this Heartbeat now (a user is in)."""
        with _hub.lock:
            return self._state.registered

    def acquire(self) -> None:
        """One more user (a delivery); called on the worker's loop."""
        state = self._state
        loop = asyncio.get_running_loop()
        ident = threading.get_ident()
        hub = _hub
        with hub.lock:
            state.users += 1
            state.world = self.world
            state._watched = loop
            state._watched_thread = ident
            if not state.registered or hub.thread is None:
                hub.join(state)

    def release(self) -> None:
        """One user is done; the last takes this Heartbeat off the thread."""
        state = self._state
        hub = state.hub or _hub  # (set by the acquire that put it on a hub)
        with hub.lock:
            state.users -= 1
            if state.users == 0:
                state.world = None
                state._watched = None
                hub.leave(state)


def _serve(hub: _Hub) -> None:
    """The heartbeat thread: serves ``hub`` (the one that started it, never a later value
    of the module's ``_hub``) until no state was served for LINGER_SECONDS."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_beats(loop, hub))
    except BaseException:  # never silently: the next acquire() starts a new thread
        log.exception("the lease heartbeat thread failed; it starts again at the next delivery")
    finally:
        with hub.lock:
            if hub.thread is threading.current_thread():
                hub.thread = hub.wake = None
        loop.close()


async def _beats(loop: asyncio.AbstractEventLoop, hub: _Hub) -> None:
    beats: dict[_BeatState, _Beat] = {}
    #: The beats of states that left, closing their renewers (after a renewal under way).
    closing: dict[asyncio.Task[None], _Beat] = {}
    try:
        while True:
            with hub.lock:
                while hub.dropped:
                    hub.leave(hub.dropped.pop())
                states = list(hub.states)
                if states:
                    tick = min(state.tick for state in states)
                else:
                    since = hub.idle_since
                    idle = 0.0 if since is None else time.monotonic() - since
                    left = Heartbeat.LINGER_SECONDS - idle
                    if left <= 0:
                        hub.thread = hub.wake = None  # the next user starts a new one
                        return
                    tick = min(left, _Hub.IDLE_TICK)
                wake: asyncio.Future[None] = loop.create_future()
                hub.wake, hub.sleeping_for = wake, tick
            served = set(states)
            for state in [s for s in beats if s not in served]:
                left_beat = beats.pop(state)
                task = asyncio.ensure_future(left_beat.close())
                closing[task] = left_beat
                task.add_done_callback(closing.pop)
            for state in states:
                beat = beats.get(state)
                if beat is None:
                    beat = beats[state] = _Beat(state, hub)
                try:
                    beat.check()
                except Exception:  # never let one worker's beat stop the others'
                    log.exception("lease heartbeat failed")
            del states, served
            await asyncio.wait((wake,), timeout=tick)
    finally:
        # No lease is held any more (or the thread failed): a renewal still under way (a
        # stuck connection) is cancelled, so the thread ends and its renewers are closed.
        for beat in [*beats.values(), *closing.values()]:
            if beat.task is not None:
                beat.task.cancel()
        ends = [*closing, *(asyncio.ensure_future(beat.close()) for beat in beats.values())]
        if ends:
            await asyncio.gather(*ends, return_exceptions=True)


class _Beat:
    """What the thread keeps for one state it serves: its loop watcher, and its renewer."""

    __slots__ = ("extend", "hub", "renewer", "state", "task", "watcher")

    def __init__(self, state: _BeatState, hub: _Hub) -> None:
        self.state = state
        #: The hub whose thread keeps this (its lock guards the state's fields).
        self.hub = hub
        self.watcher = _LoopWatcher(state, state.keeper.policy.warn_blocked_after)
        self.renewer: LeaseRenewer | None = None
        self.extend: Extend | None = None
        #: The renewal (or renewer closing) under way, if any.
        self.task: asyncio.Task[None] | None = None

    def check(self) -> None:
        """One beat: ping the watched loop, and start renewing what is due."""
        self.watcher.check()
        task = self.task
        if task is not None and not task.done():
            return  # a renewal still under way (a slow World) is not started twice
        state = self.state
        if not state.serving(self.hub):
            if self.extend is not None:  # the last user left: let the World go
                self.task = asyncio.ensure_future(self._close_renewer())
        elif state.keeper.due():
            # The World is taken only in the renewal, when one is due: a beat that finds
            # nothing to renew never holds it, not even for an instant, so a worker
            # released meanwhile is freed at once (its beat may be mid-way).
            self.task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        state = self.state
        try:
            if self.extend is None:  # made when first needed, kept while a lease is held
                world = state.in_use(self.hub)
                if world is None:
                    return
                make = getattr(world.queue, "lease_renewer", None)
                self.renewer = make() if make is not None else None
                self.extend = _extender(state, world, self.renewer)
                with self.hub.lock:
                    state.renewing = True
                del world
            await state.keeper.renew_due(self.extend)
        except Exception:  # the next beat retries
            log.exception("lease renewal failed")

    async def _close_renewer(self) -> None:
        renewer, self.renewer, self.extend = self.renewer, None, None
        with self.hub.lock:
            self.state.renewing = False
        if renewer is not None:
            with contextlib.suppress(Exception):
                await renewer.close()

    async def close(self) -> None:
        """The state left (or the thread ends): let the renewal end, then close the renewer."""
        task = self.task
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self._close_renewer()


def _extender(state: _BeatState, world: World, renewer: LeaseRenewer | None) -> Extend:
    lease = state.keeper.policy.lease_seconds
    if renewer is not None:
        found = renewer

        async def off_loop(delivery: Delivery) -> Delivery:
            return await found.extend(delivery, lease_seconds=lease)

        return off_loop
    # A World without an off-loop renewer: renew on its own loop (a step that
    # blocks that loop also holds the renewal back, as the World requires).
    queue = world.queue

    async def on_loop(delivery: Delivery) -> Delivery:
        watched = state._watched
        if watched is None:  # the last user left meanwhile: nothing to renew
            return delivery
        future = asyncio.run_coroutine_threadsafe(
            queue.extend(delivery, lease_seconds=lease), watched
        )
        return await asyncio.wrap_future(future)

    return on_loop


class _LoopWatcher:
    """Pings a loop from another thread; a ping unanswered for too long is a blocked loop."""

    def __init__(self, heartbeat: _BeatState, threshold: float) -> None:
        self._heartbeat = heartbeat
        self._threshold = threshold
        self._sent: float | None = None
        self._answered = threading.Event()
        self._warned: list[str] | None = None

    def check(self) -> None:
        loop = self._heartbeat._watched
        if loop is None or loop.is_closed():
            return
        now = time.monotonic()
        if self._sent is not None and not self._answered.is_set():
            blocked = now - self._sent
            if blocked > self._threshold and not self._warned:
                # The steps that have run on the loop for longer than the threshold.  Asked
                # again at every beat until one is found: the ping may have been sent while
                # the delivery was still busy before its step began (a loaded machine).
                since = now - self._threshold
                steps = _steps_on(self._heartbeat._watched_thread, since=since)
                # A long delivery on a World whose calls never yield (memory, SQLite) also
                # keeps the loop: only a step body running all along is worth a warning.
                if steps or self._warned is None:
                    log.log(
                        logging.WARNING if steps else logging.DEBUG,
                        "%s has blocked the worker's event loop for %.1f s (blocking code in "
                        "async def?); its lease is still renewed, but other deliveries on this "
                        "loop wait",
                        _describe(steps),
                        blocked,
                    )
                self._warned = steps
            return
        if self._sent is not None and self._warned:
            log.warning(
                "%s blocked the worker's event loop for %.1f s",
                _describe(self._warned),
                self._answered_at - self._sent,
            )
        self._warned = None
        self._answered.clear()
        self._sent = now
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            # By weak reference: a loop that does not turn for a while (back-to-back
            # deliveries on a World whose calls never yield) keeps the ping in its
            # queue, and must not keep this watcher, its heartbeat and its leases.
            loop.call_soon_threadsafe(_answer, weakref.ref(self))

    def _answer(self) -> None:
        self._answered_at = time.monotonic()
        self._answered.set()

    _answered_at: float = 0.0


def _answer(ref: weakref.ref[_LoopWatcher]) -> None:
    watcher = ref()
    if watcher is not None:
        watcher._answer()


def _describe(names: list[str]) -> str:
    if not names:
        return "the delivery (no single step body)"
    if len(names) == 1:
        return f"step {names[0]!r}"
    return "one of the steps " + ", ".join(repr(n) for n in names)
