"""Inside a workflow, time and randomness are the run's own, and I/O is refused.

While workflow code runs (and only then, and only on the thread running it):

* ``time.time()``, ``time.monotonic()``, ``time.perf_counter()`` and their ``_ns``
  forms return the run's clock: the time of the last event delivered to the
  workflow; ``time.localtime()``, ``gmtime()``, ``ctime()``, ``asctime()`` and
  ``strftime()`` without a time argument format that clock;
* the module-level functions of :mod:`random` (``seed`` included) and
  ``uuid.uuid4()`` draw from a generator seeded from the run id, and a new
  ``random.Random()`` is seeded from that generator, so every replay sees the
  same values;
* everything else that reaches outside the process is refused with
  :class:`WorkflowSandboxError` (``_guards``).

Every redirection checks one thread-local and is installed lazily, the first
time workflow code runs: nothing changes for a process that runs no workflow.
``datetime.now()`` cannot be redirected (it is implemented in C), nor can a name
bound to an original before the installation (``from time import time``): the
check before a run (``_sandbox_check``) finds those.  Step bodies run outside all
of this and have the whole of Python.
"""

from __future__ import annotations

import functools
import hashlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ._guards import RUNNING, as_module_function, install_guards, remember

__all__ = [
    "RunDeterminism",
    "active",
    "ensure_installed",
    "now",
    "random_functions",
    "wall_monotonic",
    "wall_perf_counter",
]

_state = RUNNING

#: The real clocks, taken before any redirection: for timing the engine itself
#: (and cheaper than the redirected ``time`` functions, which look for a run first).
wall_perf_counter = time.perf_counter
wall_monotonic = time.monotonic


def active() -> RunDeterminism | None:
    """The run whose workflow code is running on this thread, if any."""
    run: RunDeterminism | None = _state.run
    return run


class RunDeterminism:
    """A run's clock and random generator, installed while its workflow code runs."""

    def __init__(self, *, run_id: str, clock: Callable[[], float]) -> None:
        self.run_id = run_id
        self.clock = clock
        self._active: _Active | None = None
        self._random: random.Random | None = None

    @property
    def random(self) -> random.Random:
        """The run's generator, seeded from the run id.

        Made the first time workflow code draws from it (most runs never do: seeding
        a generator is much of a run's fixed cost); the seed depends on the run id
        alone, so the values drawn are the same whenever it is made.
        """
        generator = self._random
        if generator is None:
            digest = hashlib.sha256(f"durasim:{self.run_id}".encode()).digest()
            seed = int.from_bytes(digest[:16], "big")
            generator = self._random = random.Random(seed)  # noqa: S311 -- replayable
        return generator

    def active(self) -> _Active:
        """Make this run's clock and randomness the thread's while workflow code runs."""
        active = self._active
        if active is None or active.entered:
            # One per run, reused: workflow code runs once per event delivered.
            if not _installed:
                _install_once()
            active = _Active(self)
            if self._active is None:
                self._active = active
        return active

    def run(self, body: Callable[[], object]) -> None:
        """Call ``body`` with this run's clock and randomness the thread's.

        What ``with self.active(): body()`` does, in one call (the replay runs
        workflow code this way once per event delivered).
        """
        if not _installed:
            _install_once()
        previous = _state.run
        _state.run = self
        try:
            body()
        finally:
            _state.run = previous


class _Active:
    """The context manager :meth:`RunDeterminism.active` returns (a class: it runs often)."""

    __slots__ = ("_previous", "_run", "entered")

    def __init__(self, run: RunDeterminism) -> None:
        self._run = run
        self._previous: RunDeterminism | None = None
        self.entered = False

    def __enter__(self) -> None:
        self._previous = _state.run
        _state.run = self._run
        self.entered = True

    def __exit__(self, *exc: object) -> None:
        _state.run = self._previous
        self._previous = None
        self.entered = False


def now() -> datetime:
    """The current time: the run's clock inside a workflow, the wall clock elsewhere."""
    run = _state.run
    if run is None:
        return datetime.now(UTC)
    return datetime.fromtimestamp(run.clock(), UTC)


# --- redirections -------------------------------------------------------------------

_installed = False
_install_lock = threading.Lock()

_THROUGH_MODULE = (
    "call {name}() through its module (`import {module}`; `{name}()` is redirected inside "
    "workflows){extra}"
)


def _redirect_random(name: str) -> None:
    original = getattr(random, name)

    @functools.wraps(original)
    def redirected(*args: Any, **kwargs: Any) -> Any:
        run = _state.run  # not active(): a call less per read
        if run is None:
            return original(*args, **kwargs)
        return getattr(run.random, name)(*args, **kwargs)

    setattr(random, name, as_module_function(redirected))
    remember(
        original,
        f"random.{name}",
        _THROUGH_MODULE.format(name=f"random.{name}", module="random", extra=""),
    )


def _seed_from_run() -> None:
    # random.Random() (and .seed() without a value) would seed from the operating
    # system; inside a workflow it is seeded from the run's generator instead, so a
    # local generator replays like the module-level functions.
    original = random.Random.seed

    @functools.wraps(original)
    def seed(self: random.Random, a: Any = None, version: int = 2) -> None:
        if a is None and not isinstance(self, random.SystemRandom):
            run = _state.run
            if run is not None:
                a = run.random.getrandbits(128)
        original(self, a, version)

    random.Random.seed = seed  # type: ignore[method-assign]


def _redirect_clock(name: str, scale: float, cast: Callable[[float], Any]) -> None:
    original = getattr(time, name)

    @functools.wraps(original)
    def redirected() -> Any:
        run = _state.run
        if run is None:
            return original()
        return cast(run.clock() * scale)

    setattr(time, name, as_module_function(redirected))
    remember(
        original,
        f"time.{name}",
        _THROUGH_MODULE.format(
            name=f"time.{name}", module="time", extra=", or durasim.runtime.now()"
        ),
    )


def _default_to_run_clock(name: str, *, position: int) -> None:
    """``time.localtime()`` & co. without their time argument read the wall clock in C:
    inside a workflow the missing argument becomes the run's clock."""
    original = getattr(time, name)

    @functools.wraps(original)
    def redirected(*args: Any) -> Any:
        run = _state.run
        if run is None or len(args) > position:
            return original(*args)
        moment: Any = run.clock()
        if name in ("asctime", "strftime"):
            moment = _wall_localtime(moment)
        return original(*args, moment)

    setattr(time, name, as_module_function(redirected))
    remember(
        original,
        f"time.{name}",
        _THROUGH_MODULE.format(name=f"time.{name}", module="time", extra=""),
    )


_wall_localtime = time.localtime


def _uuid4() -> uuid.UUID:
    run = _state.run
    if run is None:
        return _original_uuid4()
    return uuid.UUID(int=run.random.getrandbits(128), version=4)


_original_uuid4 = uuid.uuid4


def random_functions() -> list[str]:
    """The names of :mod:`random` that are methods of its hidden global generator."""
    hidden = getattr(random, "_inst", None)
    return [
        name
        for name, value in vars(random).items()
        if not name.startswith("_") and getattr(value, "__self__", None) is hidden
    ]


def _install_once() -> None:
    global _installed  # noqa: PLW0603 -- installed once per process, on first use
    if _installed:
        return
    with _install_lock:
        if _installed:  # another thread won the race
            return  # type: ignore[unreachable]
        # seed, getstate and setstate too: random.seed(1) then random.random()
        # inside a workflow use the run's generator, seeded by the workflow.
        for name in random_functions():
            _redirect_random(name)
        _seed_from_run()
        for clock in ("time", "monotonic", "perf_counter"):
            _redirect_clock(clock, 1.0, float)
            _redirect_clock(f"{clock}_ns", 1e9, int)
        _default_to_run_clock("localtime", position=0)
        _default_to_run_clock("gmtime", position=0)
        _default_to_run_clock("ctime", position=0)
        _default_to_run_clock("asctime", position=0)
        _default_to_run_clock("strftime", position=1)
        uuid.uuid4 = as_module_function(_uuid4)
        remember(
            _original_uuid4,
            "uuid.uuid4",
            _THROUGH_MODULE.format(name="uuid.uuid4", module="uuid", extra=""),
        )
        install_guards()
        _installed = True


def ensure_installed() -> None:
    """Install the redirections and guards now (the check before a run needs them)."""
    _install_once()
