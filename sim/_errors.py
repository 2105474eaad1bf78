"""The simulator's errors.

::

    DurasimError
    ├── WorldError
    │   └── InjectedFault            a World call failed on purpose (transient fault)
    └── SimError                     the simulation itself cannot go on as asked
        ├── AlreadyPassedError       a hold asked for a point the writer already passed
        ├── HoldNeverReached         the simulation went quiet before a hold or until fired
        ├── BudgetExceeded           deliveries, virtual time or wall time ran out
        └── SimDeadlock              the script waits on something outside the simulation

:class:`Crashed` is a control-flow signal (``BaseException``): it unwinds a
delivery the simulator crashed, and is never seen by the script.
:class:`WallBudgetInterrupt` is another (a ``SystemExit``, see there): the
wall-time watchdog raises it in code that never yields; the Sim turns it into
a budget halt.
"""

from __future__ import annotations

from durasim.worlds import DurasimError, WorldError

__all__ = [
    "AlreadyPassedError",
    "BudgetExceeded",
    "Crashed",
    "HoldNeverReached",
    "InjectedFault",
    "QueueContractBroken",
    "QueueModeUnsupported",
    "SimDeadlock",
    "SimError",
    "WallBudgetInterrupt",
]


class SimError(DurasimError):
    """Root of the simulator's own errors."""


class AlreadyPassedError(SimError):
    """A hold asked for a point its writer already passed: it would never fire."""


class HoldNeverReached(SimError):
    """Nothing is left to run, and the awaited hold or ``until`` has not fired."""


class BudgetExceeded(SimError):
    """A budget (deliveries, virtual time, wall time) ran out."""


class SimDeadlock(SimError):
    """The script awaits something no simulated task will ever do."""


class QueueContractBroken(SimError):
    """The World's own queue broke its contract under the simulated runtime (``queue="world"``).

    Raised (and the simulation halted) at the first answer of the World's queue
    that contradicts what it was asked (docs/protocol.md section 11): an acked
    message claimed again, a claimed message lost, a message due before its
    delay, an idempotency key that queued a second message, a lease refused to
    its holder or kept by one that lost it, a wrong ``next_due``.

    Attributes:
        check: which rule broke (``redelivered``, ``lost``, ``delay``, ``idempotency``,
            ``lease``, ``next_due``, ``order``).
    """

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


class QueueModeUnsupported(SimError):
    """A script asked ``queue="world"`` for what only the simulator's queue can do.

    Dropping or delaying a queued message, opening a run's gate without
    redelivering, or delivering a message out of the World's claim order: run
    the script with ``Sim(queue="sim")``.
    """


class InjectedFault(WorldError):
    """A transient World failure injected by the simulator; nothing was written."""


class Crashed(BaseException):
    """A control-flow signal: unwinds a delivery the simulator crashed (its process 'died').

    A ``BaseException`` so that no ``except Exception`` in workflow, step or runtime
    code records it as a failure: a crashed process records nothing.
    """

    #: Not a step's or workflow's outcome: the runtime lets it propagate.
    durasim_passthrough = True


class WallBudgetInterrupt(SystemExit):
    """A control-flow signal raised in the simulation's thread by its watchdog.

    The wall budget passed mid-code.  A ``SystemExit`` on purpose: asyncio re-raises
    ``SystemExit`` out of tasks and callbacks instead of storing it as a task's
    outcome, so it unwinds workflow code, the replay engine and the delivery up to
    :meth:`Sim.run_sync` without being recorded as the workflow's (or a step's)
    failure, as a dying process would.  The Sim catches it there and halts with a
    report; scripts never see it.
    """

    #: Not a step's or workflow's outcome: the runtime lets it propagate.
    durasim_passthrough = True
