"""The refusals armed while workflow code runs, and the originals they replace.

Everything here is installed once per process, lazily (the first time workflow
code runs), and checks one thread-local before doing anything: outside workflow
code every guarded call behaves exactly as before, at the cost of that check.

Two mechanisms, chosen per call:

* an audit hook (:func:`sys.addaudithook`) for what CPython audits: it sees
  every way of reaching the call, including names bound at import time and
  C code (``open``, ``os.listdir`` / ``os.scandir``, ``sqlite3.connect``,
  sockets, ``os.putenv``, every ``os.*``, ``shutil.*``, ``tempfile.*`` event);
* a wrapper for what it does not audit: a module attribute
  (``os.urandom``, ``os.stat``, ``time.sleep``) or, better, a class attribute,
  which catches every reference (``os.environ`` reads through ``os._Environ``,
  ``subprocess.Popen.__init__``, ``concurrent.futures.Future.__init__``).

A module attribute replaced here is still reachable through a name bound before
the replacement (``from os import urandom``).  :func:`remember` keeps each
original with its dotted name and the alternative, so the check that runs
before a workflow (``_sandbox_check``) can name such a binding.

Imports keep working inside workflow code: an event raised while the import
system is on the stack is allowed.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import random
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from durasim.worlds import DurasimError

from ._errors import WorkflowSandboxError

__all__ = [
    "RUNNING",
    "Original",
    "as_module_function",
    "guard",
    "install_guards",
    "original",
    "refuse",
    "remember",
    "unguarded",
]


@attrs.frozen(kw_only=True)
class Original:
    """A function durasim replaced inside workflows, as a name bound earlier still holds it.

    Attributes:
        dotted: where it lives (``time.time``).
        alternative: what workflow code should write instead.
    """

    dotted: str
    alternative: str


_ORIGINALS: dict[int, tuple[object, Original]] = {}


def remember(obj: object, dotted: str, alternative: str) -> None:
    """Record ``obj`` as the original of a replaced or guarded name."""
    _ORIGINALS[id(obj)] = (obj, Original(dotted=dotted, alternative=alternative))


def original(obj: object) -> Original | None:
    """What ``obj`` is, if it is the original of a name durasim replaced inside workflows."""
    found = _ORIGINALS.get(id(obj))
    if found is None or found[0] is not obj:
        return None
    return found[1]


_STEP = "do it inside a @step"

#: Audit events refused by name, with why and the alternative.
_REFUSED = {
    "open": "opening a file; read or write it inside a @step",
    "socket.__new__": "creating a socket; do network I/O inside a @step",
    "socket.connect": "connecting a socket; do network I/O inside a @step",
    "socket.getaddrinfo": "a DNS lookup; do network I/O inside a @step",
    "socket.gethostname": "reading the host name (it differs between machines); "
    "read it inside a @step",
    "subprocess.Popen": "starting a subprocess; run it inside a @step",
    "os.system": "os.system; run it inside a @step",
    "os.exec": "os.exec*; run it inside a @step",
    "os.posix_spawn": "spawning a process; run it inside a @step",
    "os.spawn": "spawning a process; run it inside a @step",
    "os.fork": "forking; run it inside a @step",
    "os.listdir": "listing a directory (its content is outside the log); do it inside a @step",
    "os.scandir": "listing a directory (its content is outside the log); do it inside a @step",
    "os.putenv": "changing the environment; pass configuration as workflow input, or "
    "change it inside a @step",
    "os.unsetenv": "changing the environment; pass configuration as workflow input, or "
    "change it inside a @step",
    "builtins.input": "reading the terminal; pass the data as workflow input or a hook "
    "payload, or read it inside a @step",
    "sqlite3.connect": "opening a database; query it inside a @step",
    "time.sleep": "time.sleep blocks without being journaled; use `await asyncio.sleep(...)`, "
    "a durable sleep",
    "_thread.start_new_thread": "starting a thread; workflow code is single-threaded, use "
    "asyncio tasks, or threads inside a @step",
    "_thread.start_joinable_thread": "starting a thread; workflow code is single-threaded, "
    "use asyncio tasks, or threads inside a @step",
    "executor.submit": "submitting work to an executor (a thread or process pool); "
    "use asyncio tasks, or the pool inside a @step",
    "os.urandom": "reading the operating system's randomness (os.urandom, secrets, "
    "random.SystemRandom); use the module-level functions of `random` or uuid.uuid4(), "
    "seeded from the run, or generate secrets inside a @step",
    "os.environ": "reading the environment (os.environ, os.getenv): it differs between "
    "processes; pass configuration as workflow input, or read it inside a @step",
    "os.stat": "reading file metadata (os.stat, os.path.exists, Path.exists ...); "
    "do it inside a @step",
    "time.process_time": "a CPU clock; use time.monotonic() (the run's clock), or measure "
    "inside a @step",
    "time.clock_gettime": "reading a system clock; use time.time() or time.monotonic() "
    "(the run's clock)",
    "uuid.uuid1": "uuid.uuid1() reads the wall clock and the host; use uuid.uuid4() "
    "(seeded from the run)",
}
#: Audit event families refused as a whole (``os.remove``, ``shutil.copyfile`` ...).
_REFUSED_FAMILIES = frozenset(
    {
        *("os", "socket", "shutil", "tempfile", "sqlite3", "glob", "pathlib", "subprocess"),
        *("urllib", "http", "ftplib", "smtplib", "poplib", "imaplib", "nntplib", "telnetlib"),
        *("webbrowser", "mmap", "syslog", "fcntl", "msvcrt", "winreg", "resource"),
    }
)
# Reading source and bytecode files stays allowed (tracebacks read them through linecache).
_SOURCE_SUFFIXES = (".py", ".pyc", ".pyi", ".so", ".pyd", ".pth", ".zip", ".egg")

_CPU_CLOCKS = ("process_time", "process_time_ns", "thread_time", "thread_time_ns")


class _Running(threading.local):
    """Per thread: the run whose workflow code runs on it (``run`` is None elsewhere)."""

    # A class attribute: reading it on a thread that never ran workflow code finds
    # None without raising (a missing thread-local attribute costs an exception).
    run: Any = None


#: The one flag every guard reads (``_determinism`` sets ``RUNNING.run``).
RUNNING = _Running()
_state = RUNNING


def _active() -> bool:
    return _state.run is not None


def refuse(event: str, args: tuple[Any, ...] = ()) -> None:
    """Raise :class:`WorkflowSandboxError` for ``event`` if workflow code is running.

    Events not refused (or exempt: reading source files, anything the import
    system does) return quietly.
    """
    if not _active():
        return
    why = _REFUSED.get(event)
    if why is None:
        if event.partition(".")[0] not in _REFUSED_FAMILIES:
            return
        why = f"{event} reaches outside the process; {_STEP}"
    if event in ("open", "os.stat") and _reads_source(args) and _source_reader_calls():
        return
    if _importing():
        return
    raise WorkflowSandboxError(
        f"{event} inside workflow code: {why}. Workflow code must replay identically; "
        "anything that touches the outside world belongs in a step",
        call=event,
    )


def _reads_source(args: tuple[Any, ...]) -> bool:
    path = args[0] if args else ""
    mode = args[1] if len(args) > 1 else "r"
    if not isinstance(path, str | bytes) or mode not in (None, "r", "rb"):
        return False
    name = path.decode(errors="replace") if isinstance(path, bytes) else path
    return name.endswith(_SOURCE_SUFFIXES) or name.endswith("/")


#: Modules that read source files for tracebacks and introspection: their reads
#: of a ``.py`` file inside workflow code are the runtime's business, not a
#: dependence of the workflow on a file (``os.stat(__file__)`` in workflow code is).
_SOURCE_READERS = frozenset({"linecache", "tokenize", "traceback", "inspect", "dis"})


def _source_reader_calls() -> bool:
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    name = str(frame.f_globals.get("__name__", "")) if frame is not None else ""
    return name in _SOURCE_READERS


def _importing() -> bool:
    # Only reached when an event is about to be refused: walking the stack is rare.
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _state.run is not None:
        refuse(event, args)


def guard(owner: Any, name: str, event: str, *, dotted: str = "") -> None:
    """Wrap ``owner.name`` so that calling it inside workflow code refuses ``event``.

    With ``dotted`` the original is :func:`remember`-ed (for module attributes, which
    a name bound at import time can still reach).  A name this Python does not have
    is skipped (``threading._start_new_thread`` is ``_start_joinable_thread`` on 3.13).
    """
    original_fn = getattr(owner, name, None)
    if original_fn is None:
        return

    @functools.wraps(original_fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _state.run is not None:
            refuse(event, args)
        return original_fn(*args, **kwargs)

    setattr(owner, name, guarded if isinstance(owner, type) else as_module_function(guarded))
    if dotted:
        remember(original_fn, dotted, _REFUSED.get(event, _STEP))
    _keep_capabilities(original_fn, getattr(owner, name))


class UnknownPythonError(DurasimError, RuntimeError):
    """This Python lacks every name a sandbox guard knows for one of its escapes."""


def guard_one_of(owner: Any, names: tuple[str, ...], event: str) -> None:
    """:func:`guard` every one of ``names`` that ``owner`` has; refuse a Python with none.

    A name that moved between Python versions is listed under each of its names; a
    Python that has none of them (a newer one than durasim knows) would leave the
    escape open without a word, so the sandbox refuses to arm instead.
    """
    present = [name for name in names if getattr(owner, name, None) is not None]
    if not present:
        raise UnknownPythonError(
            f"durasim's workflow sandbox cannot guard {event} on Python "
            f"{sys.version.split()[0]}: {getattr(owner, '__name__', owner)} has none of "
            f"{', '.join(names)}; upgrade durasim to a release that supports this Python"
        )
    for name in present:
        guard(owner, name, event)


_CAPABILITY_SETS = (
    *("supports_dir_fd", "supports_fd", "supports_follow_symlinks", "supports_effective_ids"),
)


def as_module_function(function: Callable[..., Any]) -> Any:
    """``function``, made to replace a builtin module function without becoming a method.

    A builtin stored as a class attribute is called without ``self``
    (``logging.Formatter.converter = time.gmtime``); a Python function would be bound.
    A ``staticmethod`` is callable and never binds, so the replacement behaves alike.
    """
    return staticmethod(function)


def _keep_capabilities(old: object, new: object) -> None:
    # shutil and os.fwalk test `os.stat in os.supports_dir_fd` (sets of functions):
    # the wrapper must be in the same sets as the function it replaces.
    for name in _CAPABILITY_SETS:
        found = getattr(os, name, None)
        if isinstance(found, set) and old in found:
            found.add(new)


def _guard_stat(name: str) -> None:
    # os.stat has no audit event; reading source files (linecache) stays allowed.
    original_fn = getattr(os, name)

    @functools.wraps(original_fn)
    def guarded(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _state.run is not None:
            refuse("os.stat", (os.fspath(path) if isinstance(path, os.PathLike) else path,))
        return original_fn(path, *args, **kwargs)

    setattr(os, name, as_module_function(guarded))
    remember(original_fn, f"os.{name}", _REFUSED["os.stat"])
    _keep_capabilities(original_fn, getattr(os, name))


def _guard_environ() -> None:
    # Class attributes: every reference to os.environ (or os.environb) is caught,
    # and os.getenv, .get, `in`, .items(), copy() all go through these.
    for name in ("__getitem__", "__iter__", "__len__", "copy", "__repr__"):
        guard(os._Environ, name, "os.environ")


def unguarded() -> _Unguarded:
    """A context manager in which the runtime's own code may use what workflows may not.

    For durasim's internals that run inside workflow code (a hook token comes
    from :mod:`secrets`): the sandbox is lifted for the block, on this thread.
    """
    return _Unguarded()


class _Unguarded:
    __slots__ = ("_run",)

    def __enter__(self) -> None:
        self._run = _state.run
        _state.run = None

    def __exit__(self, *exc: object) -> None:
        _state.run = self._run


def install_guards() -> None:
    """Arm every guard; :data:`RUNNING` ``.run`` is not None while workflow code runs.

    Called once per process (by ``_determinism``'s lazy installation).
    """
    guard(time, "sleep", "time.sleep", dotted="time.sleep")
    for name in _CPU_CLOCKS:
        guard(time, name, "time.process_time", dotted=f"time.{name}")
    for name in ("clock_gettime", "clock_gettime_ns"):
        guard(time, name, "time.clock_gettime", dotted=f"time.{name}")
    guard(uuid, "uuid1", "uuid.uuid1", dotted="uuid.uuid1")
    # How threading starts a thread: _start_new_thread on 3.11 and 3.12,
    # _start_joinable_thread from 3.13. One of them must be there.
    guard_one_of(
        threading, ("_start_new_thread", "_start_joinable_thread"), "_thread.start_new_thread"
    )
    guard(os, "urandom", "os.urandom", dotted="os.urandom")
    guard(os, "getrandom", "os.urandom", dotted="os.getrandom")
    # SystemRandom, and so every function of `secrets`, reads random._urandom.
    guard(random, "_urandom", "os.urandom")
    _guard_stat("stat")
    _guard_stat("lstat")
    _guard_environ()
    # Before Popen opens its pipes (whose opening would be reported instead).
    guard(subprocess.Popen, "__init__", "subprocess.Popen")
    # Every executor's submit() makes one of these first, before queueing anything.
    guard(concurrent.futures.Future, "__init__", "executor.submit")
    sys.addaudithook(_audit)
