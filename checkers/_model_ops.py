"""What the World model machine sends: id pools, request strategies, bad calls, reads.

Ids come from small pools so that collisions, conflicts and refusals are common:
two steps, two hooks sharing two tokens across runs, two waits, two resume ids.
A request is drawn as a *spec* ``(type, correlation id, data)`` and built into an
:class:`~durasim.worlds.EventRequest` only when used, because timestamps in it
(``resume_at``, ``retry_after``) are drawn as offsets from the clock's ``now``.

Swarm testing: besides Hypothesis's own per-rule switches, each example switches
off a random subset of :data:`SWARM_KINDS` (event types, fence modes, ``seen_seq``)
for all its writes (:data:`switched_off`, drawn once per example), so an example
without ``run_completed`` keeps its runs alive and one without out-of-band steps
piles up in-band ones: rare interactions get density.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import attrs
from hypothesis import strategies as st

from durasim.worlds import Capabilities, EventRequest, World, WorldError

__all__ = [
    "BAD_CALLS",
    "HOOKS",
    "QUEUES",
    "RUNS",
    "STEPS",
    "STREAMS",
    "SWARM_KINDS",
    "TOKENS",
    "WAITS",
    "BadCall",
    "Spec",
    "batches",
    "blobs",
    "fences",
    "hook_requests",
    "observe",
    "offsets",
    "outcome",
    "race_requests",
    "recorded",
    "run_requests",
    "seen",
    "step_requests",
    "switched_off",
    "targets",
    "wait_requests",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def recorded(function: _F) -> _F:
    """Record each call of a rule in the machine's ``history`` (to replay and minimize it).

    Put it under ``@rule`` / ``@initialize``: Hypothesis then calls the recorder,
    which appends ``(rule name, arguments)`` and runs the rule.
    """

    @functools.wraps(function)
    def record(self: Any, **arguments: Any) -> Any:
        self.history.append((function.__name__, arguments))
        return function(self, **arguments)

    return record  # type: ignore[return-value]


#: Every run id the machine uses: two named ones and the first two the World mints.
RUNS = ["ra", "rb", "wrun_000001", "wrun_000002"]
STEPS = ["s1", "s2"]
HOOKS = ["h1", "h2"]
TOKENS = ["t1", "t2"]
WAITS = ["w1", "w2"]
STREAMS = ["out", "err"]
QUEUES = ["flow/a", "flow/b", "step/x"]

#: ``(type, correlation id, data)``; timedelta values become ``now + delta`` when used.
Spec = tuple[str, str | None, dict[str, Any]]

#: What an example's swarm may switch off: event types, fence modes, ``seen_seq``.
SWARM_KINDS = (
    "run_started",
    "attr_set",
    "run_completed",
    "run_failed",
    "run_cancelled",
    "step_created",
    "step_started",
    "step_retrying",
    "step_completed",
    "step_failed",
    "hook_created",
    "hook_received",
    "hook_disposed",
    "wait_created",
    "wait_completed",
    "fresh",
    "stale",
    "missing",
    "seen",
)

#: The kinds switched off for a whole example (shared: drawn once per example, by
#: the machine's first rule).  Each kind is off with odds 1/2; shrinking turns them
#: back on.
switched_off = st.shared(
    st.lists(st.booleans(), min_size=len(SWARM_KINDS), max_size=len(SWARM_KINDS)).map(
        lambda bits: frozenset(k for k, off in zip(SWARM_KINDS, bits, strict=True) if off)
    ),
    key="durasim.checkers.world-model.swarm",
)


def _swarmed(*options: tuple[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of ``options`` (``(kind, strategy)``) whose kind this example did not switch off."""

    @functools.cache
    def choose(off: frozenset[str]) -> st.SearchStrategy[Any]:
        kept = [strategy for kind, strategy in options if kind not in off]
        return st.one_of(kept or [strategy for _, strategy in options])

    return switched_off.flatmap(choose)


blobs = st.sampled_from([b"", b"x", b"\x00\xff"])
offsets = st.sampled_from([-5, 0, 5, 30]).map(lambda s: timedelta(seconds=s))


def _spec(type_: str, cids: list[str] | None, **fields: st.SearchStrategy[Any]) -> Any:
    """A strategy of specs; a field named ``opt_<name>`` may be present or absent."""
    required = {k: v for k, v in fields.items() if not k.startswith("opt_")}
    optional = {k[4:]: v for k, v in fields.items() if k.startswith("opt_")}
    return st.tuples(
        st.just(type_),
        st.sampled_from(cids) if cids else st.none(),
        st.fixed_dictionaries(required, optional=optional),
    )


_attr_set = _spec(
    "attr_set",
    None,
    changes=st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from([None, "1", "2"])),
)

_run_started = _spec("run_started", None)
#: Run writes; the run-ending ones are rarer so that runs live long enough to matter.
run_requests = _swarmed(
    ("run_started", _run_started),
    ("run_started", _run_started),
    ("attr_set", _attr_set),
    ("attr_set", _attr_set),
    ("run_completed", _spec("run_completed", None, output=blobs)),
    ("run_failed", _spec("run_failed", None, error=blobs, opt_error_code=st.just("USER_ERROR"))),
    ("run_cancelled", _spec("run_cancelled", None, opt_reason=st.just("stop"))),
)
step_requests = _swarmed(
    (
        "step_created",
        _spec(
            "step_created", STEPS, step_name=st.just("st"), input=blobs, opt_inline=st.booleans()
        ),
    ),
    ("step_started", _spec("step_started", STEPS, opt_owner_message_id=st.just("msg_000001"))),
    ("step_retrying", _spec("step_retrying", STEPS, error=blobs, opt_retry_after=offsets)),
    ("step_completed", _spec("step_completed", STEPS, result=blobs)),
    ("step_failed", _spec("step_failed", STEPS, error=blobs)),
)
hook_requests = _swarmed(
    (
        "hook_created",
        _spec("hook_created", HOOKS, token=st.sampled_from(TOKENS), opt_metadata=blobs),
    ),
    (
        "hook_received",
        _spec("hook_received", HOOKS, payload=blobs, opt_resume_id=st.sampled_from(["x1", "x2"])),
    ),
    ("hook_disposed", _spec("hook_disposed", HOOKS)),
)
wait_requests = _swarmed(
    ("wait_created", _spec("wait_created", WAITS, resume_at=offsets)),
    ("wait_completed", _spec("wait_completed", WAITS, opt_early=st.booleans())),
)
requests = st.one_of(run_requests, step_requests, hook_requests, wait_requests)
_pair = st.sampled_from(STEPS).map(
    lambda s: [("step_created", s, {"step_name": "st", "input": b"i"}), ("step_started", s, {})]
)
batches = st.one_of(st.lists(requests, min_size=1, max_size=3), _pair)

#: Writes raced by concurrent writers.  Each either appends one event or is refused,
#: and a refusal stays a refusal once more events land (no ``run_started``, no
#: resume ids): that is what lets the machine check a race by linearizing it.
race_requests = st.one_of(
    _spec("attr_set", None, changes=st.sampled_from([{"c": "1"}, {"c": "2"}, {"d": None}])),
    _spec("step_created", STEPS, step_name=st.just("st"), input=blobs),
    _spec("step_completed", STEPS, result=blobs),
    _spec("hook_received", HOOKS, payload=blobs),
    _spec("hook_disposed", HOOKS),
    _spec("wait_created", WAITS, resume_at=offsets),
    _spec("wait_completed", WAITS, early=st.just(True)),
    _spec("run_completed", None, output=blobs),
    _spec("run_cancelled", None),
)

#: How a write is fenced: out-of-band, in-band with the current count, with a
#: stale count, or in-band without a count (refused as malformed).
fences = _swarmed(
    *((kind, st.just(kind)) for kind in ["out", "out", "out", "fresh", "fresh", "stale", "missing"])
)
#: Mostly runs that exist (the machine starts with ra running and rb pending).
targets = st.sampled_from(["ra", "ra", "ra", "ra", "rb", "rb", "wrun_000001", "wrun_000002"])
seen = _swarmed(("none", st.none()), ("seen", st.integers(0, 8)))


@attrs.frozen
class BadCall:
    """A malformed call both Worlds must refuse alike, and the feature it needs."""

    call: Callable[[World], Awaitable[Any]]
    needs: str | None = None

    def __repr__(self) -> str:
        # Shown in Hypothesis's reproduction: name the call, not a lambda address.
        return f"BadCall({self.call.__doc__ or self.call.__name__})"


def _named(doc: str, call: Callable[[World], Awaitable[Any]]) -> Callable[[World], Awaitable[Any]]:
    call.__doc__ = doc
    return call


BAD_CALLS = [
    BadCall(
        _named(
            "step_completed with a str result",
            lambda w: w.events.create(
                "ra",
                EventRequest(type="step_completed", correlation_id="s1", data={"result": "s"}),  # type: ignore[arg-type]
            ),
        )
    ),
    BadCall(
        _named(
            "run id with a space",
            lambda w: w.events.create("a b", EventRequest.of("run_started")),
        )
    ),
    BadCall(
        _named(
            "run id with SQL in it",
            lambda w: w.events.create(
                "x'; DROP TABLE events;--",
                EventRequest.of("run_created", workflow_name="w", input=b""),
            ),
        )
    ),
    BadCall(
        _named(
            "a noop request",
            lambda w: w.events.create("ra", EventRequest(type="noop")),  # type: ignore[arg-type]
        )
    ),
    BadCall(_named("an empty batch", lambda w: w.events.create_batch("ra", [])), "batch"),
    BadCall(
        _named("enqueue a str", lambda w: w.queue.enqueue("flow/a", "text")),  # type: ignore[arg-type]
        "queue",
    ),
    BadCall(
        _named(
            "write a bytearray chunk",
            lambda w: w.streams.write("ra", "out", bytearray(b"x")),  # type: ignore[arg-type]
        ),
        "streams",
    ),
    # Not malformed: an empty status filter must match nothing in both.
    BadCall(_named("list runs with status=[]", lambda w: w.runs.list(status=[]))),
]


async def outcome(call: Awaitable[Any]) -> tuple[Any, ...]:
    """``("ok", value)`` or ``("error", type, facts)``: an answer as the machine compares it.

    Errors are compared by type and structured facts, never by message.
    """
    try:
        return ("ok", await call)
    except WorldError as exc:
        return ("error", type(exc), exc.facts)


async def observe(world: World, capabilities: Capabilities) -> dict[str, Any]:
    """Everything observable about the machine's ids, read in one pass.

    Per-run reads cover the runs the World lists; reads of a run it does not
    list are compared by the ``read`` rule.
    """
    seen_: dict[str, Any] = {}
    runs = seen_["runs.list"] = await outcome(world.runs.list(limit=100))
    listed = {run.run_id for run in runs[1].runs} if runs[0] == "ok" else set()
    for run_id in RUNS:
        if run_id not in listed:
            continue
        seen_[f"events.list({run_id})"] = await outcome(world.events.list(run_id))
        seen_[f"runs.get({run_id})"] = await outcome(world.runs.get(run_id))
        seen_[f"steps.list({run_id})"] = await outcome(world.steps.list(run_id))
        seen_[f"hooks.list({run_id})"] = await outcome(world.hooks.list(run_id))
        seen_[f"waits.list({run_id})"] = await outcome(world.waits.list(run_id))
        if capabilities.streams:
            names = await outcome(world.streams.list(run_id))
            seen_[f"streams.list({run_id})"] = names
            for name in names[1] if names[0] == "ok" else ():
                read = world.streams.read(run_id, name, limit=1000)
                seen_[f"streams.read({run_id}, {name})"] = await outcome(read)
    for token in TOKENS:
        seen_[f"hooks.get_by_token({token})"] = await outcome(world.hooks.get_by_token(token))
    if capabilities.queue:
        seen_["queue.messages"] = await outcome(world.queue.messages())
        seen_["queue.dead_letters"] = await outcome(world.queue.dead_letters())
        seen_["queue.next_due"] = await outcome(world.queue.next_due())
    return seen_
