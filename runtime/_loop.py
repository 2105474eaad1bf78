"""The deterministic event loop every workflow runs on.

Workflow code is plain asyncio: ``gather``, ``wait``, tasks, ``Event``, timeouts,
``sleep``.  It runs on this loop instead of the real one, and this loop never
looks at the wall clock or the operating system:

* callbacks run in the order they were scheduled, and :meth:`WorkflowLoop.run_ready`
  runs them until none is left (quiescence) — nothing else can interleave;
* :meth:`time` is the run's clock, set by the replay engine to the time of the
  last event it delivered;
* a timer (``call_at``/``call_later``, hence ``asyncio.sleep``, ``wait_for``,
  ``asyncio.timeout``) is not armed: it is handed to the engine, which turns it
  into a durable wait and fires it when the log says the wait completed;
* tasks and futures hash by creation order, so sets of them (``asyncio.wait``
  returns sets) iterate in the same order in every process;
* I/O, executors, subprocesses and signals raise :class:`WorkflowSandboxError`.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import itertools
import sys
import threading
import types
import weakref
from asyncio import events
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar, TypeVarTuple, Unpack

from ._errors import WorkflowSandboxError, passes_through
from ._guards import RUNNING as _running
from ._sites import mark_boundary, task_site

__all__ = ["WorkflowFuture", "WorkflowLoop", "WorkflowTask", "in_workflow", "route_while_running"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class _LoopState(threading.local):
    """Per thread: the workflow loop running workflow code on it (``loop`` is None elsewhere)."""

    # A class attribute: a thread that never ran workflow code reads None, no getattr.
    loop: WorkflowLoop | None = None


_state = _LoopState()


def in_workflow() -> WorkflowLoop | None:
    """The workflow loop running workflow code on this thread right now, if any."""
    return _state.loop


class _Routes:
    """Module attributes replaced while workflow code runs, and restored when none runs.

    Installed when the first :meth:`WorkflowLoop.run_ready` on any thread starts and
    restored when the last one ends, so outside workflow code (and in a process
    that runs no workflow) the module holds its own function.  While installed, a
    replacement is also seen by other threads: each checks :func:`in_workflow`
    and calls the original elsewhere.

    This runs twice per event a workflow handles, so a plain module's attribute is
    read and replaced as an item of its ``__dict__`` (``getattr``/``setattr`` cost
    twice as much, a ``dict.update`` on a module's namespace more still); an owner
    that is not a plain module (or a name its ``__dict__`` lacks) goes through
    ``getattr``/``setattr``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._routes: dict[tuple[int, str], tuple[Any, str, object]] = {}
        #: Installs every route (saving what it replaces) and returns what restores them.
        self._install: Callable[[], Callable[[], None]] = _swapper((), ())
        #: What restores the routes installed now (the ones of the install that ran).
        self._undo: Callable[[], None] = _nothing

    def add(self, owner: Any, name: str, replacement: object) -> None:
        with self._lock:
            self._routes[(id(owner), name)] = (owner, name, replacement)
            plan: list[tuple[dict[str, Any], str, object]] = []
            table: list[tuple[Any, str, object]] = []
            for routed, attribute, value in self._routes.values():
                if type(routed) is types.ModuleType and attribute in vars(routed):
                    plan.append((vars(routed), attribute, value))
                else:
                    table.append((routed, attribute, value))
            routes = (tuple(plan), tuple(table))
            self._install = lambda: self._compile(*routes)

    def _compile(
        self,
        plan: tuple[tuple[dict[str, Any], str, object], ...],
        table: tuple[tuple[Any, str, object], ...],
    ) -> Callable[[], None]:
        """Write ``install`` for the routes added so far (the first time they are installed)."""
        self._install = install = _swapper(plan, table)
        return install()

    # The lock's own acquire and release: half the cost of a ``with`` block.
    def enter(self) -> None:
        lock = self._lock
        lock.acquire()
        try:
            self._running += 1
            if self._running == 1:
                self._undo = self._install()
        finally:
            lock.release()

    def exit(self) -> None:
        lock = self._lock
        lock.acquire()
        try:
            self._running -= 1
            if self._running == 0:
                self._undo()
        finally:
            lock.release()


def _nothing() -> None:
    pass


def _swapper(
    plan: tuple[tuple[dict[str, Any], str, object], ...],
    table: tuple[tuple[Any, str, object], ...],
) -> Callable[[], Callable[[], None]]:
    """``install()``: put every route in place, saving what it replaces; returns ``restore``.

    Both are written out for this set of routes, one statement per route, with
    no loop, no tuple unpacking and no list built (they run twice per event a
    workflow handles); what ``install`` saved stays in a list of their own until
    the next ``install``, so a route added meanwhile restores nothing it did not
    replace.  Module attributes are items of the module's ``__dict__``, anything
    else goes through ``getattr``/``setattr``; all in the order given, modules first.
    """
    namespace: dict[str, Any] = {"saved": [None] * (len(plan) + len(table))}
    install, restore = [], []
    for i, (space, name, replacement) in enumerate(plan):
        namespace[f"ns{i}"], namespace[f"r{i}"] = space, replacement
        install.append(f"    saved[{i}] = ns{i}[{name!r}]\n    ns{i}[{name!r}] = r{i}\n")
        restore.append(f"    ns{i}[{name!r}] = saved[{i}]\n")
    for j, (owner, name, replacement) in enumerate(table, start=len(plan)):
        namespace[f"o{j}"], namespace[f"r{j}"] = owner, replacement
        install.append(
            f"    saved[{j}] = getattr(o{j}, {name!r})\n    setattr(o{j}, {name!r}, r{j})\n"
        )
        # An attribute restored is not held any longer than before.
        restore.append(f"    setattr(o{j}, {name!r}, saved[{j}])\n    saved[{j}] = None\n")
    source = (
        "def restore():\n" + "".join(restore) + "    pass\n"
        "def install():\n" + "".join(install) + "    return restore\n"
    )
    exec(compile(source, "<durasim routes>", "exec"), namespace)  # noqa: S102 -- our own source
    return namespace["install"]  # type: ignore[no-any-return]


_routes = _Routes()


def route_while_running(owner: Any, name: str, replacement: object) -> None:
    """Make ``owner.name`` be ``replacement`` while workflow code runs, only then.

    ``replacement`` must behave like the original when :func:`in_workflow` is None
    (another thread may call it while a workflow runs).
    """
    _routes.add(owner, name, replacement)


_future_init = asyncio.Future.__init__
# What run_ready calls, bound once (asyncio's C versions, as asyncio itself binds them).
_get_running_loop = events._get_running_loop
_set_running_loop = events._set_running_loop
_enter_task = asyncio.tasks._enter_task
_leave_task = asyncio.tasks._leave_task

#: ``asyncio.current_task(loop)`` for a given loop.  On Python 3.11 that function is
#: written in Python and returns ``_current_tasks.get(loop)``: that dict's own ``get``
#: then, a frame less per run of workflow code (later versions: the function itself).
_tasks_by_loop = getattr(asyncio.tasks, "_current_tasks", None)
_current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
    _tasks_by_loop.get
    if sys.version_info < (3, 12) and type(_tasks_by_loop) is dict
    else asyncio.current_task
)


class WorkflowFuture(asyncio.Future[T]):
    """A future whose hash is its creation number on its loop (deterministic set order)."""

    def __init__(self, *, loop: WorkflowLoop) -> None:
        self._durasim_number = next(loop.numbers)
        _future_init(self, loop=loop)  # super().__init__ without the super object

    def __hash__(self) -> int:
        return self._durasim_number


class WorkflowTask(asyncio.Task[T]):
    """A task whose hash is its creation number on its loop (deterministic set order)."""

    def __init__(
        self,
        coro: Coroutine[Any, Any, T] | Generator[Any, None, T],
        *,
        loop: WorkflowLoop,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> None:
        # Numbered before Task.__init__, which already hashes the task (all_tasks).
        self._durasim_number = next(loop.numbers)
        self._durasim_site = task_site(coro)  # names the hooks and timers it makes
        super().__init__(coro, loop=loop, name=name, context=context)
        loop.made(self)

    def __hash__(self) -> int:
        return self._durasim_number


TimerSink = Callable[[asyncio.TimerHandle], None]

_Handle = asyncio.Handle
_new_handle = object.__new__
_copy_context = contextvars.copy_context
#: Whether :meth:`WorkflowLoop.call_soon` may make a handle by setting its slots: the
#: slots ``Handle.__init__`` sets (Python 3.11 to 3.14), nothing else (every field is
#: set, none left unset), and no ``__new__`` of its own.
_HANDLE_SLOTS = (
    set(getattr(_Handle, "__slots__", ())) - {"__weakref__"}
    == {"_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr", "_context"}
    and _Handle.__new__ is object.__new__
)


class WorkflowLoop(asyncio.AbstractEventLoop):
    """A deterministic, virtual-time event loop driven step by step by the replay engine.

    Args:
        on_timer: called with every timer the workflow arms (the engine makes it
            a durable wait); the timer fires when the engine calls
            :meth:`fire_timer`.
        on_timer_cancelled: called when the workflow cancels an armed timer.
        now: the initial clock, seconds since the Unix epoch.
    """

    def __init__(
        self,
        *,
        on_timer: TimerSink,
        on_timer_cancelled: TimerSink,
        now: float,
    ) -> None:
        self._ready: collections.deque[asyncio.Handle] = collections.deque()
        #: The callbacks scheduled (read-only outside the loop: empty means quiescent).
        self.callbacks = self._ready
        #: Creation numbers of its tasks and futures (:meth:`next_number`).
        self.numbers = itertools.count(1)
        self._now = now
        self._on_timer = on_timer
        self._on_timer_cancelled = on_timer_cancelled
        self._closed = False
        self._running = False
        self._exceptions: list[dict[str, Any]] = []
        self._tasks_made = 0
        #: Its tasks, weakly, in creation order (see :meth:`pending_tasks`).
        self._tasks: list[weakref.ref[WorkflowTask[Any]]] = []

    # -- driving ------------------------------------------------------------------

    def set_time(self, now: float) -> None:
        """Move the run's clock (never backwards)."""
        self._now = max(self._now, now)

    def run_ready(self, determinism: object | None = None) -> None:
        """Run scheduled callbacks until none is left.

        Workflow code runs only inside this call: the loop is the running loop,
        the sandbox is armed for this thread, and the stdlib functions routed by
        :func:`route_while_running` are replaced.  ``determinism``: the run whose
        clock and randomness workflow code sees meanwhile (a
        :class:`~._determinism.RunDeterminism`: its ``run(loop.run_ready)``,
        without the frame in between).
        """
        outer = _get_running_loop()
        # The task of the loop we run inside (a worker's delivery) steps aside while
        # ours run: from Python 3.14 a thread has one running task, and entering a
        # workflow task while the outer one is current is refused.
        outer_task = _current_task(outer) if outer is not None else None
        if outer is not None and outer_task is not None:
            _leave_task(outer, outer_task)
        state, running = _state, _running
        previous, previous_run = state.loop, running.run
        if determinism is not None:  # (RunDeterminism.run, without its frame)
            running.run = determinism
        _set_running_loop(self)
        state.loop = self
        self._running = True
        _routes.enter()
        try:
            ready = self._ready
            while ready:
                handle: Any = ready.popleft()
                if not handle._cancelled:
                    # handle._run() without its frame (asyncio's Handle and
                    # TimerHandle: what _run does is this call and its errors' report).
                    try:
                        handle._context.run(handle._callback, *handle._args)
                    except (SystemExit, KeyboardInterrupt) as exc:
                        # asyncio stores these in the task and then re-raises them.
                        # From workflow code (a step's SystemExit revived, unhandled)
                        # the task's outcome fails the run; the worker's own stop
                        # signals never raise (they set a flag).  Host interrupts
                        # (the simulator's watchdog) go on.
                        if passes_through(exc):
                            raise
                    except BaseException as exc:  # what Handle._run reports
                        self.call_exception_handler(
                            {
                                "message": f"Exception in callback {handle._callback!r}",
                                "exception": exc,
                            }
                        )
        finally:
            _routes.exit()
            self._running = False
            state.loop = previous
            running.run = previous_run
            _set_running_loop(outer)
            if outer is not None and outer_task is not None:
                _enter_task(outer, outer_task)

    def has_ready(self) -> bool:
        """Whether any callback is scheduled (workflow code would run)."""
        return bool(self._ready)

    def fire_timer(self, handle: asyncio.TimerHandle) -> None:
        """Run a timer's callback now (its durable wait completed)."""
        if not handle.cancelled():
            self._ready.append(handle)

    @property
    def exceptions(self) -> list[dict[str, Any]]:
        """Contexts passed to :meth:`call_exception_handler` (e.g. never-retrieved task errors)."""
        return self._exceptions

    # -- scheduling -----------------------------------------------------------------

    def call_soon(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        """Schedule ``callback(*args)`` after everything already scheduled."""
        if _HANDLE_SLOTS:  # what Handle.__init__ sets on a loop never in debug mode
            handle: Any = _new_handle(_Handle)
            handle._callback = callback
            handle._args = args
            handle._cancelled = False
            handle._loop = self
            handle._source_traceback = None
            handle._repr = None
            handle._context = context if context is not None else _copy_context()
        else:
            handle = _Handle(callback, args, self, context)
        self._ready.append(handle)
        made: asyncio.Handle = handle
        return made

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        """Threads do not exist inside a workflow."""
        raise WorkflowSandboxError(
            "call_soon_threadsafe: workflow code runs on one deterministic loop and cannot be "
            "woken by threads; do threaded work inside a @step"
        )

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """A timer ``delay`` seconds from the run's clock: a durable wait."""
        return self.call_at(self._now + max(0.0, delay), callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[Ts]], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """A timer at ``when`` (run clock): handed to the engine as a durable wait."""
        handle = asyncio.TimerHandle(when, callback, args, self, context)
        self._on_timer(handle)
        return handle

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        self._on_timer_cancelled(handle)

    def time(self) -> float:
        """The run's clock: the time of the last event delivered to the workflow."""
        return self._now

    def _task_count(self) -> int:
        # Task names default to a process-global counter; name them per loop instead.
        self._tasks_made += 1
        return self._tasks_made

    def made(self, task: WorkflowTask[Any]) -> None:
        """Note a task of this loop, weakly (:class:`WorkflowTask` calls it)."""
        tasks = self._tasks
        tasks.append(weakref.ref(task))
        if not len(tasks) & 63:  # now and then drop the freed ones: bounded by the live
            tasks[:] = [ref for ref in tasks if ref() is not None]

    def pending_tasks(self) -> list[asyncio.Task[Any]]:
        """Its tasks not done yet, in creation order.

        What ``asyncio.all_tasks(loop)`` answers for the tasks this loop made, without
        walking every task of the process (``all_tasks`` does: with a Worker keeping
        256 suspended replays, or an application's own thousands of tasks, that walk
        was paid each time a replay was dropped).
        """
        return [t for ref in self._tasks if (t := ref()) is not None and not t.done()]

    def next_number(self) -> int:
        """The next creation number for a task or future of this loop."""
        return next(self.numbers)

    def create_future(self) -> asyncio.Future[Any]:
        """A future numbered in creation order."""
        return WorkflowFuture(loop=self)

    def create_task(
        self,
        coro: Coroutine[Any, Any, T] | Generator[Any, None, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        """A task numbered in creation order."""
        return WorkflowTask(
            coro, loop=self, name=name or f"wf-task-{self._task_count()}", context=context
        )

    # -- the rest of the loop API ---------------------------------------------------

    #: Never in debug mode (debug mode reads the wall clock).  Asked by every future,
    #: task and handle made: ``bool()`` answers ``False`` without a Python frame.  The
    #: staticmethod binds no ``self``: a bare ``partial`` is a method descriptor from
    #: Python 3.14 (and warns on 3.13), which would make it ``bool(self)``, True.
    get_debug: Callable[[], bool] = staticmethod(functools.partial(bool))

    def set_debug(self, enabled: bool) -> None:
        """Ignored."""

    def is_running(self) -> bool:
        """True while workflow code runs."""
        return self._running

    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Drop everything scheduled."""
        self._ready.clear()
        self._closed = True

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """Keep the context: the engine reports unhandled errors of workflow tasks.

        Kept without the loop's own tasks, futures and handles: a task reports
        here as it is freed still pending (its replay dropped), and keeping it
        would bring it back, tied to this loop in a reference cycle (issue 22).
        """
        self._exceptions.append(
            {k: v for k, v in context.items() if not isinstance(v, asyncio.Future | asyncio.Handle)}
        )

    default_exception_handler = call_exception_handler

    def get_exception_handler(self) -> None:
        """No custom handler."""
        return None

    def set_exception_handler(self, handler: object) -> None:
        """Refused: the engine owns error reporting inside workflows."""
        raise WorkflowSandboxError("set_exception_handler is not available inside a workflow")

    def get_task_factory(self) -> None:
        """No task factory."""
        return None

    def set_task_factory(self, factory: object) -> None:
        """Refused: tasks inside a workflow must stay deterministic."""
        raise WorkflowSandboxError("set_task_factory is not available inside a workflow")

    def run_forever(self) -> None:
        """The engine drives this loop; it is never run directly."""
        raise WorkflowSandboxError("a workflow loop is driven by the replay engine")

    def run_until_complete(self, future: object) -> Any:
        """The engine drives this loop; it is never run directly."""
        raise WorkflowSandboxError("a workflow loop is driven by the replay engine")

    def stop(self) -> None:
        """Nothing to stop."""

    async def shutdown_asyncgens(self) -> None:
        """Nothing to shut down."""

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """No executor."""


# run_ready steps the workflow's tasks itself (Handle._run's work, inline).
mark_boundary(WorkflowLoop.run_ready.__code__)


def _refuse(name: str, what: str) -> Callable[..., Any]:
    def refuse(self: WorkflowLoop, *args: Any, **kwargs: Any) -> Any:
        raise WorkflowSandboxError(
            f"loop.{name}() inside a workflow: {what} would not replay identically; "
            "do it inside a @step"
        )

    refuse.__name__ = name
    refuse.__doc__ = f"Refused inside a workflow ({what})."
    return refuse


_IO = {
    "run_in_executor": "running code in an executor",
    "set_default_executor": "an executor",
    "getaddrinfo": "a DNS lookup",
    "getnameinfo": "a DNS lookup",
    "create_connection": "a network connection",
    "create_server": "a server",
    "create_unix_connection": "a network connection",
    "create_unix_server": "a server",
    "create_datagram_endpoint": "a network endpoint",
    "connect_accepted_socket": "a socket",
    "connect_read_pipe": "a pipe",
    "connect_write_pipe": "a pipe",
    "subprocess_exec": "a subprocess",
    "subprocess_shell": "a subprocess",
    "add_reader": "file-descriptor I/O",
    "remove_reader": "file-descriptor I/O",
    "add_writer": "file-descriptor I/O",
    "remove_writer": "file-descriptor I/O",
    "sock_recv": "socket I/O",
    "sock_recv_into": "socket I/O",
    "sock_recvfrom": "socket I/O",
    "sock_recvfrom_into": "socket I/O",
    "sock_sendall": "socket I/O",
    "sock_sendto": "socket I/O",
    "sock_connect": "socket I/O",
    "sock_accept": "socket I/O",
    "sock_sendfile": "socket I/O",
    "sendfile": "file I/O",
    "start_tls": "TLS",
    "add_signal_handler": "a signal handler",
    "remove_signal_handler": "a signal handler",
}
for _name, _what in _IO.items():
    setattr(WorkflowLoop, _name, _refuse(_name, _what))
