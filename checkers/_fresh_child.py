"""The replay server: a child process that replays logs in fresh module state.

Started by :mod:`._fresh` with another ``PYTHONHASHSEED``, an added
environment variable and another ``TZ``; here the wall clock is shifted
(``time.time`` and friends, and ``datetime.datetime.now`` / ``today`` /
``utcnow``) before any user module is imported.  The process is a zygote: it
forks one grandchild per request, ahead of the request; the grandchild reads
the request, imports the modules it names if the zygote has not (a fresh
import is the state a production process starts from; the zygote then imports
them too, for the next grandchildren), replays every log with the cold-replay
oracle, answers the exploring process itself and exits.  Module globals a
replay changes die with the grandchild, so no replay (and nothing the
exploring process did) is seen by the next.

Requests are one pickle frame each (a length, then the pickle; the logs as
``_fresh.wire_log`` made them), answers one JSON line each, on two pipes given
as file descriptors (stdout and stderr stay free for whatever user code prints).
"""

from __future__ import annotations

import ast
import asyncio
import datetime as _datetime_module
import gc
import importlib
import json
import logging
import os
import pickle
import select
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable
from typing import Any

from durasim.runtime import DefinitionNotFound
from durasim.runtime.lowlevel import find_workflow

from . import _fresh
from ._fresh import CLOCK_SHIFT, FRAME_HEADER, FRESH_ENV_VAR, finished_logs, unwire_log
from ._oracle import verify_replay_log

_REAL_DATETIME = _datetime_module.datetime


class _ShiftedMeta(type):
    # Real datetimes (made by C code, or before the shift) must stay instances.
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _REAL_DATETIME)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _REAL_DATETIME)


class _ShiftedDatetime(_REAL_DATETIME, metaclass=_ShiftedMeta):
    """``datetime.datetime`` whose clock reads are shifted; every value it makes is a real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _REAL_DATETIME(*args, **kwargs)

    @classmethod
    def now(cls, tz: _datetime_module.tzinfo | None = None) -> Any:
        return _REAL_DATETIME.now(tz) + CLOCK_SHIFT

    @classmethod
    def utcnow(cls) -> Any:
        return _REAL_DATETIME.now(_datetime_module.UTC).replace(tzinfo=None) + CLOCK_SHIFT

    @classmethod
    def today(cls) -> Any:
        return _REAL_DATETIME.now() + CLOCK_SHIFT


def shift_wall_clock() -> None:
    """Move this process's wall clock ``CLOCK_SHIFT`` ahead (monotonic clocks stay)."""
    seconds = CLOCK_SHIFT.total_seconds()
    real_time, real_time_ns = time.time, time.time_ns

    def shifted_time() -> float:
        return real_time() + seconds

    def shifted_time_ns() -> int:
        return real_time_ns() + int(seconds) * 1_000_000_000

    def at_shifted(real: Callable[..., Any]) -> Callable[..., Any]:
        # localtime(), gmtime(), ctime() read the C clock when given no time.
        def shifted(secs: float | None = None) -> Any:
            return real(shifted_time() if secs is None else secs)

        return shifted

    real_strftime = time.strftime

    def shifted_strftime(format: str, t: Any = None) -> str:
        return real_strftime(format, time.localtime() if t is None else t)

    time.time = shifted_time
    time.time_ns = shifted_time_ns
    time.localtime = at_shifted(time.localtime)
    time.gmtime = at_shifted(time.gmtime)
    time.ctime = at_shifted(time.ctime)
    time.strftime = shifted_strftime
    _datetime_module.datetime = _ShiftedDatetime  # type: ignore[misc]


def _import(modules: list[str], main_path: str | None, imported: list[str]) -> str:
    """Import what a request names (adding to ``imported`` what was new); "" or why not."""
    for name in modules:
        try:
            if name == "__main__":
                if not main_path:
                    return "the workflow is defined in __main__, whose file is unknown"
                if getattr(sys.modules["__main__"], "__file__", None) != main_path:
                    _import_main(main_path)
                    imported.append(name)
            elif name not in sys.modules:
                importlib.import_module(name)
                imported.append(name)
        except BaseException as exc:
            return f"importing {name!r} raised {type(exc).__name__}: {exc}"
    return ""


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    values = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and values == {"__main__"}


def _import_main(path: str) -> None:
    """Load the exploring process's ``__main__`` script as ``__main__``, minus its main block.

    Its functions must keep ``__module__ == "__main__"`` (their ids say so), but
    its ``if __name__ == "__main__":`` block must not run here: the script runs
    without its top-level guarded blocks.
    """
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), filename=path)
    tree.body = [node for node in tree.body if not _is_main_guard(node)]
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    exec(compile(tree, path, "exec"), module.__dict__)  # noqa: S102 -- the user's own script


#: Variables that read as they are: the interpreter's own, and the two we set.
_KEPT_PREFIXES = ("PYTHON", FRESH_ENV_VAR, "TZ")
#: What a variable reads as while logs are replayed: its value plus this, or,
#: unset, this and its name (a worker elsewhere may well have it set).
ENV_MARK = "durasim-fresh"


class _PerturbedEnviron(os._Environ[str]):
    """``os.environ`` as another worker would have it: every variable reads differently."""

    def __getitem__(self, key: str) -> str:
        kept = not isinstance(key, str) or key.startswith(_KEPT_PREFIXES)
        try:
            value = super().__getitem__(key)
        except KeyError:
            if kept:
                raise
            return f"{ENV_MARK}:{key}"
        return value if kept else f"{value}:{ENV_MARK}"


def perturb_environment() -> None:
    """From now on, this process's ``os.environ`` reads as :class:`_PerturbedEnviron` says.

    Only the replaying grandchild does this, after every import and just before
    the replays: workflow code (and nothing else) runs from then on; the
    runtime reads no variable, and the interpreter's own (``PYTHON*``) are kept.
    """
    os.environ.__class__ = _PerturbedEnviron


def _replay(
    logs: list[bytes], *, checked: bool = False, runner: asyncio.Runner | None = None
) -> dict[str, Any]:
    """Replay every log (in a grandchild, on ``runner``'s loop if given); the answer to send."""
    runs = [unwire_log(log) for log in logs]
    for events in runs:
        created = next((e for e in events if e.type.value == "run_created"), None)
        name = str(created.data.get("workflow_name", "")) if created else ""
        try:
            find_workflow(name)
        except DefinitionNotFound:
            return {"unavailable": f"workflow {name!r} is not registered after the imports"}
    if hasattr(os, "fork"):  # (without fork this process serves every request: leave it)
        perturb_environment()

    # What the runtime logs while replaying (a divergence's explanation) goes
    # into the verdict, not to this process's stderr.
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)

    async def all_runs() -> list[dict[str, str]]:
        verdicts = []
        for events in runs:
            said.clear()
            verdict = await verify_replay_log(events, checked=checked)
            detail = verdict.render().partition(f"run {verdict.run_id}: ")[2]
            detail = "\n".join([detail, *(f"  runtime: {line}" for line in said)])
            verdicts.append({"run_id": verdict.run_id, "kind": verdict.kind, "detail": detail})
        return verdicts

    if runner is not None:
        return {"verdicts": runner.run(all_runs())}
    return {"verdicts": asyncio.run(all_runs())}


def _serve_one(
    request: dict[str, Any], imported: list[str], runner: asyncio.Runner | None = None
) -> dict[str, Any]:
    """Import what the request names, then replay its logs (in this process)."""
    sys.path[:] = [p for p in request.get("path", sys.path) if isinstance(p, str)]
    why = _import(list(request.get("modules", ())), request.get("main"), imported)
    if why:
        return {"unavailable": why}
    return _replay(request["logs"], checked=request.get("checked") is True, runner=runner)


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd`` (fewer only at EOF)."""
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _read_request(fd: int) -> dict[str, Any] | None:
    """One request frame from ``fd`` (``None`` at EOF); the parent sends one, then waits."""
    header = _read_exactly(fd, FRAME_HEADER)
    if len(header) < FRAME_HEADER:
        return None
    size = int.from_bytes(header, "big")
    body = _read_exactly(fd, size)
    if len(body) < size:
        return None
    request: dict[str, Any] = pickle.loads(body)  # noqa: S301 -- our own parent's pipe
    return request


def _write(fd: int, answer: dict[str, Any]) -> None:
    view = memoryview((json.dumps(answer) + "\n").encode("utf-8"))
    while view:
        view = view[os.write(fd, view) :]


def _grandchild(requests_fd: int, answers_fd: int, status_fd: int) -> None:
    """Serve one request and exit; tell the zygote what was imported (never returns)."""
    try:
        gc.disable()  # a short life: no collection needed
        # A request already waiting (it followed the one before closely) is served at
        # once: readying for it first would only make it wait longer.
        waiting, _, _ = select.select([requests_fd], [], [], 0)
        runner = None if waiting else _prewarm(_PREWARM_MODES)
        request = _read_request(requests_fd)
        status: dict[str, Any] = {"eof": request is None}
        if request is not None:
            status["checked"] = request.get("checked") is True
            imported: list[str] = []
            try:
                answer = _serve_one(request, imported, runner)
                status.update(path=request.get("path"), main=request.get("main"))
                status["modules"] = imported
            except BaseException as exc:
                answer = {"error": "".join(traceback.format_exception(exc))[-4000:]}
            _write(answers_fd, answer)
        # One line: the zygote reads it without waiting for this process to end.
        os.write(status_fd, (json.dumps(status) + "\n").encode("utf-8"))
    finally:
        # Whatever happened (the parent gone mid-answer: a broken pipe), this
        # process must never return into the zygote's loop.
        os._exit(0)


def _fork_grandchild(requests_fd: int, answers_fd: int) -> tuple[int, int]:
    """A grandchild forked to serve the next request: its pid and the read end of its status."""
    status_in, status_out = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(status_in)
        _grandchild(requests_fd, answers_fd, status_out)
    os.close(status_out)
    return pid, status_in


def _serve_forking(requests_fd: int, answers_fd: int) -> None:
    """The zygote's loop: fork the next grandchild ahead of its request.

    The grandchild reads the request and answers the parent itself, so the fork
    is off the request's path.  Once it has answered, it tells the zygote (one
    status line) what it imported; the zygote imports those modules too (so
    later grandchildren inherit them freshly imported) and forks the next at
    once, which readies itself (:func:`_prewarm`) while the one before exits
    (tearing down a process costs about as much as a replay).
    """
    ready: tuple[int, int] | None = None
    while True:
        pid, status_in = ready if ready is not None else _fork_grandchild(requests_fd, answers_fd)
        ready = None
        with os.fdopen(status_in, "rb") as status_file:
            line = status_file.readline()
        if not line:
            _, wait_status = os.waitpid(pid, 0)
            died = f"the replay process died (wait status {wait_status})"
            try:
                _write(answers_fd, {"error": died})
            except BrokenPipeError:
                return  # the exploring process has gone
            continue
        status = json.loads(line)
        if status["eof"]:
            os.waitpid(pid, 0)
            return  # the exploring process has gone
        if "checked" in status:
            _prewarm_as(bool(status["checked"]))
        if status.get("modules"):
            sys.path[:] = [p for p in status.get("path") or sys.path if isinstance(p, str)]
            _import(status["modules"], status.get("main"), [])
            gc.freeze()
        ready = _fork_grandchild(requests_fd, answers_fd)
        os.waitpid(pid, 0)


def _serve_here(requests_fd: int, answers_fd: int) -> None:
    """Without fork (Windows): replay in this process (module state is then shared)."""
    while (request := _read_request(requests_fd)) is not None:
        try:
            answer = _serve_one(request, [])
        except Exception as exc:
            answer = {"error": "".join(traceback.format_exception(exc))[-4000:]}
        _write(answers_fd, answer)


#: The logs of the zygote's own warm-up run (:func:`_warm_up`), replayed again by
#: each grandchild ahead of its request (:func:`_prewarm`).
_WARM_LOGS: list[list[Any]] = []


#: The ``checked`` modes (see :func:`verify_replay_log`) the next grandchild readies in
#: :func:`_prewarm`: both before the first request, then the last request's only (an
#: exploration sends all its logs one way; a request the other way is replayed as
#: without a head start: the same verdicts, its first replay slower).
_PREWARM_MODES: tuple[bool, ...] = (True, False)


def _prewarm_as(checked: bool) -> None:
    """The zygote: the next grandchildren ready the replay of the last request's mode."""
    global _PREWARM_MODES  # noqa: PLW0603 -- the zygote's own state, read by each fork
    _PREWARM_MODES = (checked,)


def _prewarm(modes: tuple[bool, ...] = (True, False)) -> asyncio.Runner | None:
    """Ready a grandchild ahead of its request: its event loop, and the pages a replay writes.

    A forked grandchild shares the zygote's memory until it writes to it: the
    first replay in it took a copy-on-write fault for every page it touched
    (reference counts, the runtime's objects) and made an event loop, about ten
    times the replay itself.  Here, while the exploring process is still busy
    with its example, the grandchild makes its loop and replays the zygote's own
    warm-up log once more in each of ``modes`` (checked: loaded as it is; not:
    seeded event by event), so the request finds both done.
    No user code runs: the warm-up workflow is durasim's own (``durasim.fresh``),
    and the environment is perturbed only afterwards, for the request's replays.
    """
    runner = asyncio.Runner()

    async def replay_warm_logs() -> None:
        for events in _WARM_LOGS:
            for checked in modes:
                await verify_replay_log(events, checked=checked)

    try:
        runner.run(replay_warm_logs())
    except Exception:
        # Only a head start: the request is then replayed as without one.
        runner.close()
        return None
    return runner


def _warm_up() -> None:
    """Replay a run of a workflow of our own once, before any fork.

    The runtime fills caches and imports lazily on first use; done here, every
    grandchild inherits them instead of redoing them per request (and replays
    the same log again ahead of its request: :func:`_prewarm`).
    """
    from durasim.runtime import step, workflow  # noqa: PLC0415
    from durasim.sim import Sim  # noqa: PLC0415

    @step(module="durasim.fresh")
    async def warm(i: int) -> int:
        return i + 1

    @workflow(module="durasim.fresh")
    async def warm_up() -> int:
        return await warm(1) + await warm(2)

    async def scenario(sim: Sim) -> list[list[Any]]:
        await sim.run(warm_up)
        return await finished_logs(sim.store)

    logs = Sim().run_sync(scenario)
    for events in logs:
        asyncio.run(verify_replay_log(events))
    _WARM_LOGS[:] = logs


def main() -> None:
    """Serve requests from the fd in ``argv[1]``, answer on the fd in ``argv[2]``."""
    requests_fd, answers_fd = int(sys.argv[1]), int(sys.argv[2])
    _fresh.inside_server = True
    # A user module that starts a thread makes fork() warn on 3.12+; the
    # grandchild only replays (no thread is needed there), so the warning is noise.
    warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
    _warm_up()
    shift_wall_clock()
    # Objects alive now are never collected in a grandchild: keeping the
    # collector off them keeps their pages shared (no copy on write per fork).
    gc.freeze()
    if hasattr(os, "fork"):
        _serve_forking(requests_fd, answers_fd)
    else:
        _serve_here(requests_fd, answers_fd)
