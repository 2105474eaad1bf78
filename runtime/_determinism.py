"""Inside a workflow, time and randomness are the run's own, and I/O is refused.

While workflow code runs (and only then, and only on the thread running it):

* ``time.time()``, ``time.time_ns()``, ``time.monotonic()`` and ``time.perf_counter()``
  return the run's clock: the time of the last event delivered to the workflow;
* the module-level functions of :mod:`random` and ``uuid.uuid4()`` draw from a
  generator seeded from the run id, so every replay sees the same values;
* opening files, sockets, subprocesses, ``time.sleep`` and starting threads raise
  :class:`WorkflowSandboxError` naming the call and the step-side alternative
  (an audit hook; importing modules still works).

``datetime.now()`` cannot be redirected (it is implemented in C): inside a
workflow use :func:`durasim.runtime.now` or ``time.time()``.  Step bodies run
outside all of this and have the whole of Python.
"""

from __future__ import annotations

import functools
import hashlib
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ._errors import WorkflowSandboxError

__all__ = [
    "RunDeterminism",
    "active",
    "now",
    "outside_sandbox",
    "wall_monotonic",
    "wall_perf_counter",
]

_state = threading.local()

#: The real clocks, taken before any redirection: for timing the engine itself
#: (and cheaper than the redirected ``time`` functions, which look for a run first).
wall_perf_counter = time.perf_counter
wall_monotonic = time.monotonic


def active() -> RunDeterminism | None:
    """The run whose workflow code is running on this thread, if any."""
    return getattr(_state, "run", None)


class RunDeterminism:
    """A run's clock and random generator, installed while its workflow code runs."""

    def __init__(self, *, run_id: str, clock: Callable[[], float]) -> None:
        seed = int.from_bytes(hashlib.sha256(f"durasim:{run_id}".encode()).digest()[:16], "big")
        self.random = random.Random(seed)  # noqa: S311 -- replayable, not secret
        self.clock = clock

    def active(self) -> _Active:
        """Make this run's clock and randomness the thread's while workflow code runs."""
        _install_once()
        return _Active(self)


class _Active:
    """The context manager :meth:`RunDeterminism.active` returns (a class: it runs often)."""

    __slots__ = ("_previous", "_run")

    def __init__(self, run: RunDeterminism) -> None:
        self._run = run
        self._previous: RunDeterminism | None = None

    def __enter__(self) -> None:
        self._previous = getattr(_state, "run", None)
        _state.run = self._run

    def __exit__(self, *exc: object) -> None:
        _state.run = self._previous


class outside_sandbox:
    """Lift the sandbox on this thread for the runtime's own I/O (reading source lines)."""

    __slots__ = ("_previous",)

    def __enter__(self) -> None:
        self._previous = getattr(_state, "run", None)
        _state.run = None

    def __exit__(self, *exc: object) -> None:
        _state.run = self._previous


def now() -> datetime:
    """The current time: the run's clock inside a workflow, the wall clock elsewhere."""
    run = active()
    if run is None:
        return datetime.now(UTC)
    return datetime.fromtimestamp(run.clock(), UTC)


# --- redirections -------------------------------------------------------------------

_RANDOM_FUNCTIONS = (
    *("betavariate", "choice", "choices", "expovariate", "gammavariate", "gauss"),
    *("getrandbits", "lognormvariate", "normalvariate", "paretovariate", "randbytes"),
    *("randint", "random", "randrange", "sample", "shuffle", "triangular", "uniform"),
    *("vonmisesvariate", "weibullvariate"),
)

_installed = False
_install_lock = threading.Lock()


def _redirect_random(name: str) -> None:
    original = getattr(random, name)

    @functools.wraps(original)
    def redirected(*args: Any, **kwargs: Any) -> Any:
        run = active()
        if run is None:
            return original(*args, **kwargs)
        return getattr(run.random, name)(*args, **kwargs)

    setattr(random, name, redirected)


def _redirect_clock(name: str, scale: float, cast: Callable[[float], Any]) -> None:
    original = getattr(time, name)

    @functools.wraps(original)
    def redirected() -> Any:
        run = active()
        if run is None:
            return original()
        return cast(run.clock() * scale)

    setattr(time, name, redirected)


def _refuse_when_active(module: Any, name: str, event: str) -> None:
    """Wrap ``module.name`` so it raises inside workflow code (Python 3.11 has no audit
    event for ``time.sleep`` or for starting a thread)."""
    original = getattr(module, name)

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if active() is not None:
            _audit(event, args)
        return original(*args, **kwargs)

    setattr(module, name, guarded)


def _uuid4() -> uuid.UUID:
    run = active()
    if run is None:
        return _original_uuid4()
    return uuid.UUID(int=run.random.getrandbits(128), version=4)


_original_uuid4 = uuid.uuid4

# Audit events refused inside workflow code, with the step-side alternative.
_REFUSED = {
    "open": "opening a file; read or write it inside a @step",
    "socket.__new__": "creating a socket; do network I/O inside a @step",
    "socket.connect": "connecting a socket; do network I/O inside a @step",
    "socket.getaddrinfo": "a DNS lookup; do network I/O inside a @step",
    "subprocess.Popen": "starting a subprocess; run it inside a @step",
    "os.system": "os.system; run it inside a @step",
    "os.exec": "os.exec*; run it inside a @step",
    "os.posix_spawn": "spawning a process; run it inside a @step",
    "os.spawn": "spawning a process; run it inside a @step",
    "os.fork": "forking; run it inside a @step",
    "time.sleep": "time.sleep blocks without being journaled; use `await asyncio.sleep(...)`, "
    "a durable sleep",
    "_thread.start_new_thread": "starting a thread; workflow code is single-threaded, use "
    "asyncio tasks, or threads inside a @step",
}
# Imports open source and bytecode files; those stay allowed.
_IMPORT_SUFFIXES = (".py", ".pyc", ".pyi", ".so", ".pyd", ".pth", ".zip", ".egg")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event not in _REFUSED or getattr(_state, "run", None) is None:
        return
    if event == "open":
        path = args[0] if args else ""
        mode = args[1] if len(args) > 1 else "r"
        if isinstance(path, str | bytes) and (mode in (None, "r", "rb")):
            name = path.decode(errors="replace") if isinstance(path, bytes) else path
            if name.endswith(_IMPORT_SUFFIXES) or name.endswith("/"):
                return
    raise WorkflowSandboxError(
        f"{event} inside workflow code: {_REFUSED[event]}. Workflow code must replay "
        "identically; anything that touches the outside world belongs in a step",
        call=event,
    )


def _install_once() -> None:
    global _installed  # noqa: PLW0603 -- installed once per process, on first use
    if _installed:
        return
    with _install_lock:
        if _installed:  # another thread won the race
            return  # type: ignore[unreachable]
        for name in _RANDOM_FUNCTIONS:
            if hasattr(random, name):
                _redirect_random(name)
        _redirect_clock("time", 1.0, float)
        _redirect_clock("monotonic", 1.0, float)
        _redirect_clock("perf_counter", 1.0, float)
        _redirect_clock("time_ns", 1e9, int)
        uuid.uuid4 = _uuid4
        _refuse_when_active(time, "sleep", "time.sleep")
        _refuse_when_active(threading, "_start_new_thread", "_thread.start_new_thread")
        sys.addaudithook(_audit)
        _installed = True
