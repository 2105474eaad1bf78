"""The workflow sandbox: every escape is refused, made deterministic, or found before the run.

Each runtime escape is shown three ways: refused inside workflow code (the run fails
with a ``WorkflowSandboxError`` cause, revived as itself), working inside a step,
and working outside workflows.  The escapes the sandbox cannot catch while the code
runs (import-time bindings, ``datetime.now()``) are found by the check before the
workflow runs (``wf_sandbox.py``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import pathlib
import random
import secrets
import socket
import sqlite3
import subprocess
import sys
import time
import traceback
import types
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import wf_sandbox
from _drive import run_to_end

from durasim.runtime import (
    WorkflowFailed,
    WorkflowSandboxError,
    _sandbox_check,
    start,
    step,
    workflow,
)
from durasim.runtime._determinism import ensure_installed
from durasim.runtime._sandbox_check import check_workflow, findings_of
from durasim.worlds import CountingIds, FixedClock, MemoryWorld, World

POOLS: dict[str, concurrent.futures.Executor] = {}


@pytest.fixture
def memory(clock: FixedClock) -> MemoryWorld:
    return MemoryWorld(clock=clock, ids=CountingIds())


@pytest.fixture
def warm_pool() -> Iterator[None]:
    """A thread pool whose thread already runs when the workflow submits to it."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(int).result()
        POOLS["warm"] = pool
        yield
        POOLS.pop("warm")


def _missing_dir() -> None:
    with contextlib.suppress(OSError):
        os.rmdir("/nonexistent-durasim-sandbox-test")


def _read_terminal() -> None:
    with contextlib.suppress(OSError):  # pytest's stdin refuses outside the sandbox
        input()


#: name -> (the escape, what the refusal must say).  Lambdas, not the functions: a
#: function stored at import holds the original, which only the check before a run sees.
ESCAPES: dict[str, tuple[Callable[[], Any], str]] = {
    "os.environ[...]": (lambda: os.environ["PATH"], "os.environ"),
    "os.environ.get": (lambda: os.environ.get("PATH"), "os.environ"),
    "os.getenv": (lambda: os.getenv("PATH"), "os.environ"),
    "iterating os.environ": (lambda: sorted(os.environ), "os.environ"),
    "'PATH' in os.environ": (lambda: "PATH" in os.environ, "os.environ"),
    "os.environ[...] = ...": (lambda: os.environ.update(DURASIM_X="1"), "os.putenv"),
    "os.urandom": (lambda: os.urandom(4), "os.urandom"),
    "secrets.token_hex": (lambda: secrets.token_hex(4), "os.urandom"),
    "secrets.randbelow": (lambda: secrets.randbelow(10), "os.urandom"),
    "random.SystemRandom": (lambda: random.SystemRandom().random(), "os.urandom"),
    "os.stat": (lambda: os.stat("."), "os.stat"),
    "os.path.exists": (lambda: os.path.exists("/tmp"), "os.stat"),
    "pathlib.Path.exists": (lambda: pathlib.Path("/tmp").exists(), "os.stat"),
    "os.listdir": (lambda: os.listdir("."), "os.listdir"),
    "os.scandir": (lambda: list(os.scandir(".")), "os.scandir"),
    "pathlib.Path.iterdir": (lambda: list(pathlib.Path(".").iterdir()), "listing a directory"),
    "os.rmdir": (_missing_dir, "os.rmdir"),
    "sqlite3.connect": (lambda: sqlite3.connect(":memory:").close(), "sqlite3.connect"),
    "a warm thread pool": (lambda: POOLS["warm"].submit(int).result(), "executor"),
    "subprocess.run": (
        lambda: subprocess.run(["true"], check=False),
        "subprocess.Popen inside workflow code: starting a subprocess",
    ),
    "os.popen": (lambda: os.popen("true").close(), "subprocess.Popen"),
    "uuid.uuid1": (lambda: uuid.uuid1(), "uuid.uuid4()"),  # noqa: PLW0108
    "time.process_time": (lambda: time.process_time(), "CPU clock"),  # noqa: PLW0108
    "time.clock_gettime": (lambda: time.clock_gettime(time.CLOCK_REALTIME), "system clock"),
    "input()": (_read_terminal, "reading the terminal"),
    "socket.gethostname": (lambda: socket.gethostname(), "host name"),  # noqa: PLW0108
}


@workflow
async def escapes(what: str) -> str:
    ESCAPES[what][0]()
    return "escaped"


@step
def escapes_in_a_step(what: str) -> str:
    ESCAPES[what][0]()
    return "ok"


@workflow
async def escapes_through_a_step(what: str) -> str:
    return await escapes_in_a_step(what)


@pytest.mark.usefixtures("warm_pool")
@pytest.mark.parametrize("what", list(ESCAPES))
async def test_an_escape_is_refused_in_a_workflow_and_works_elsewhere(
    memory: World, clock: FixedClock, what: str
) -> None:
    run = await start(escapes, what, world=memory)
    await run_to_end(memory, clock, run)
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    cause = caught.value.__cause__
    assert isinstance(cause, WorkflowSandboxError), repr(cause)  # revived as itself
    assert ESCAPES[what][1] in str(cause)
    assert "belongs in a step" in str(cause)  # and names the alternative (above)

    in_step = await start(escapes_through_a_step, what, world=memory)
    await run_to_end(memory, clock, in_step)
    assert await in_step.result() == "ok"

    ESCAPES[what][0]()  # and outside workflow code, as ever


@workflow
async def submits_to_a_process_pool() -> int:
    return POOLS["processes"].submit(int).result()


async def test_a_process_pool_is_refused_before_it_starts_a_process(
    memory: World, clock: FixedClock
) -> None:
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        POOLS["processes"] = pool
        try:
            run = await start(submits_to_a_process_pool, world=memory)
            await run_to_end(memory, clock, run)
        finally:
            POOLS.pop("processes")
        assert not pool._processes  # nothing was started
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert isinstance(caught.value.__cause__, WorkflowSandboxError)
    assert "executor" in str(caught.value.__cause__)


@workflow
async def local_generators() -> list[float]:
    first, second = random.Random(), random.Random()
    random.seed(5)
    return [first.random(), second.random(), random.random()]


async def test_a_new_random_generator_is_seeded_from_the_run(
    memory: World, clock: FixedClock
) -> None:
    run = await start(local_generators, world=memory)
    await run_to_end(memory, clock, run)  # a cold replay returns the same values
    first, second, seeded = await run.result()
    assert first != second
    assert seeded == random.Random(5).random()  # random.seed() seeds the run's generator
    # Outside workflows a new generator is still seeded by the operating system.
    assert random.Random().random() != random.Random().random()


@workflow
async def clocks() -> dict[str, Any]:
    return {
        "time": time.time(),
        "monotonic_ns": time.monotonic_ns(),
        "perf_counter_ns": time.perf_counter_ns(),
        "localtime": list(time.localtime()),
        "gmtime": list(time.gmtime()),
        "ctime": time.ctime(),
        "strftime": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


async def test_every_clock_of_the_time_module_is_the_runs(memory: World, clock: FixedClock) -> None:
    run = await start(clocks, world=memory)
    await run_to_end(memory, clock, run)
    seen = await run.result()
    now = seen["time"]
    started = next(e for e in await run.events() if e.type.value == "run_started")
    assert now == started.created_at.timestamp()  # the run's clock (virtual), not the wall's
    assert seen["monotonic_ns"] == seen["perf_counter_ns"] == int(now * 1e9)
    assert seen["localtime"] == list(time.localtime(now))
    assert seen["gmtime"] == list(time.gmtime(now))
    assert seen["ctime"] == time.ctime(now)
    assert seen["strftime"] == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))


@workflow
async def imports_lazily() -> float:
    import colorsys

    return colorsys.rgb_to_hsv(0.5, 0.5, 0.5)[2]


async def test_importing_inside_a_workflow_still_works(memory: World, clock: FixedClock) -> None:
    sys.modules.pop("colorsys", None)  # the import system lists directories, opens files
    run = await start(imports_lazily, world=memory)
    await run_to_end(memory, clock, run)
    assert await run.result() == 0.5


@workflow
async def logs_and_formats_tracebacks() -> str:
    logger = logging.getLogger("durasim.tests.sandbox")
    try:
        raise ValueError("shown")
    except ValueError:
        logger.exception("inside a workflow")  # a LogRecord, a traceback read from source
        text = traceback.format_exc()
    print("printing works too")
    return text.splitlines()[-1]


async def test_logging_printing_and_tracebacks_work_in_a_workflow(
    memory: World, clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    run = await start(logs_and_formats_tracebacks, world=memory)
    await run_to_end(memory, clock, run)
    assert await run.result() == "ValueError: shown"
    assert "inside a workflow" in caplog.text


def test_a_replaced_function_stored_on_a_class_is_not_bound_as_a_method() -> None:
    ensure_installed()

    class UtcFormatter(logging.Formatter):
        converter = time.gmtime  # the logging idiom: called as self.converter(seconds)

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "message", None, None)
    assert UtcFormatter("%(asctime)s").format(record)

    class Clocks:
        now = time.time
        stat = os.stat

    assert Clocks().now() > 0
    assert Clocks().stat(".") is not None
    # shutil.rmtree chooses its symlink-safe form by these (computed when shutil is imported)
    assert os.stat in os.supports_dir_fd
    assert os.stat in os.supports_follow_symlinks


# -- found before the run ----------------------------------------------------------------

BEFORE_THE_RUN = [
    ("bound_time", "`time`", "from time import time", "time.time()"),
    ("bound_random", "`draw`", "from random import random as draw", "random.random()"),
    ("bound_uuid", "`uuid4`", "from uuid import uuid4", "uuid.uuid4()"),
    ("shared_generator", "`SHARED`", "random.Random made when its module", "random.Random()"),
    ("datetime_now", "`datetime.now`", "datetime.datetime.now", "durasim.runtime.now()"),
    (
        "datetime_utcnow_through_module",
        "`dt.datetime.utcnow`",
        "datetime.datetime.utcnow",
        "durasim.runtime.now()",
    ),
    ("date_today", "`date.today`", "datetime.date.today", "now().date()"),
    ("module_level_file", "`NOTES`", "an open file (StringIO)", "inside a @step"),
    ("through_a_helper", "`datetime.now` (module wf_sandbox, function stamp", "wall", "now()"),
]


@pytest.mark.parametrize(("name", "culprit", "why", "alternative"), BEFORE_THE_RUN)
async def test_an_escape_the_sandbox_cannot_see_is_found_before_the_run(  # noqa: PLR0917
    memory: World, clock: FixedClock, name: str, culprit: str, why: str, alternative: str
) -> None:
    run = await start(getattr(wf_sandbox, name), world=memory)
    await run_to_end(memory, clock, run)
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    cause = caught.value.__cause__
    assert isinstance(cause, WorkflowSandboxError), repr(cause)
    message = str(cause)
    assert culprit in message
    assert "module wf_sandbox" in message
    assert why in message
    assert alternative in message
    assert cause.module == "wf_sandbox"  # type: ignore[attr-defined]


async def test_steps_may_read_the_wall_clock(memory: World, clock: FixedClock) -> None:
    run = await start(wf_sandbox.steps_may_read_the_clock, world=memory)
    await run_to_end(memory, clock, run)
    assert await run.result() > 0


def test_the_check_reads_the_code_once() -> None:
    fn = wf_sandbox.bound_time.definition.fn
    first = check_workflow(fn, workflow_name="bound_time")
    second = check_workflow(fn, workflow_name="bound_time")
    assert first is not None
    assert second is not None
    assert first is not second  # each run gets its own error (its own traceback)
    assert str(first) == str(second)
    assert findings_of(escapes.definition.fn) == ()  # the table it reads is not followed


async def test_a_check_that_fails_lets_the_run_go_on(
    memory: World,
    clock: FixedClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(fn: object) -> tuple[()]:
        raise RuntimeError("a bug in the check")

    monkeypatch.setattr(_sandbox_check, "findings_of", broken)
    monkeypatch.setattr(_sandbox_check, "_CHECKED", weakref.WeakKeyDictionary())
    run = await start(wf_sandbox.bound_time, world=memory)
    # replay=False: unchecked, it reads the real clock, so a cold replay returns another value
    await run_to_end(memory, clock, run, replay=False)
    assert await run.result() > 0
    assert "sandbox check of workflow 'bound_time' failed" in caplog.text


def test_a_name_bound_after_the_sandbox_is_installed_is_the_redirected_one(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_workflow(wf_sandbox.bound_time.definition.fn, workflow_name="installs")
    (tmp_path / "late_flows.py").write_text(
        "from time import time\n"
        "from durasim.runtime import workflow\n\n"
        "@workflow\n"
        "async def late() -> float:\n"
        "    return time()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import late_flows  # type: ignore[import-not-found]

    assert findings_of(late_flows.late.definition.fn) == ()


def test_a_python_without_any_known_name_for_an_escape_refuses_to_arm() -> None:
    from durasim.runtime._guards import UnknownPythonError, guard_one_of

    owner = types.SimpleNamespace(__name__="future_threading")
    with pytest.raises(UnknownPythonError, match=r"none of _start_new_thread, _start_x.*upgrade"):
        guard_one_of(owner, ("_start_new_thread", "_start_x"), "_thread.start_new_thread")


def test_this_python_starts_threads_through_a_guarded_name() -> None:
    import threading

    names = [n for n in ("_start_new_thread", "_start_joinable_thread") if hasattr(threading, n)]
    assert names, "threading starts threads through a name the sandbox does not know"
    for name in names:  # armed: the guard's wrapper around the C function
        assert hasattr(getattr(threading, name), "__wrapped__"), name
