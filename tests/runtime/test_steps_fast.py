"""Issue 22's cheaper step path agrees with the plain one.

* ``plain_call`` of a call without keyword arguments (its own loop now) writes
  what the general encoder writes, and refuses what it refuses;
* the routes' written-out ``install``/``restore`` put back exactly what they
  replaced: module items and other attributes, nested, with a route added
  while installed;
* a step body given the call's own tuple and dict (no copies) cannot change what
  a later attempt or the workflow sees;
* the quick-body bookkeeping reads ``__code__`` as an attribute: a callable
  without one (or with ``None``) is never run inline and leaves no count;
* a sync step runs inline after its quick bodies with the same results and errors
  as an async step and as a step run in a thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import FatalError, Limits, Worker, _loop, start, step, workflow
from durasim.runtime import _step_threads as threads
from durasim.runtime._payloads import RunPayloads
from durasim.runtime.serialization import SerializationError, deserialize
from durasim.runtime.serialization._api import plain_call
from durasim.worlds import FixedClock, MemoryWorld

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)
others = st.one_of(
    scalars, st.lists(scalars, max_size=2), st.tuples(scalars), st.frozensets(st.integers())
)


def _general(args: tuple[Any, ...]) -> bytes | None:
    try:
        return RunPayloads().encode_step_input(
            "f#1", {"args": list(args), "kwargs": {}, "closure": {}}, root="f(...)"
        )
    except SerializationError:
        return None


@settings(max_examples=400, deadline=None)
@given(args=st.lists(others, max_size=5))
def test_plain_call_without_keywords_writes_what_the_general_path_writes(
    args: list[Any],
) -> None:
    fast = plain_call(tuple(args), {})
    if fast is None:
        return  # the general path takes it (checked below for scalars)
    assert fast == _general(tuple(args))
    decoded = deserialize(fast)
    assert repr(decoded["args"]) == repr(args) or any(
        isinstance(v, float) and math.isnan(v) for v in args
    )


@settings(max_examples=300, deadline=None)
@given(args=st.lists(scalars, max_size=5))
def test_plain_call_takes_every_finite_scalar_call_in_range(args: list[Any]) -> None:
    fast = plain_call(tuple(args), {})
    representable = all(
        not (type(v) is float and not math.isfinite(v))
        and not (type(v) is int and abs(v) > 2**53 - 1)
        for v in args
    )
    assert (fast is not None) == representable
    if fast is not None:
        assert fast == _general(tuple(args))


def test_plain_call_refuses_subclasses_and_bounds() -> None:
    class Number(int):
        pass

    assert plain_call((Number(1),), {}) is None
    assert plain_call((2**53,), {}) is None
    assert plain_call((-(2**53),), {}) is None
    assert plain_call((2**53 - 1, -(2**53 - 1)), {}) == _general((2**53 - 1, -(2**53 - 1)))
    assert plain_call((math.inf,), {}) is None
    assert plain_call((), {}) == _general(())


def test_take_call_hands_out_the_kept_call_once() -> None:
    payloads = RunPayloads()
    kwargs = {"b": 2}
    data = payloads.encode_step_call("f#1", (1,), kwargs, {}, step_name="f")
    call = payloads.take_call("f#1", data)
    assert call is not None
    assert call == (data, (1,), kwargs)
    assert call[2] is kwargs
    assert payloads.take_call("f#1", data) is None
    payloads.encode_step_call("f#2", (1,), {}, {}, step_name="f")
    assert payloads.take_call("f#2", b"other") is None
    assert payloads.plain_call_of("f#2", b"other") is None


def test_routes_written_out_restore_what_they_replaced() -> None:
    module: Any = types.ModuleType("routed_here")
    module.a = "a0"
    module.b = "b0"

    class Holder:
        c = "c0"

    routes = _loop._Routes()
    routes.enter()  # nothing routed: nothing changes
    routes.exit()
    routes.add(module, "a", "a1")
    routes.add(Holder, "c", "c1")
    routes.enter()
    assert (module.a, module.b, Holder.c) == ("a1", "b0", "c1")
    routes.enter()
    routes.exit()  # nested: still routed
    assert (module.a, Holder.c) == ("a1", "c1")
    # A route added while installed takes effect at the next install; the exit
    # restores only what the install that ran replaced.
    routes.add(module, "b", "b1")
    assert module.b == "b0"
    module.a = "changed meanwhile"
    routes.exit()
    assert (module.a, module.b, Holder.c) == ("a0", "b0", "c0")
    routes.enter()
    assert (module.a, module.b, Holder.c) == ("a1", "b1", "c1")
    routes.exit()
    assert (module.a, module.b, Holder.c) == ("a0", "b0", "c0")


def test_a_callable_without_code_is_never_quick() -> None:
    class NoCode:
        def __call__(self) -> None:
            pass

    class NoneCode:
        __code__ = None

        def __call__(self) -> None:
            pass

    for fn in (NoCode(), NoneCode(), len):
        for _ in range(threads.INLINE_AFTER + 1):
            threads.ran_inline(fn, 0.0)
        assert not threads.runs_inline(fn)
    assert None not in threads._quick


@step
def _twice_sync(n: int, *, label: str = "x") -> str:
    if n < 0:
        raise FatalError(f"negative {n}")
    return f"{label}{2 * n}"


@step
async def _twice_async(n: int, *, label: str = "x") -> str:
    if n < 0:
        raise FatalError(f"negative {n}")
    return f"{label}{2 * n}"


@step
def _mutates(values: tuple[int, ...], **named: int) -> int:
    named["extra"] = 1  # the body's own dict: the call kept is not touched
    return len(values) + len(named)


@workflow
async def _many(n: int, kind: str) -> list[Any]:
    out: list[Any] = []
    call = _twice_async if kind == "async" else _twice_sync
    for i in range(n):
        out.append(await call(i, label="y"))
    try:
        await call(-1)
    except FatalError as exc:
        out.append(f"failed: {exc}")
    out.append(await _mutates((1, 2), a=1))
    out.append(await _mutates((1, 2), a=1))
    return out


@pytest.mark.parametrize("sync_steps", ["auto", "thread", "inline"])
def test_sync_steps_inline_or_not_agree_with_async(sync_steps: str) -> None:
    async def go(kind: str) -> Any:
        world = MemoryWorld(clock=FixedClock())
        run = await start(_many, threads.INLINE_AFTER + 4, kind, world=world)
        worker = Worker(world, limits=Limits(sync_steps=sync_steps))
        return await worker.run_until_complete(run)

    expected = asyncio.run(go("async"))
    assert expected[: threads.INLINE_AFTER + 4] == [
        f"y{2 * i}" for i in range(threads.INLINE_AFTER + 4)
    ]
    assert expected[-3:] == ["failed: negative -1", 4, 4]
    assert asyncio.run(go("sync")) == expected


def test_call_soon_makes_the_handle_asyncio_makes() -> None:
    loop = _loop.WorkflowLoop(on_timer=lambda h: None, on_timer_cancelled=lambda h: None, now=0.0)
    assert _loop._HANDLE_SLOTS  # every supported Python: the fast path is the one tested
    seen: list[Any] = []
    for context in (None, contextvars.copy_context()):
        handle = loop.call_soon(seen.append, 1, context=context)
        expected = asyncio.Handle(seen.append, (1,), loop, context)
        assert type(handle) is asyncio.Handle
        for name in ("_callback", "_args", "_cancelled", "_loop", "_source_traceback", "_repr"):
            assert getattr(handle, name) == getattr(expected, name), name
        assert isinstance(handle._context, contextvars.Context)  # type: ignore[attr-defined]
        if context is not None:
            assert handle._context is context  # type: ignore[attr-defined]
        assert repr(handle) == repr(expected)
    loop.callbacks[0].cancel()
    loop.run_ready()
    assert seen == [1]
    loop.close()
