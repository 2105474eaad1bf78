"""The concurrency checker's workload: seeded groups of operations across facets.

A *group* is a few serial set-up calls, a handful of concurrent calls racing
on the same runs, tokens and streams, and serial final reads of everything the
group touched.  Each kind of group targets one family of races:

========== ==================================================================
lifecycle  two creators of one run id, a start and a cancel racing them
terminal   concurrent terminal writes to one run (complete, fail, cancel)
steps      outcomes and restarts of one step, duplicate step creates
tokens     hooks of several runs created with one token (and its release)
resumes    resumes of one hook with and without a shared ``resume_id``
batches    batches racing single writes and readers paging the log
reads      writers appending while readers page the log and read the run
streams    several writers appending to one stream, a close, readers
fence      in-band writers holding one count, with out-of-band writers
========== ==================================================================

Calls are built with local names (runs ``ra``, ``rb``, ``rc``; token ``t``) and
bound to concrete ids when the group runs (``c12-ra``), so a group can run again
under fresh ids while it is shrunk.  Facets a World lacks (``batch``,
``streams``, ``in_band_fence``, ``hook_resume_dedup``) are left out of its
workload.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import attrs

from durasim.worlds import Capabilities, EventRequest

from ._linear import Call

__all__ = ["KINDS", "Group", "Op", "Req", "applicable_kinds", "make_group"]


@attrs.frozen
class Req:
    """An event request with local names, made concrete by :meth:`build`.

    A ``token`` gets the group's prefix; a ``timedelta`` field becomes that long
    after the clock's now.
    """

    type: str
    cid: str | None = None
    data: tuple[tuple[str, Any], ...] = ()

    def build(self, prefix: str, now: datetime) -> EventRequest:
        """The concrete request."""
        data = {key: _local(key, value, prefix, now) for key, value in self.data}
        return EventRequest.of(self.type, self.cid, **data)


def _local(key: str, value: Any, prefix: str, now: datetime) -> Any:
    if key == "token":
        return f"{prefix}-{value}"
    if isinstance(value, timedelta):
        return now + value
    return value


def _req(type_: str, cid: str | None = None, **data: Any) -> Req:
    return Req(type_, cid, tuple(data.items()))


@attrs.frozen(kw_only=True)
class Op:
    """One call of a group with local names, and where and when it starts.

    Attributes:
        method, args, options: as in :class:`Call`; ``args[0]`` is a local run
            name (a local token for ``hooks.get_by_token``).
        lane: which open World instance issues it (modulo their number).
        delay: loop turns it waits before it is invoked.
    """

    method: str
    args: tuple[Any, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    lane: int = 0
    delay: int = 0

    def bind(self, prefix: str, now: datetime) -> Call:
        """The concrete call, ids prefixed with ``prefix``."""
        args = [_bound(n, arg, prefix, now) for n, arg in enumerate(self.args)]
        options = tuple(
            (key, now + value if isinstance(value, timedelta) else value)
            for key, value in self.options
        )
        return Call(method=self.method, args=tuple(args), options=options)


def _bound(position: int, arg: Any, prefix: str, now: datetime) -> Any:
    if position == 0 and isinstance(arg, str):
        return f"{prefix}-{arg}"
    if isinstance(arg, Req):
        return arg.build(prefix, now)
    if isinstance(arg, list) and arg and isinstance(arg[0], Req):
        return [r.build(prefix, now) for r in arg]
    return arg


@attrs.frozen(kw_only=True)
class Group:
    """A group: serial set-up, concurrent calls (in start order), serial final reads."""

    kind: str
    number: int
    setup: tuple[Op, ...]
    concurrent: tuple[Op, ...]
    final: tuple[Op, ...]

    def without(self, phase: str, position: int) -> Group:
        """The group without one op of ``phase`` (``setup``, ``concurrent`` or ``final``)."""
        ops = getattr(self, phase)
        return attrs.evolve(self, **{phase: ops[:position] + ops[position + 1 :]})


class _Builder:
    """Collects a group's ops; tracks each run's counts after the set-up."""

    def __init__(self, rng: random.Random, caps: Capabilities) -> None:
        self.rng = rng
        self.caps = caps
        self.setup: list[Op] = []
        self.concurrent: list[Op] = []
        self.runs: list[str] = []
        self.tokens: list[str] = []
        self.streams: list[tuple[str, str]] = []
        self.length: dict[str, int] = {}
        self.in_band: dict[str, int] = {}

    def run(self, run_id: str, *, start: bool = True) -> None:
        self.runs.append(run_id)
        created = _req("run_created", workflow_name="wf", input=b"in")
        self.setup.append(Op(method="events.create", args=(run_id, created)))
        self.length[run_id], self.in_band[run_id] = 1, 1
        if start:
            self.prepare(run_id, _req("run_started"))

    def prepare(self, run_id: str, request: Req) -> None:
        """A serial set-up write (out-of-band)."""
        self.setup.append(Op(method="events.create", args=(run_id, request)))
        self.length[run_id] += 1

    def race(self, method: str, *args: Any, **options: Any) -> None:
        """One concurrent call."""
        self.concurrent.append(
            Op(
                method=method,
                args=args,
                options=tuple(options.items()),
                lane=self.rng.randrange(8),
                delay=self.rng.choice((0, 0, 1)),
            )
        )

    def fence(self, run_id: str) -> dict[str, Any]:
        """Options of a write: out-of-band, or in-band with the current (or a stale) count.

        Some also carry ``seen_seq``, ``expected_seq`` (strict) or ``occurred_at``.
        """
        options: dict[str, Any] = {}
        if self.caps.in_band_fence and self.rng.random() < 0.35:
            count = self.in_band[run_id]
            if self.rng.random() < 0.2:
                count -= 1
            options = {"in_band": True, "expected_seq_in_band": count}
            if self.rng.random() < 0.25:  # the time the workflow saw
                options["occurred_at"] = timedelta(seconds=-1)
        if self.rng.random() < 0.25:
            options["seen_seq"] = self.rng.randint(0, self.length[run_id])
        # a strict write (refused once the log moved), if the World declares them; the
        # draw is made either way, so a seed's workload is otherwise the same
        if self.rng.random() < 0.15 and self.caps.conditional_writes:
            options["expected_seq"] = self.length[run_id] - (self.rng.random() < 0.3)
        return options

    def write(self, run_id: str, request: Req, *, fenced: bool = True) -> None:
        """A concurrent ``events.create`` (none of ``attr_set`` if the World declares none)."""
        if request.type == "attr_set" and not self.caps.attr_set:
            return
        self.race("events.create", run_id, request, **(self.fence(run_id) if fenced else {}))

    def batch(self, run_id: str, requests: list[Req]) -> None:
        """A concurrent ``events.create_batch``."""
        self.race("events.create_batch", run_id, requests, **self.fence(run_id))

    def page(self, run_id: str) -> None:
        """A concurrent reader of the log: a page from some position, of some size."""
        after = self.rng.choice((0, 0, max(0, self.length[run_id] - 1), self.length[run_id]))
        limit = self.rng.choice((1, 2, 1000, 1000))
        self.race("events.list", run_id, after_seq=after, limit=limit)

    def readers(self, run_id: str, count: int) -> None:
        """``count`` concurrent readers of the run: pages, the run, its steps."""
        for _ in range(count):
            what = self.rng.choice(("page", "page", "run", "steps"))
            if what == "page":
                self.page(run_id)
            elif what == "run":
                self.race("runs.get", run_id)
            else:
                self.race("steps.list", run_id)

    def finish(self, kind: str, number: int) -> Group:
        final: list[Op] = []
        for run_id in self.runs:
            final.append(Op(method="events.list", args=(run_id,)))
            final.append(Op(method="runs.get", args=(run_id,)))
            final.append(Op(method="steps.list", args=(run_id,)))
            final.append(Op(method="hooks.list", args=(run_id,)))
        for token in self.tokens:
            final.append(Op(method="hooks.get_by_token", args=(token,)))
        for run_id, name in self.streams:
            final.append(Op(method="streams.read", args=(run_id, name), options=(("limit", 1000),)))
        # Final reads go through every World instance in turn (lanes 0, 1 ...).
        final = [attrs.evolve(op, lane=i) for i, op in enumerate(final)]
        concurrent = list(self.concurrent)
        self.rng.shuffle(concurrent)  # the order the calls are started in
        return Group(
            kind=kind,
            number=number,
            setup=tuple(self.setup),
            concurrent=tuple(concurrent),
            final=tuple(final),
        )


# -- the kinds of groups -----------------------------------------------------------------


#: The token every hook of a group asks for (prefixed like the run ids).
_TOKEN = "t"  # noqa: S105 -- a hook token, not a secret


def _lifecycle(b: _Builder) -> None:
    for data in (b"i1", b"i2"):
        b.race("events.create", "ra", _req("run_created", workflow_name="wf", input=data))
    b.runs.append("ra")
    if b.rng.random() < 0.7:
        b.race("events.create", "ra", _req("run_started"))
    if b.rng.random() < 0.5:
        b.race("events.create", "ra", _req("run_cancelled", reason="stop"))
    b.race("runs.get", "ra")


def _terminal(b: _Builder) -> None:
    b.run("ra", start=b.rng.random() < 0.85)
    ends = [
        _req("run_completed", output=b"o1"),
        _req("run_completed", output=b"o2"),
        _req("run_failed", error=b"e"),
        _req("run_cancelled", reason="stop"),
        _req("run_cancelled", reason="again"),
    ]
    if b.rng.random() < 0.35:  # a wait completed early while the run ends (and releases it)
        b.prepare("ra", _req("wait_created", "w1", resume_at=timedelta(seconds=5)))
        b.write("ra", _req("wait_completed", "w1", early=True))
    for request in b.rng.sample(ends, b.rng.randint(2, 3)):
        b.write("ra", request)
    if b.rng.random() < 0.3:
        b.write("ra", _req("step_created", "s1", step_name="st", input=b"i"))
    b.readers("ra", b.rng.randint(1, 2))


def _steps(b: _Builder) -> None:
    b.run("ra")
    b.prepare("ra", _req("step_created", "s1", step_name="st", input=b"i"))
    if b.rng.random() < 0.7:
        b.prepare("ra", _req("step_started", "s1"))
    outcomes = [
        _req("step_completed", "s1", result=b"r1"),
        _req("step_completed", "s1", result=b"r2"),
        _req("step_failed", "s1", error=b"e"),
    ]
    others = [
        _req("step_started", "s1"),
        _req("step_retrying", "s1", error=b"e", retry_after=timedelta(0)),
        _req("step_created", "s2", step_name="st", input=b"i"),
        _req("step_created", "s2", step_name="st", input=b"j"),
        _req("step_created", "s1", step_name="st", input=b"i"),
    ]
    picked = b.rng.sample(outcomes, b.rng.choice((1, 2, 2, 3)))
    picked += b.rng.sample(others, b.rng.randint(max(0, 2 - len(picked)), 2))
    for request in picked:
        b.write("ra", request)
    b.race("steps.get", "ra", "s1")
    b.readers("ra", b.rng.randint(0, 1))


def _tokens(b: _Builder) -> None:
    runs = ["ra", "rb", "rc"][: b.rng.choice((2, 2, 3))]
    for run_id in runs:
        b.run(run_id)
    b.tokens.append(_TOKEN)
    held = b.rng.random() < 0.4
    if held:  # ra's h0 holds the token; released while the others ask for it
        b.prepare("ra", _req("hook_created", "h0", token=_TOKEN))
        if b.rng.random() < 0.5:
            b.write("ra", _req("hook_disposed", "h0"), fenced=False)
        else:
            b.write("ra", _req("run_completed", output=b"o"), fenced=False)
    for run_id in runs:
        b.write(run_id, _req("hook_created", "h1", token=_TOKEN), fenced=False)
    if b.rng.random() < 0.5:
        b.write(runs[0], _req("hook_created", "h2", token=_TOKEN), fenced=False)
    b.race("hooks.get_by_token", _TOKEN)


def _resumes(b: _Builder) -> None:
    b.run("ra")
    b.tokens.append(_TOKEN)
    b.prepare("ra", _req("hook_created", "h1", token=_TOKEN))
    ids = ["x", "x", "y", None] if b.caps.hook_resume_dedup else [None]
    for n in range(b.rng.randint(2, 4)):
        resume_id = b.rng.choice(ids)
        data: dict[str, Any] = {"payload": f"p{n}".encode()}
        if resume_id is not None:
            data["resume_id"] = resume_id
        b.write("ra", _req("hook_received", "h1", **data), fenced=False)
    if b.caps.hook_resume_dedup and b.rng.random() < 0.5:
        b.write("ra", _req("hook_received", "h1", payload=b"p", resume_id="x"), fenced=False)
    if b.rng.random() < 0.25:
        b.write("ra", _req("hook_disposed", "h1"), fenced=False)
    if b.rng.random() < 0.2:
        b.write("ra", _req("run_completed", output=b"o"))
    b.race("hooks.get", "ra", "h1")
    b.readers("ra", b.rng.randint(0, 1))


def _batches(b: _Builder) -> None:
    b.run("ra")
    b.prepare("ra", _req("step_created", "s1", step_name="st", input=b"i"))
    b.prepare("ra", _req("step_started", "s1"))
    batches = [
        [
            _req("step_completed", "s1", result=b"r"),
            _req("step_created", "s2", step_name="st", input=b"i"),
        ],
        [_req("step_created", "s2", step_name="st", input=b"j"), _req("step_started", "s2")],
        [
            _req("step_created", "s3", step_name="st", input=b"i"),
            _req("wait_created", "w1", resume_at=timedelta(seconds=5)),
            _req("step_created", "s4", step_name="st", input=b"i"),
        ],
        [_req("step_failed", "s1", error=b"e"), _req("wait_created", "w1", resume_at=timedelta(0))],
    ]
    for requests in b.rng.sample(batches, b.rng.randint(1, 2)):
        b.batch("ra", requests)
    singles = [
        _req("step_created", "s2", step_name="st", input=b"k"),
        _req("attr_set", changes={"a": "1"}),
        _req("run_completed", output=b"o"),
    ]
    for request in b.rng.sample(singles, b.rng.randint(0, 1)):
        b.write("ra", request)
    for _ in range(b.rng.randint(2, 3)):
        b.page("ra")


def _reads(b: _Builder) -> None:
    b.run("ra")
    for n in range(b.rng.randint(0, 2)):
        b.prepare("ra", _req("step_created", f"s{n}", step_name="st", input=b"i"))
    writes = [
        _req("attr_set", changes={"a": "1"}),
        _req("attr_set", changes={"b": "2"}),
        _req("step_created", "s5", step_name="st", input=b"i"),
        _req("step_created", "s6", step_name="st", input=b"i"),
        _req("wait_created", "w1", resume_at=timedelta(seconds=5)),
    ]
    for request in b.rng.sample(writes, b.rng.randint(2, 3)):
        b.write("ra", request)
    for _ in range(b.rng.randint(2, 3)):
        b.page("ra")
    b.readers("ra", 1)
    if b.rng.random() < 0.5:
        b.race("events.get", "ra", b.length["ra"] + 1)


def _streams(b: _Builder) -> None:
    b.run("ra", start=b.rng.random() < 0.5)
    b.streams.append(("ra", "out"))
    for n in range(b.rng.randint(2, 4)):
        chunks: Any = f"c{n}".encode()
        if b.rng.random() < 0.4:
            chunks = [f"c{n}a".encode(), f"c{n}b".encode()]
        b.race("streams.write", "ra", "out", chunks)
    if b.rng.random() < 0.25:
        b.race("streams.close", "ra", "out")
    for _ in range(b.rng.randint(1, 2)):
        start = b.rng.choice((0, 0, 1, -1))
        b.race("streams.read", "ra", "out", start=start, limit=b.rng.choice((1, 100)))
    if b.rng.random() < 0.5:
        b.race("streams.info", "ra", "out")


def _fence(b: _Builder) -> None:
    b.run("ra")
    count = b.in_band["ra"]
    writes = [
        _req("attr_set", changes={"c": "1"}),
        _req("attr_set", changes={"c": "2"}),
        _req("step_created", "s1", step_name="st", input=b"i"),
        _req("step_created", "s2", step_name="st", input=b"i"),
        _req("wait_created", "w1", resume_at=timedelta(seconds=5)),
    ]
    for request in b.rng.sample(writes, b.rng.randint(2, 3)):
        b.race("events.create", "ra", request, in_band=True, expected_seq_in_band=count)
    if b.rng.random() < 0.6:
        b.write("ra", _req("attr_set", changes={"d": "1"}), fenced=False)
    b.readers("ra", 1)


#: Each kind of group, with the capability it needs (``None``: every World).
KINDS: dict[str, tuple[Callable[[_Builder], None], str | None]] = {
    "lifecycle": (_lifecycle, None),
    "terminal": (_terminal, None),
    "steps": (_steps, None),
    "tokens": (_tokens, None),
    "resumes": (_resumes, None),
    "batches": (_batches, "batch"),
    "reads": (_reads, None),
    "streams": (_streams, "streams"),
    "fence": (_fence, "in_band_fence"),
}


def applicable_kinds(caps: Capabilities, only: str | None = None) -> list[str]:
    """The kinds of groups a World with ``caps`` runs (those named like ``only``)."""
    return [
        name
        for name, (_, needs) in KINDS.items()
        if (needs is None or getattr(caps, needs)) and (not only or only in name)
    ]


def make_group(seed: int, number: int, caps: Capabilities, kinds: list[str]) -> Group:
    """Group ``number`` of the run seeded ``seed``: same arguments, same group."""
    rng = random.Random(f"durasim-concurrency:{seed}:{number}")  # noqa: S311 -- replayable
    kind = kinds[(seed + number) % len(kinds)]  # in turn: every kind runs as often
    builder = _Builder(rng, caps)
    KINDS[kind][0](builder)
    return builder.finish(kind, number)
