"""The fresh-process replay: judge finished runs in another process, as production would.

A replay in the process that ran the workflow shares everything tied to the
process: the hash seed (the iteration order of sets of strings), the
environment, the wall clock, the files, and module state.  A workflow that
reads any of them replays fine here and fails in production, after a worker
restart, with ``CORRUPTED_EVENT_LOG``.  :func:`replay_in_fresh_process` sends
finished runs' logs to a replay server (one child process per exploring
process, started on first use and gone with its parent: see
``_fresh_child.py``) that differs on purpose:

* ``PYTHONHASHSEED``: the parent's plus one when it is a number, else
  :data:`DEFAULT_CHILD_HASH_SEED` (recorded in seeds, so a replay is exact);
* the environment: :data:`FRESH_ENV_VAR` added, ``TZ`` set to :data:`FRESH_TZ`,
  and, while logs are replayed, every other variable (but ``PYTHON*``) reads
  differently: its value with ``:durasim-fresh`` appended, or, unset, as set
  (another worker's configuration is another configuration);
* the wall clock: ``CLOCK_SHIFT`` ahead (``datetime.now()``, ``time.time()``);
* module state: each request is replayed in a process forked from one that
  only imported the workflow's module, so globals filled by earlier runs (the
  exploration's probe, earlier examples, earlier replays) are not there.

Each log is judged by the cold-replay oracle (:func:`verify_replay_log`) there.

A request is one pickle frame (its logs as plain tuples, see :func:`wire_log`):
the server is this process's own child on a private pipe, and a log goes there
exactly as it is here, without a text form to write and parse back on each
side.  The answers are one JSON line each.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from durasim.runtime import DefinitionNotFound
from durasim.runtime.lowlevel import find_workflow
from durasim.worlds import DurasimError, Event, EventType, World

from ._oracle import ReplayVerdict, read_log

__all__ = [
    "CLOCK_SHIFT",
    "DEFAULT_CHILD_HASH_SEED",
    "FRESH_ENV_VAR",
    "FRESH_TZ",
    "FreshProcessUnavailable",
    "FreshReplay",
    "child_hash_seed",
    "describe_fresh_process",
    "finished_logs",
    "replay_in_fresh_process",
    "start_replay_server",
]

#: Added to the replay server's environment (a variable this process lacks).
FRESH_ENV_VAR = "DURASIM_FRESH_PROCESS"
#: The replay server's ``TZ`` (UTC+5:17, a POSIX rule: no tz database needed).
FRESH_TZ = "DURASIM-5:17"
#: How far the replay server's wall clock is ahead: a year, a weekday, an hour,
#: a minute and a second, so a value read from the clock at any resolution differs.
CLOCK_SHIFT = timedelta(days=400, hours=1, minutes=1, seconds=1)
#: The server's hash seed when this process's ``PYTHONHASHSEED`` is unset or ``random``.
DEFAULT_CHILD_HASH_SEED = 1
#: How long one request may take in the server before it is killed.
REPLY_TIMEOUT_SECONDS = 120.0

#: Bytes of the length that starts each request frame.
FRAME_HEADER = 8

_BOOT = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[3]); "
    "from durasim.checkers._fresh_child import main; main()"
)


class FreshProcessUnavailable(DurasimError, RuntimeError):
    """The fresh-process replay cannot run this workflow (it is not importable elsewhere).

    Attributes:
        workflow: the workflow's id or qualified name.
    """

    workflow: str


def child_hash_seed() -> int:
    """The replay server's ``PYTHONHASHSEED``: this process's plus one, or the default."""
    mine = os.environ.get("PYTHONHASHSEED", "")
    if mine.isdigit():
        return (int(mine) + 1) % 4_294_967_296
    return DEFAULT_CHILD_HASH_SEED


def describe_fresh_process(hash_seed: int) -> str:
    """What differs in the replay server, for a verdict's message."""
    mine = os.environ.get("PYTHONHASHSEED") or "random"
    return (
        f"PYTHONHASHSEED={hash_seed} (here: {mine}); {FRESH_ENV_VAR}=1 added to the "
        f"environment, TZ={FRESH_TZ}, and while replaying every other variable reads "
        "differently (unset ones as set); the wall clock "
        f"{CLOCK_SHIFT} ahead; every module freshly imported"
    )


def _search_path() -> list[str]:
    """This process's ``sys.path``, absolute (the server's working directory may differ)."""
    return list(_absolute(tuple(p for p in sys.path if isinstance(p, str)), os.getcwd()))


@functools.lru_cache(maxsize=8)
def _absolute(path: tuple[str, ...], cwd: str) -> tuple[str, ...]:
    # Asked once per example: the answer depends on the path and the working directory only.
    return tuple(os.path.abspath(p) for p in path)


class _Server:
    """One replay server process, with a request pipe and an answer pipe."""

    def __init__(self, hash_seed: int) -> None:
        self.hash_seed = hash_seed
        child_in, self._requests = os.pipe()
        self._answers, child_out = os.pipe()
        env = dict(os.environ)
        env.update(PYTHONHASHSEED=str(hash_seed), TZ=FRESH_TZ)
        env[FRESH_ENV_VAR] = "1"
        path = json.dumps(_search_path())
        self._process = subprocess.Popen(  # noqa: S603 -- this interpreter, our own code
            [sys.executable, "-c", _BOOT, str(child_in), str(child_out), path],
            pass_fds=(child_in, child_out),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        os.close(child_in)
        os.close(child_out)
        self._buffer = bytearray()
        self.busy = False

    def send(self, request: dict[str, Any]) -> None:
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(len(data).to_bytes(FRAME_HEADER, "big") + data)
        while view:
            view = view[os.write(self._requests, view) :]
        self.busy = True

    def receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + REPLY_TIMEOUT_SECONDS
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._answers], [], [], max(0.0, left))
            if not ready:
                self.close()
                raise TimeoutError(
                    f"the fresh-process replay server gave no answer in {REPLY_TIMEOUT_SECONDS} s "
                    "(a workflow that loops forever on replay?); it was stopped"
                )
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                self.close()
                raise RuntimeError(
                    "the fresh-process replay server exited (see its stderr above); "
                    "it is restarted on the next request"
                )
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        self.busy = False
        answer: dict[str, Any] = json.loads(line)
        return answer

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


#: This process's servers by hash seed; keyed by pid too, so a forked copy of
#: this process starts its own instead of writing into its parent's pipes, and
#: by thread, so two threads exploring at once never share a request pipe.
_SERVERS: dict[tuple[int, int, int], _Server] = {}


#: Set in the replay server itself: a module it imports that explores (or checks
#: determinism) at import time must not start a server of its own, and so on.
inside_server = False


def _server(hash_seed: int) -> _Server:
    if inside_server:
        raise FreshProcessUnavailable(
            "a module imported by the fresh-process replay server asked for a fresh-process "
            "replay itself (it explores or checks determinism when imported): keep such "
            "calls in test functions or under `if __name__ == '__main__':`",
            workflow="",
        )
    key = (os.getpid(), threading.get_ident(), hash_seed)
    server = _SERVERS.get(key)
    if server is None or not server.alive or server.busy:
        if server is not None:
            server.close()
        server = _SERVERS[key] = _Server(hash_seed)
    return server


@atexit.register
def _close_servers() -> None:
    for (pid, _, _), server in list(_SERVERS.items()):
        if pid == os.getpid():
            server.close()
    _SERVERS.clear()


def start_replay_server(hash_seed: int | None = None) -> None:
    """Start the replay server now (it takes a moment to import), so the first check is quick.

    Args:
        hash_seed: the server's ``PYTHONHASHSEED`` (default :func:`child_hash_seed`).
    """
    _server(child_hash_seed() if hash_seed is None else hash_seed)


async def finished_logs(world: World) -> list[list[Event]]:
    """The log of every run of ``world`` that has ended, by run id."""
    run_ids: list[str] = []
    cursor = None
    while True:
        page = await world.runs.list(limit=1000, cursor=cursor)
        run_ids += [r.run_id for r in page.runs if r.status.terminal]
        cursor = page.cursor
        if cursor is None:
            break
    return [await read_log(world, run_id) for run_id in sorted(run_ids)]


def _modules(logs: Iterable[Sequence[Event]]) -> tuple[list[str], str | None]:
    """The modules defining the logs' workflows (and ``__main__``'s file when it is one)."""
    modules: dict[str, None] = {}
    main_path = None
    for events in logs:
        created = next((e for e in events if e.type is EventType.RUN_CREATED), None)
        if created is None:
            continue
        name = str(created.data.get("workflow_name", ""))
        try:
            fn = find_workflow(name).fn
        except DefinitionNotFound:
            continue  # the server says so, naming it
        qualname = getattr(fn, "__qualname__", "?")
        if "<locals>" in qualname:
            raise FreshProcessUnavailable(
                f"workflow {name!r} ({qualname}) is defined inside a function, so the "
                "fresh-process replay cannot import it in another process: move it to "
                "module level, or pass fresh_process=False",
                workflow=name,
            )
        module = getattr(fn, "__module__", "") or ""
        if module == "__main__":
            main_path = getattr(sys.modules.get("__main__"), "__file__", None)
        modules[module] = None
    return list(modules), main_path


#: One event as the replay server receives it (see :func:`wire_log`).
WireEvent = tuple[str, int, str, Any, str | None, bool, dict[str, Any]]


def wire_log(events: Sequence[Event]) -> bytes:
    """A log as the server receives it: the pickle of each event's fields as plain values.

    Equal bytes unpickle to equal events, so the bytes also key the verdicts
    already given (another identity pattern only costs a cache miss).
    """
    wire: list[WireEvent] = [
        (
            e.run_id,
            e.seq,
            e.type._value_,
            e.created_at,
            e.correlation_id,
            e.in_band,
            dict(e.data.items()),
        )
        for e in events
    ]
    return pickle.dumps(wire, protocol=pickle.HIGHEST_PROTOCOL)


def unwire_log(data: bytes) -> list[Event]:
    """The events :func:`wire_log` sent."""
    wire: list[WireEvent] = pickle.loads(data)  # noqa: S301 -- our own parent, a private pipe
    return [
        Event(
            run_id=run_id,
            seq=seq,
            type=EventType(type_),
            created_at=created_at,
            correlation_id=correlation_id,
            in_band=in_band,
            data=data,
        )
        for run_id, seq, type_, created_at, correlation_id, in_band, data in wire
    ]


#: Verdicts already given, by (hash seed, sha256 of the log's wire bytes): the
#: server's answer depends on nothing else (each replay starts from the same
#: freshly imported state), and explored examples often end with equal logs.
_KNOWN: dict[tuple[int, str], ReplayVerdict] = {}
_KNOWN_MAX = 10_000


class FreshReplay:
    """A request to the replay server; :meth:`verdicts` waits for its answer.

    Sending returns at once, so the caller can do other work (the in-process
    determinism replay) while the server replays on another core.  A log equal
    to one judged before is not sent again: its verdict is reused.
    """

    def __init__(
        self, logs: Sequence[Sequence[Event]], hash_seed: int, *, checked: bool = False
    ) -> None:
        self.hash_seed = hash_seed
        self._keys: list[tuple[int, str]] = []
        sent: list[bytes] = []
        self._sent_keys: list[tuple[int, str]] = []
        self._server: _Server | None = None
        self._modules: list[str] = []
        for events in logs:
            if not events:
                continue
            wire = wire_log(events)
            key = (hash_seed, hashlib.sha256(wire).hexdigest())
            self._keys.append(key)
            if key not in _KNOWN and key not in self._sent_keys:
                sent.append(wire)
                self._sent_keys.append(key)
        if not sent:
            return
        modules, main_path = _modules(logs)
        self._modules = modules
        self._server = _server(hash_seed)
        self._server.send(
            {
                "path": _search_path(),
                "modules": modules,
                "main": main_path,
                "logs": sent,
                "checked": checked,
            }
        )

    def verdicts(self) -> tuple[ReplayVerdict, ...]:
        """The oracle's verdict on each log, as the fresh process gave it.

        Raises:
            FreshProcessUnavailable: the fresh process could not import a workflow.
            RuntimeError: the server failed (its error is in the message).
        """
        if self._server is not None:
            answer = self._server.receive()
            self._server = None
            if "unavailable" in answer:
                raise FreshProcessUnavailable(
                    f"the fresh-process replay cannot run these runs: {answer['unavailable']} "
                    f"(it imported {', '.join(self._modules) or 'nothing'} with this "
                    "process's sys.path): define the workflow at module level of a module "
                    "importable by name (or of the script run as __main__), or pass "
                    "fresh_process=False",
                    workflow=", ".join(self._modules),
                )
            if "error" in answer:
                raise RuntimeError(f"the fresh-process replay failed:\n{answer['error']}")
            if len(_KNOWN) > _KNOWN_MAX:
                _KNOWN.clear()  # memory stays flat over long explorations
            for key, v in zip(self._sent_keys, answer["verdicts"], strict=True):
                _KNOWN[key] = ReplayVerdict(str(v["run_id"]), str(v["kind"]), str(v["detail"]))
        return tuple(_KNOWN[key] for key in self._keys if key in _KNOWN)


def replay_in_fresh_process(
    logs: Sequence[Sequence[Event]], *, hash_seed: int | None = None, checked: bool = False
) -> FreshReplay:
    """Send finished runs' logs to the replay server; ``.verdicts()`` gives the oracle's verdicts.

    Args:
        logs: each run's whole log (runs that did not end are judged ``replay.skipped``).
        hash_seed: the server's ``PYTHONHASHSEED`` (default :func:`child_hash_seed`).
        checked: the logs are ones :func:`verify_replay_log` may take as ``checked``
            (a MemoryWorld wrote them, ``check_invariants`` passed): the server loads
            them as they are too.
    """
    seed = child_hash_seed() if hash_seed is None else hash_seed
    return FreshReplay(logs, seed, checked=checked)
