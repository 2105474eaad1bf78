"""Hostile input, as an attacker or a careless operator sends it (issue 19, items 1-3).

Every case gets a typed error or a correct answer, and nothing is written or lost:

* the Worlds (memory, SQLite, PostgreSQL): every string-carrying write and lookup
  with a lone surrogate, NUL, ``%00`` decoded, an over-long or 1 MB string is
  ``InvalidRequest`` naming the field and the rule, the same on all three, fast
  (no 30 s of retries), and the World reads back exactly as before;
* workflow code: a malformed ``create_hook(token=...)`` or cancellation reason
  fails at the call, in the workflow, once (no redelivery);
* the CLI: a bad option is one line on stderr and exit 2, the World untouched;
  a worker honours SIGTERM;
* ``durasim check-log``: each bad line is ``file:line: what is wrong``, never a
  traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from _postgres_support import require_postgres
from conftest import factory_of

sys.path.insert(0, str(Path(__file__).parent / "runtime"))

import wf_hostile

from durasim.runtime import Worker, start
from durasim.scenarios._cli import main
from durasim.scenarios.conformance.suite._helpers import world_state
from durasim.worlds import (
    CountingIds,
    EventRequest,
    FixedClock,
    InvalidRequest,
    RunStatus,
    SQLiteWorld,
    World,
    WorldSetup,
    check_text,
    check_token,
)

#: Hostile strings, by what is wrong with them.
HOSTILE: dict[str, str] = {
    "lone-high-surrogate": "ok\ud800",
    "lone-low-surrogate": "\udcff",
    "undecodable-argv-byte": b"caf\xe9".decode("utf-8", "surrogateescape"),
    "nul": "a\x00b",
    "percent-00-decoded": "\x00",
    "over-bound": "x" * 4097,
    "megabyte": "x" * 1_000_000,
}
#: The rule each hostile string breaks first (length is checked first).
RULE = {
    "lone-high-surrogate": "utf-8",
    "lone-low-surrogate": "utf-8",
    "undecodable-argv-byte": "utf-8",
    "nul": "nul",
    "percent-00-decoded": "nul",
    "over-bound": "length",
    "megabyte": "length",
}


def raw(type_: str, correlation_id: str | None = None, **data: Any) -> EventRequest:
    """A request built by hand: the World's own check is what is tested."""
    return EventRequest(type=type_, correlation_id=correlation_id, data=data)  # type: ignore[arg-type]


Call = Callable[[World, str], Awaitable[Any]]

#: Every call that sends a writer's string to the World, ``s`` standing for it.
WRITES: dict[str, Callable[[str], Call]] = {
    "workflow_name": lambda s: (
        lambda w, r: w.events.create(None, raw("run_created", workflow_name=s, input=b""))
    ),
    "deployment_id": lambda s: (
        lambda w, r: w.events.create(
            None, raw("run_created", workflow_name="wf", input=b"", deployment_id=s)
        )
    ),
    "run attribute key": lambda s: (
        lambda w, r: w.events.create(
            None, raw("run_created", workflow_name="wf", input=b"", attributes=[(s, "v")])
        )
    ),
    "run attribute value": lambda s: (
        lambda w, r: w.events.create(
            None, raw("run_created", workflow_name="wf", input=b"", attributes=[("k", s)])
        )
    ),
    "run id": lambda s: (
        lambda w, r: w.events.create(s, raw("run_created", workflow_name="wf", input=b""))
    ),
    "cancel reason": lambda s: lambda w, r: w.events.create(r, raw("run_cancelled", reason=s)),
    "error_code": lambda s: (
        lambda w, r: w.events.create(r, raw("run_failed", error=b"e", error_code=s))
    ),
    "step_name": lambda s: (
        lambda w, r: w.events.create(r, raw("step_created", "s2", step_name=s, input=b""))
    ),
    "step id": lambda s: (
        lambda w, r: w.events.create(r, raw("step_created", s, step_name="st", input=b""))
    ),
    "owner_message_id": lambda s: (
        lambda w, r: w.events.create(r, raw("step_started", "s1", owner_message_id=s))
    ),
    "hook token": lambda s: lambda w, r: w.events.create(r, raw("hook_created", "h2", token=s)),
    "resume id": lambda s: (
        lambda w, r: w.events.create(r, raw("hook_received", "h1", payload=b"p", resume_id=s))
    ),
    "resume id in a batch": lambda s: (
        lambda w, r: w.events.create_batch(
            r, [raw("hook_received", "h1", payload=b"p", resume_id=s)]
        )
    ),
    "attr_set key": lambda s: lambda w, r: w.events.create(r, raw("attr_set", changes=[(s, "1")])),
    "attr_set value": lambda s: (
        lambda w, r: w.events.create(r, raw("attr_set", changes=[("k", s)]))
    ),
    "idempotency key": lambda s: lambda w, r: w.queue.enqueue("q", b"m", idempotency_key=s),
    "stream name": lambda s: lambda w, r: w.streams.write(r, s, b"c"),
}
#: Every read that looks a string up.
LOOKUPS: dict[str, Callable[[str], Call]] = {
    "hooks.get_by_token": lambda s: lambda w, r: w.hooks.get_by_token(s),
    "steps.get": lambda s: lambda w, r: w.steps.get(r, s),
    "hooks.get": lambda s: lambda w, r: w.hooks.get(r, s),
    "runs.get": lambda s: lambda w, r: w.runs.get(s),
    "runs.list workflow_name": lambda s: lambda w, r: w.runs.list(workflow_name=s),
    "queue.claim prefix": lambda s: lambda w, r: w.queue.claim(queue_prefix=s),
}


async def _busy(world: World) -> str:
    """A running run with a step, a hook holding ``tok``, a queued message and a stream."""
    e = world.events
    run_id = (await e.create("victim", raw("run_created", workflow_name="wf", input=b"i"))).run
    await e.create("victim", raw("run_started"))
    await e.create("victim", raw("step_created", "s1", step_name="st", input=b""))
    await e.create("victim", raw("step_started", "s1"))
    await e.create("victim", raw("hook_created", "h1", token="tok"))
    await world.queue.enqueue("q", b"m", run_id="victim")
    await world.streams.write("victim", "out", b"chunk")
    return run_id.run_id


async def _refused(
    world: World, call: Call, run_id: str, *, compare: bool = True
) -> InvalidRequest:
    before = await world_state(world) if compare else None
    started = time.monotonic()
    with pytest.raises(InvalidRequest) as caught:
        await call(world, run_id)
    elapsed = time.monotonic() - started
    assert type(caught.value) is InvalidRequest
    assert elapsed < 2.0, f"refused after {elapsed:.1f} s: a bound must refuse at once"
    if compare:
        assert await world_state(world) == before, "a refused call changed the World"
    assert len(str(caught.value)) < 1_000, "the message must not echo the whole value"
    return caught.value


# --- the Worlds -----------------------------------------------------------------------------

#: The in-process Worlds get one case per (call, string); PostgreSQL, whose every
#: World costs a schema, one case per call looping over the strings.
CHEAP = ["memory", "sqlite"]
ALL = [*CHEAP, "postgres"]
IDS = {"run id", "step id", "stream name"}  # refused by their character set (rule "format")


def _make(kind: str, directory: Path) -> World:
    if kind == "postgres":
        require_postgres()
    setup = WorldSetup(clock=FixedClock(), ids=CountingIds(), directory=directory)
    return factory_of(kind)(setup)


async def _check(
    world: World,
    run_id: str,
    where: str,
    kind: str,
    calls: dict[str, Any],
    *,
    compare: bool = True,
) -> None:
    exc = await _refused(world, calls[where](HOSTILE[kind]), run_id, compare=compare)
    if calls is WRITES and where not in IDS:
        assert exc.rule == RULE[kind], str(exc)  # type: ignore[attr-defined]
        assert exc.field  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("where", sorted(WRITES))
@pytest.mark.parametrize("world_kind", CHEAP)
async def test_a_world_refuses_a_hostile_string_in_a_write(
    world_kind: str, where: str, kind: str, tmp_path: Path
) -> None:
    world = _make(world_kind, tmp_path)
    try:
        await _check(world, await _busy(world), where, kind, WRITES)
    finally:
        await world.close()


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("where", sorted(LOOKUPS))
@pytest.mark.parametrize("world_kind", CHEAP)
async def test_a_world_refuses_a_hostile_string_in_a_lookup(
    world_kind: str, where: str, kind: str, tmp_path: Path
) -> None:
    world = _make(world_kind, tmp_path)
    try:
        await _check(world, await _busy(world), where, kind, LOOKUPS)
    finally:
        await world.close()


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_postgres_refuses_every_hostile_string(kind: str, tmp_path: Path) -> None:
    """Every call in turn on one PostgreSQL World: 1 MB refused at once, NUL never sent.

    Refusals write nothing, so what the World holds is compared once, after them all.
    """
    world = _make("postgres", tmp_path)
    try:
        run_id = await _busy(world)
        before = await world_state(world)
        for calls in (WRITES, LOOKUPS):
            for where in sorted(calls):
                await _check(world, run_id, where, kind, calls, compare=False)
        assert await world_state(world) == before, "a refused call changed the World"
    finally:
        await world.close()


async def test_every_world_gives_the_same_refusal(world: World) -> None:
    """Field and rule are computed before any I/O: the same on every World kind."""
    run_id = await _busy(world)
    seen = []
    for kind in sorted(HOSTILE):
        exc = await _refused(world, WRITES["resume id"](HOSTILE[kind]), run_id)
        seen.append((exc.field, exc.rule, str(exc)))  # type: ignore[attr-defined]
    expected = []
    for kind in sorted(HOSTILE):
        try:
            check_text(HOSTILE[kind], field="hook_received.resume_id")
        except InvalidRequest as exc:
            expected.append((exc.field, exc.rule, str(exc)))  # type: ignore[attr-defined]
    assert seen == expected


VALID = ["ünïcödé", "日本語", "emoji-\U0001f600", "quote'\"", "'; DROP TABLE events;--", "\t"]


async def test_valid_text_is_accepted_and_read_back_exactly(world: World) -> None:
    run_id = await _busy(world)
    for text in VALID:
        await _accepted(world, run_id, text)


async def _accepted(world: World, run_id: str, text: str) -> None:
    written = await world.events.create(
        run_id, raw("hook_received", "h1", payload=b"p", resume_id=text)
    )
    assert written.event is not None
    assert (await world.events.get(run_id, written.event.seq)).data["resume_id"] == text
    await world.events.create(run_id, raw("attr_set", changes=[("note", text)]))
    assert (await world.runs.get(run_id)).attributes["note"] == text


# --- the shared checks themselves -------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "rule"),
    [
        ("", "empty"),
        ("a b", "printable"),
        ("a\tb", "printable"),
        ("a\nb", "printable"),
        ("\x7f", "printable"),
        ("a\x00", "nul"),
        ("a\ud800", "utf-8"),
        ("t" * 257, "length"),
        (7, "type"),
        (None, "type"),
        (b"tok", "type"),
    ],
)
def test_check_token_names_the_rule(token: object, rule: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_token(token)
    assert caught.value.rule == rule  # type: ignore[attr-defined]
    assert caught.value.field == "token"  # type: ignore[attr-defined]


@pytest.mark.parametrize("token", ["tok", "approval:order-17", "ünï", "t" * 256, "a/b?c=d#e"])
def test_check_token_accepts_valid_tokens(token: str) -> None:
    assert check_token(token) == token


# --- workflow code --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(wf_hostile.BAD_TOKENS))
@pytest.mark.parametrize("workflow", ["hook_with_token", "webhook_with_token"])
@pytest.mark.parametrize("world_kind", CHEAP)
async def test_a_malformed_token_fails_the_workflow_at_the_call(
    world_kind: str, workflow: str, kind: str, tmp_path: Path
) -> None:
    world = _make(world_kind, tmp_path)
    try:
        await _fails_at_the_call(world, workflow, kind)
    finally:
        await world.close()


async def test_a_malformed_token_fails_the_workflow_at_the_call_on_postgres(
    tmp_path: Path,
) -> None:
    world = _make("postgres", tmp_path)
    try:
        for kind in ("surrogate", "nul", "megabyte"):
            await _fails_at_the_call(world, "hook_with_token", kind)
    finally:
        await world.close()


async def _fails_at_the_call(world: World, workflow: str, kind: str) -> None:
    run = await start(getattr(wf_hostile, workflow), kind, world=world)
    await Worker(world).drain()  # one delivery: no redelivery of a call that cannot succeed
    assert await run.status() is RunStatus.FAILED
    assert await world.queue.messages() == ()
    failed = (await run.events())[-1]
    assert failed.data["error_code"] == "USER_ERROR"
    error = failed.data["error"].decode("utf-8", "replace")
    assert "InvalidRequest" in error
    assert "token=...)" in error  # names the call and the rule
    assert not any(e.type == "hook_created" for e in await run.events())


@pytest.mark.parametrize("kind", ["surrogate", "nul", "space", "megabyte"])
async def test_workflow_code_may_catch_the_refusal(kind: str, tmp_path: Path) -> None:
    world = _make("sqlite", tmp_path)
    try:
        run = await start(wf_hostile.caught_bad_token, kind, world=world)
        await Worker(world).drain()
        assert (await run.result()).startswith("refused: ")
    finally:
        await world.close()


@pytest.mark.parametrize("kind", sorted(wf_hostile.BAD_REASONS))
@pytest.mark.parametrize("world_kind", CHEAP)
async def test_a_malformed_cancellation_reason_fails_at_the_call(
    world_kind: str, kind: str, tmp_path: Path
) -> None:
    world = _make(world_kind, tmp_path)
    try:
        run = await start(wf_hostile.cancel_with_reason, kind, world=world)
        await Worker(world).drain()
        assert await run.status() is RunStatus.FAILED
        assert await world.queue.messages() == ()
    finally:
        await world.close()


# --- the CLI --------------------------------------------------------------------------------


def _world_file(tmp_path: Path) -> tuple[Path, str, bytes]:
    """A SQLite World holding one running run; its path, the run id and its bytes."""
    import asyncio

    path = tmp_path / "w.db"

    async def go() -> str:
        world = SQLiteWorld(path)
        try:
            return await _busy(world)
        finally:
            await world.close()

    run_id = asyncio.run(go())
    return path, run_id, path.read_bytes()


BAD_OPTIONS: dict[str, list[str]] = {
    "concurrency negative": ["worker", "--concurrency", "-3"],
    "concurrency zero": ["worker", "--concurrency", "0"],
    "concurrency huge": ["worker", "--concurrency", "100000"],
    "concurrency text": ["worker", "--concurrency", "many"],
    "concurrency float": ["worker", "--concurrency", "1.5"],
    "lease nan": ["worker", "--lease-seconds", "nan"],
    "lease inf": ["worker", "--lease-seconds", "inf"],
    "lease 1e999": ["worker", "--lease-seconds", "1e999"],
    "lease negative": ["worker", "--lease-seconds", "-1"],
    "lease zero": ["worker", "--lease-seconds", "0"],
    "renew nan": ["worker", "--renew-every", "NaN"],
    "renew negative": ["worker", "--renew-every", "-0.5"],
    "renew over lease": ["worker", "--lease-seconds", "2", "--renew-every", "5"],
    "worker module surrogate": ["worker", "mod\udcff"],
    "budget negative": ["conformance", "m:f", "--budget", "-5"],
    "budget nan": ["conformance", "m:f", "--budget", "nan"],
    "examples zero": ["conformance", "m:f", "--examples", "0"],
    "seed negative": ["conformance", "m:f", "--seed", "-1"],
    "demo examples negative": ["demo", "--examples", "-1"],
    "cancel reason surrogate": ["cancel", "victim", "--reason", "\udcff"],
    "cancel reason nul": ["cancel", "victim", "--reason", "a\x00"],
    "cancel reason too long": ["cancel", "victim", "--reason", "r" * 513],
    "cancel run id surrogate": ["cancel", "vic\udcfftim"],
    "cancel run id path": ["cancel", "../victim"],
    "inspect run id sql": ["inspect", "run", "x'; DROP TABLE runs;--"],
    "inspect run id megabyte": ["inspect", "events", "r" * 1_000_000],
    "run run-id": ["run", "m:w", "--run-id", "bad id"],
    "run target surrogate": ["run", "m\udcff:w"],
    "run argument surrogate": ["run", "m:w", "\ud800"],
    "log run id": ["log", "w.db", "a/b"],
    "check-log path nul": ["check-log", "a\x00b"],
    "world url surrogate": ["inspect", "runs", "--world", "postgresql://h/\udcff"],
    "world path nul": ["inspect", "runs", "--world", "w\x00.db"],
    "reproduce seed surrogate": ["reproduce", "durasim:v1:\udcff"],
}


@pytest.mark.parametrize("name", sorted(BAD_OPTIONS))
def test_a_bad_option_is_one_line_and_exit_2(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _run_id, image = _world_file(tmp_path)
    argv = list(BAD_OPTIONS[name])
    if argv[0] in {"worker", "cancel"} and "--world" not in argv:
        argv += ["--world", str(path)]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "error: " in err
    assert "Traceback" not in err
    assert path.read_bytes() == image, "a refused command changed the World"


def test_undecodable_argv_bytes_in_a_real_process(tmp_path: Path) -> None:
    path, run_id, image = _world_file(tmp_path)
    command = [sys.executable, "-m", "durasim.scenarios", "cancel", run_id]
    done = subprocess.run(
        [*command, "--reason", b"\xff", "--world", str(path)],  # type: ignore[list-item]
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert b"Traceback" not in done.stderr
    assert b"not UTF-8" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert path.read_bytes() == image


def test_a_worker_honours_sigterm(tmp_path: Path) -> None:
    path, _run_id, _image = _world_file(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "durasim.scenarios", "worker", "--world", str(path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
    ) as worker:
        try:
            assert worker.stderr is not None
            line = worker.stderr.readline()  # blocks until the worker serves
            assert b"serving" in line, line
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0
            assert b"Traceback" not in worker.stderr.read()
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


# --- check-log ------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "run_id": "r1",
    "seq": 1,
    "type": "run_created",
    "created_at": "2024-01-01T00:00:00+00:00",
    "correlation_id": None,
    "in_band": True,
    "data": {"workflow_name": "wf", "input": {"$bytes": ""}},
}


def _with(**changes: Any) -> str:
    return json.dumps({**GOOD, **changes})


BAD_LINES: dict[str, str] = {
    "data is a list": _with(data=[1, 2]),
    "data is a string": _with(data="x"),
    "data is a number": _with(data=3),
    "seq fractional": _with(seq=1.5),
    "seq 1e999": json.dumps(GOOD).replace('"seq": 1', '"seq": 1e999'),
    "seq NaN": json.dumps(GOOD).replace('"seq": 1', '"seq": NaN'),
    "seq Infinity": json.dumps(GOOD).replace('"seq": 1', '"seq": -Infinity'),
    "seq zero": _with(seq=0),
    "seq negative": _with(seq=-1),
    "seq bool": _with(seq=True),
    "seq string": _with(seq="1"),
    "seq huge": _with(seq=2**64),
    "naive time": _with(created_at="2024-01-01T00:00:00"),
    "time garbage": _with(created_at="yesterday"),
    "time number": _with(created_at=0),
    "run id path": _with(run_id="../etc/passwd"),
    "run id sql": _with(run_id="r'; DROP TABLE runs;--"),
    "run id empty": _with(run_id=""),
    "run id number": _with(run_id=7),
    "run id nul": _with(run_id="r\x00"),
    "run id surrogate": _with(run_id="r\ud800"),
    "correlation id space": _with(type="step_created", correlation_id="a b"),
    "unknown type": _with(type="run_exploded"),
    "type not a str": _with(type=["run_created"]),
    "in_band string": _with(in_band="yes"),
    "unknown field": _with(extra=1),
    "missing seq": json.dumps({k: v for k, v in GOOD.items() if k != "seq"}),
    "not an object": "[1, 2, 3]",
    "a bare string": '"hello"',
    "null": "null",
    "not json": "not json at all",
    "truncated": _with()[:-5],
    "duplicate key": '{"seq": 1, "seq": 2}',
    "deep brackets": "[" * 100_000 + "]" * 100_000,
    "deep objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "unclosed deep": "[" * 100_000,
    "bad base64": _with(data={"workflow_name": "wf", "input": {"$bytes": "!!"}}),
    "unknown value": _with(data={"workflow_name": "wf", "input": {"$weird": 1}}),
    "bytes field as str": _with(data={"workflow_name": "wf", "input": "plain"}),
    "missing required data": _with(data={"workflow_name": "wf"}),
    "unknown data field": _with(data={"workflow_name": "wf", "input": {"$bytes": ""}, "x": 1}),
    "workflow name surrogate": _with(data={"workflow_name": "w\ud800", "input": {"$bytes": ""}}),
    "workflow name nul": _with(data={"workflow_name": "w\x00", "input": {"$bytes": ""}}),
    "float in data": _with(data={"workflow_name": "wf", "input": {"$bytes": ""}, "inline": 1.5}),
    "naive time in data": _with(
        type="wait_created", correlation_id="w1", data={"resume_at": {"$time": "2024-01-01T00:00"}}
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_check_log_reports_each_bad_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text(
        json.dumps(GOOD) + "\n" + BAD_LINES[name] + "\n", encoding="utf-8", errors="surrogatepass"
    )
    assert main(["check-log", str(log)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    problems = [line for line in captured.err.splitlines() if line.startswith(f"{log}:")]
    assert len(problems) == 1, captured.err
    assert problems[0].startswith(f"{log}:2: not an exported event: ")
    assert len(problems[0]) < 500


def test_check_log_reports_every_bad_line_of_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x.jsonl"
    names = sorted(BAD_LINES)
    lines = [json.dumps(GOOD), *(BAD_LINES[n] for n in names)]
    log.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n\xff\xfe not utf-8\n")
    assert main(["check-log", str(log)]) == 1
    err = capsys.readouterr().err
    for number in range(2, len(lines) + 2):
        assert f"{log}:{number}: " in err
    assert "Traceback" not in err


def test_check_log_accepts_the_good_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text(json.dumps(GOOD) + "\n")
    main(["check-log", str(log)])
    assert "not an exported event" not in capsys.readouterr().err


# --- the webhook app (ASGI, no server: the token check is the World's) -----------------------

WEBHOOK_TOKENS = {
    "nul": "\x00",
    "nul inside": "tok\x00en",
    "surrogate": "tok\ud800",
    "space": "a b",
    "megabyte": "t" * 1_000_000,
    "unknown": "no-such-token",
}


async def _webhook_status(world: World, token: str) -> int:
    from durasim.runtime import webhook_app

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/webhooks/" + token,
        "headers": [],
        "query_string": b"",
    }
    await webhook_app(world)(scope, receive, send)
    return int(sent[0]["status"])


@pytest.mark.parametrize("name", sorted(WEBHOOK_TOKENS))
@pytest.mark.parametrize("world_kind", CHEAP)
async def test_a_malformed_webhook_token_answers_404(
    world_kind: str, name: str, tmp_path: Path
) -> None:
    world = _make(world_kind, tmp_path)
    try:
        await _busy(world)
        before = await world_state(world)
        assert await _webhook_status(world, WEBHOOK_TOKENS[name]) == 404
        assert await world_state(world) == before
    finally:
        await world.close()


async def test_malformed_webhook_tokens_answer_404_on_postgres(tmp_path: Path) -> None:
    world = _make("postgres", tmp_path)
    try:
        await _busy(world)
        before = await world_state(world)
        for token in WEBHOOK_TOKENS.values():
            assert await _webhook_status(world, token) == 404
        assert await world_state(world) == before
    finally:
        await world.close()
