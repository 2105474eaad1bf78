"""The harness of an explored example: start the run, act from outside, drive it to rest.

:func:`drive` is what every example runs, and what a printed regression script
calls: it starts the workflow as an external writer, sends each hook payload
at its interception point (or, for point 0, once the run waits for it),
cancels the run at its point if asked, wakes its sleeps early at its points
(``Run.wake_up()``, racing whatever delivery is completing them), and drives
the simulation until nothing can run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from durasim.runtime.lowlevel import change_code
from durasim.sim import HoldNeverReached, Match, Point, RunOutcome, Sim
from durasim.worlds import EntityConflict, HookNotFound

from ._sometimes import sometimes

__all__ = ["drive"]


async def drive(
    sim: Sim,
    workflow: Callable[..., Any],
    *args: Any,
    hooks: Sequence[tuple[str, Any]] = (),
    hook_points: Sequence[int] = (),
    cancel_at: int = 0,
    wake_up_at: Sequence[int] = (),
    upgrade: Callable[..., Any] | None = None,
    upgrade_at: int = 0,
    code: contextlib.ExitStack | None = None,
) -> RunOutcome:
    """Run ``workflow(*args)`` in ``sim`` with external actions at chosen points.

    Args:
        sim: a fresh simulation.
        workflow: the workflow function; ``args`` its arguments.
        hooks: ``(token, payload)`` pairs to send with ``resume_hook``.
        hook_points: per hook, the interception point (its ordinal, counted over
            the whole simulation) at which it is sent; 0 or a missing entry:
            once the run waits for it.  A hook not created yet when its point
            comes is sent once the run waits for it.
        cancel_at: cancel the run at this interception point (0: never).
        wake_up_at: call ``Run.wake_up()`` (complete every open sleep now) at
            each of these interception points.
        upgrade: the workflow's next version (docs/versioning.md): at point
            ``upgrade_at`` "the code changes here": every delivery from then on
            replays the run on ``upgrade``'s code (``change_code``), as a worker
            of the new deployment would; deliveries under way finish on the old.
        upgrade_at: the interception point of the upgrade (0: at the start).
        code: where the upgrade is entered (the caller restores the old code
            when it closes it, after judging the run on the new one); without
            it, the old code is back when ``drive`` returns.

    Returns:
        The run's outcome once nothing can run any more.
    """
    if code is None:
        with contextlib.ExitStack() as own:
            return await drive(
                sim,
                workflow,
                *args,
                hooks=hooks,
                hook_points=hook_points,
                cancel_at=cancel_at,
                wake_up_at=wake_up_at,
                upgrade=upgrade,
                upgrade_at=upgrade_at,
                code=own,
            )
    if upgrade is not None and upgrade_at <= 0:
        code.enter_context(change_code(workflow, upgrade))
    run = await sim.start(workflow, *args)
    timed: list[tuple[int, int, str, Any]] = []  # (point, order, token or action, payload)
    late: list[tuple[str, Any]] = []
    for index, (token, payload) in enumerate(hooks):
        point = hook_points[index] if index < len(hook_points) else 0
        if point > 0:
            timed.append((point, index, token, payload))
        else:
            late.append((token, payload))
    if cancel_at > 0:
        timed.append((cancel_at, len(hooks), _CANCEL, None))
    timed += [(point, len(hooks) + 1 + i, _WAKE_UP, None) for i, point in enumerate(wake_up_at)]
    if upgrade is not None and upgrade_at > 0:
        timed.append((upgrade_at, len(hooks) + 1 + len(wake_up_at), _UPGRADE, None))
    for point, _, token, payload in sorted(timed, key=lambda t: (t[0], t[1])):
        with contextlib.suppress(HoldNeverReached):  # all came to rest before it: act now
            await sim.until(Match(phase=None, where=_from(point)))
        if token is _CANCEL:
            sometimes("explore: cancel sent", await _cancel(sim, run.run_id))
        elif token is _UPGRADE:
            assert upgrade is not None
            code.enter_context(change_code(workflow, upgrade))
            sometimes("explore: the code changed mid-run", True)
        elif token is _WAKE_UP:
            sometimes("explore: sleep woken early", await sim.wake_up(run.run_id) > 0)
        elif not await _send(sim, token, payload):
            late.append((token, payload))
    idle = await sim.run_until_idle()
    while late:
        sent = [hook for hook in late if await _send(sim, *hook)]
        if not sent:
            break
        late = [hook for hook in late if hook not in sent]
        idle = await sim.run_until_idle()
    return await sim.outcome(run.run_id, idle=idle)


#: Actions at a point that are not hook payloads (compared by identity).
_CANCEL = "\x00cancel"
_WAKE_UP = "\x00wake_up"
_UPGRADE = "\x00upgrade"


def _from(point: int) -> Callable[[Point], bool]:
    return lambda p: p.ordinal >= point


async def _send(sim: Sim, token: str, payload: Any) -> bool:
    """Send a payload the way a client retrying its HTTP call does: twice, at once, one resume id.

    A World must collapse the two onto one event (docs/protocol.md §6); a World
    whose resume dedup is not atomic lands both, which the invariants report.
    """
    resume_id = f"explore:{token}:{sim.clock.micros}"
    sent = await asyncio.gather(
        sim.deliver_hook(token, payload, resume_id=resume_id),
        sim.deliver_hook(token, payload, resume_id=resume_id),
        return_exceptions=True,
    )
    for result in sent:
        if isinstance(result, HookNotFound):
            return False
        if isinstance(result, BaseException):
            raise result
    sometimes("explore: hook sent", True)
    return True


async def _cancel(sim: Sim, run_id: str) -> bool:
    try:
        return await sim.cancel_run(run_id, "cancelled by explore()")
    except EntityConflict:
        return False  # the run had ended
