"""Contract: every string a writer sends is checked alike (docs/protocol.md §9).

A lone surrogate, a NUL, an over-long or (where text is required) empty string is
refused with ``InvalidRequest`` before anything is read or written, whichever
field carries it, on every World: no raw ``UnicodeEncodeError``, no driver error,
no retry.  Requests are built by hand (``EventRequest(...)``) so the World's own
check is what is tested.  A World without ``input_validation`` gets "not
applicable".
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from durasim.worlds import STRING_LIMITS, EventRequest, InvalidRequest, World

from ._fixtures import MakeWorld, clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import assert_refused, new_hook, new_running_run, new_step, new_wait

#: Hostile text, by the rule it breaks.
HOSTILE: dict[str, str] = {
    "surrogate": "ok\ud800",
    "low-surrogate": "\udcff",
    "escaped-byte": b"caf\xe9".decode("utf-8", "surrogateescape"),
    "nul": "a\x00b",
    "only-nul": "\x00",
    "megabyte": "x" * 1_000_000,
}


def raw(type_: str, correlation_id: str | None = None, **data: Any) -> EventRequest:
    """A request built by hand: no validation at construction."""
    return EventRequest(type=type_, correlation_id=correlation_id, data=data)  # type: ignore[arg-type]


async def _busy_world(world: World) -> str:
    run_id = await new_running_run(world, "victim")
    await new_step(world, run_id, "s1", start=True)
    await new_hook(world, run_id, "h1", "tok")
    await new_wait(world, run_id, "w1")
    return run_id


def _writes(world: World, run_id: str, bad: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every write that carries a string, with ``bad`` in that string."""
    e = world.events
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "run_created.workflow_name": lambda: e.create(
            None, raw("run_created", workflow_name=bad, input=b"")
        ),
        "run_created.deployment_id": lambda: e.create(
            None, raw("run_created", workflow_name="wf", input=b"", deployment_id=bad)
        ),
        "run_created.attributes key": lambda: e.create(
            None, raw("run_created", workflow_name="wf", input=b"", attributes=[(bad, "v")])
        ),
        "run_created.attributes value": lambda: e.create(
            None, raw("run_created", workflow_name="wf", input=b"", attributes=[("k", bad)])
        ),
        "run_cancelled.reason": lambda: e.create(run_id, raw("run_cancelled", reason=bad)),
        "run_failed.error_code": lambda: e.create(
            run_id, raw("run_failed", error=b"x", error_code=bad)
        ),
        "step_created.step_name": lambda: e.create(
            run_id, raw("step_created", "s2", step_name=bad, input=b"")
        ),
        "step_created.creator_message_id": lambda: e.create(
            run_id, raw("step_created", "s2", step_name="st", input=b"", creator_message_id=bad)
        ),
        "step_started.owner_message_id": lambda: e.create(
            run_id, raw("step_started", "s1", owner_message_id=bad)
        ),
        "step_started.start_reason": lambda: e.create(
            run_id, raw("step_started", "s1", start_reason=bad)
        ),
        "step correlation id": lambda: e.create(run_id, raw("step_started", bad)),
        "hook_created.token": lambda: e.create(run_id, raw("hook_created", "h2", token=bad)),
        "hook_received.resume_id": lambda: e.create(
            run_id, raw("hook_received", "h1", payload=b"p", resume_id=bad)
        ),
        "batch hook_received.resume_id": lambda: e.create_batch(
            run_id, [raw("hook_received", "h1", payload=b"p", resume_id=bad)]
        ),
        "attr_set key": lambda: e.create(run_id, raw("attr_set", changes=[(bad, "v")])),
        "attr_set value": lambda: e.create(run_id, raw("attr_set", changes=[("k", bad)])),
        "attr_set.writer": lambda: e.create(
            run_id, raw("attr_set", changes=[("k", "v")], writer=bad)
        ),
        "run id": lambda: e.create(bad, raw("run_started")),
    }
    if world.capabilities.queue:
        calls["queue idempotency_key"] = lambda: world.queue.enqueue("q", b"m", idempotency_key=bad)
        calls["queue name"] = lambda: world.queue.enqueue(bad, b"m")
    if world.capabilities.streams:
        calls["stream name"] = lambda: world.streams.write(run_id, bad, b"c")
    return calls


def _reads(world: World, run_id: str, bad: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every read that looks a string up."""
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "hooks.get_by_token": lambda: world.hooks.get_by_token(bad),
        "hooks.get": lambda: world.hooks.get(run_id, bad),
        "steps.get": lambda: world.steps.get(run_id, bad),
        "waits.get": lambda: world.waits.get(run_id, bad),
        "runs.get": lambda: world.runs.get(bad),
        "runs.list workflow_name": lambda: world.runs.list(workflow_name=bad),
        "runs.list cursor": lambda: world.runs.list(cursor=bad),
    }
    if world.capabilities.queue:
        calls["queue.claim prefix"] = lambda: world.queue.claim(queue_prefix=bad)
        calls["queue.next_due prefix"] = lambda: world.queue.next_due(queue_prefix=bad)
    return calls


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_hostile_strings_are_refused_in_every_write(world: World, kind: str) -> None:
    run_id = await _busy_world(world)
    bad = HOSTILE[kind]
    for where, call in _writes(world, run_id, bad).items():
        started = time.monotonic()
        exc = await assert_refused(world, InvalidRequest, call)
        assert str(exc), where
        assert time.monotonic() - started < 5, f"{where}: refused only after a long wait"


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_hostile_strings_are_refused_in_every_lookup(world: World, kind: str) -> None:
    run_id = await _busy_world(world)
    for where, call in _reads(world, run_id, HOSTILE[kind]).items():
        exc = await assert_refused(world, InvalidRequest, call)
        assert str(exc), where


@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("workflow_name", lambda s: raw("run_created", workflow_name=s, input=b"")),
        (
            "deployment_id",
            lambda s: raw("run_created", workflow_name="w", input=b"", deployment_id=s),
        ),
        ("reason", lambda s: raw("run_cancelled", reason=s)),
        ("resume_id", lambda s: raw("hook_received", "h1", payload=b"", resume_id=s)),
        ("token", lambda s: raw("hook_created", "h2", token=s)),
        ("step_name", lambda s: raw("step_created", "s2", step_name=s, input=b"")),
    ],
)
async def test_string_bounds_are_the_documented_ones(
    world: World, field: str, make: Callable[[str], EventRequest]
) -> None:
    """At the bound: accepted; one character more: refused, nothing written."""
    run_id = await _busy_world(world)
    _low, high = STRING_LIMITS[field]
    target = None if field in {"workflow_name", "deployment_id"} else run_id
    await assert_refused(
        world, InvalidRequest, lambda: world.events.create(target, make("y" * (high + 1)))
    )
    await world.events.create(target, make("y" * high))


@pytest.mark.parametrize("text", ["ünïcödé", "日本語", "emoji-\U0001f600", "tab\there"])
async def test_valid_unicode_is_kept_exactly(world: World, text: str) -> None:
    run_id = await _busy_world(world)
    created = await world.events.create(
        None, raw("run_created", workflow_name=text, input=b"", attributes=[("k", text)])
    )
    assert (await world.runs.get(created.run.run_id)).workflow_name == text
    await world.events.create(run_id, raw("hook_received", "h1", payload=b"", resume_id=text))
    received = [e for e in (await world.events.list(run_id)).events if e.type == "hook_received"]
    assert received[-1].data["resume_id"] == text
