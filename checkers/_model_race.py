"""The World model machine's race rule (a part of :class:`WorldModel`).

A mixin, like :mod:`._model_queue`: Hypothesis collects a machine's rules by
name across its bases.  The state it uses (both Worlds, the clock, the loop) is
:class:`WorldModel`'s.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from durasim.worlds import Capabilities, EventRequest, EventResult, MemoryWorld, World, WorldError

from . import _model_ops as ops
from ._model_ops import recorded

__all__: list[str] = []

_T = TypeVar("_T")


def _create(
    run_id: str | None, request: EventRequest, **options: Any
) -> Callable[[World], Awaitable[EventResult]]:
    """A call of ``events.create`` to apply to either World."""

    def create(world: World) -> Awaitable[EventResult]:
        return world.events.create(run_id, request, **options)

    return create


class _RaceRules:
    """Concurrent writers on one run, linearized on the reference."""

    if TYPE_CHECKING:  # WorldModel's state and methods, which this rule uses
        caps: Capabilities
        reference: MemoryWorld
        subject: World
        dirty: bool

        def _run(self, call: Awaitable[_T]) -> _T: ...
        def _count(self, run_id: str, fence: str) -> int: ...
        def _request(self, spec: ops.Spec) -> EventRequest: ...
        def declares(self, spec: ops.Spec) -> bool: ...
        def differs(self, what: str, expected: Any, actual: Any) -> NoReturn: ...

    # A race is judged by the refusals it may get: a World that does not
    # promise the lifecycle refusals cannot be judged this way.
    @precondition(lambda self: self.caps.in_band_fence and self.caps.strict_lifecycles)
    @rule(
        run_id=ops.targets,
        writers=st.lists(
            st.tuples(ops.race_requests, st.sampled_from(["fresh", "fresh", "stale", "out"])),
            min_size=2,
            max_size=4,
        ),
    )
    @recorded
    def race(self, run_id: str, writers: list[tuple[ops.Spec, str]]) -> None:
        """Concurrent writers, in-band ones holding the same (or a stale) count.

        The subject runs them concurrently; the race is then linearized on the
        reference.  The writers that appended replay one by one in the subject's
        commit order and must get the same answers.  Each of the others (refused,
        or accepted without appending) must get its answer, facts included, at
        some point of that order: it may have been decided before, between or
        after the appends (dry runs on copies of the reference).
        """
        writers = [(spec, fence) for spec, fence in writers if self.declares(spec)]
        fresh = self._count(run_id, "fresh")
        calls: list[Callable[[World], Awaitable[EventResult]]] = []
        for spec, fence in writers:
            request = self._request(spec)
            kwargs: dict[str, Any] = {}
            if fence != "out":
                count = fresh if fence == "fresh" else self._count(run_id, "stale")
                kwargs = {"in_band": True, "expected_seq_in_band": count}
            calls.append(_create(run_id, request, **kwargs))

        async def concurrently(world: World) -> list[Any]:
            return await asyncio.gather(*(c(world) for c in calls), return_exceptions=True)

        answers: list[tuple[Any, ...]] = []
        self.dirty = True
        for answer in self._run(concurrently(self.subject)):
            if isinstance(answer, WorldError):
                answers.append(("error", type(answer), answer.facts))
            elif isinstance(answer, BaseException):
                raise answer
            else:
                answers.append(("ok", answer))
        appended = [i for i, a in enumerate(answers) if a[0] == "ok" and a[1].allocated]
        appended.sort(key=lambda i: answers[i][1].event.seq)
        floating = [i for i in range(len(answers)) if i not in appended]

        def what(i: int) -> str:
            return (
                f"a race on {run_id!r} (writer {i} of {writers}; in-band count {fresh}; "
                f"appended in the order {appended})"
            )

        points: list[MemoryWorld] = []
        for i in appended:
            if floating:
                points.append(copy.deepcopy(self.reference))
            expected = self._run(ops.outcome(calls[i](self.reference)))
            if expected != answers[i]:
                self.differs(what(i), expected, answers[i])
        points.append(self.reference)
        for i in floating:
            # Latest point first: most refusals still hold at the end.
            tried = []
            for point in reversed(points):
                # Named, not a temporary: a World's facets hold it weakly (worlds/_facet.py),
                # so the copy must live until the call it makes has run.
                trial = copy.deepcopy(point)
                tried.append(self._run(ops.outcome(calls[i](trial))))
            if answers[i] not in tried:
                self.differs(f"{what(i)}, at any point of the race", tried, answers[i])
