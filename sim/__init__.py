"""durasim.sim: the runtime in virtual time, with every World call a schedulable point.

A :class:`Sim` runs the real runtime (``Engine.handle()``, ``run_queued_step()``,
``resume_hook()``, ``Run.cancel()``) over any World, on a loop whose time is
virtual, and decides at every World call which task goes next: FIFO, a seeded
RNG, or a caller-provided choice sequence.  Scripts hold writers at chosen
points, inject faults, and read a byte-stable trace.  See docs/simulator.md.
"""

from durasim.worlds._public import publish as _publish

from ._calls import Rejection
from ._choices import (
    CHOICE_KINDS,
    ChoiceSource,
    FifoChoices,
    LabeledChoiceSource,
    SeededChoices,
    SequenceChoices,
    as_choice_source,
)
from ._clock import SimClock
from ._errors import (
    AlreadyPassedError,
    BudgetExceeded,
    Crashed,
    HoldNeverReached,
    InjectedFault,
    QueueContractBroken,
    QueueModeUnsupported,
    SimDeadlock,
    SimError,
    WallBudgetInterrupt,
)
from ._faults import FAULT_KINDS, FaultKind
from ._loop import SimLoop
from ._points import Match, Point, Writer, WriterPattern, step_short_name
from ._queue import SimQueue
from ._reports import IdleReport, RunOutcome, RunStall, SimSnapshot, StallReport, StuckCode
from ._scheduler import Scheduler
from ._sim import DeferredCommit, Hold, Sim, WriterHandle, simulate
from ._trace import Trace, TraceEntry
from ._world import SimWorld
from ._world_queue import QUEUE_MODES, WorldQueue

__all__ = [
    "CHOICE_KINDS",
    "FAULT_KINDS",
    "QUEUE_MODES",
    "AlreadyPassedError",
    "BudgetExceeded",
    "ChoiceSource",
    "Crashed",
    "DeferredCommit",
    "FaultKind",
    "FifoChoices",
    "Hold",
    "HoldNeverReached",
    "IdleReport",
    "InjectedFault",
    "LabeledChoiceSource",
    "Match",
    "Point",
    "QueueContractBroken",
    "QueueModeUnsupported",
    "Rejection",
    "RunOutcome",
    "RunStall",
    "Scheduler",
    "SeededChoices",
    "SequenceChoices",
    "Sim",
    "SimClock",
    "SimDeadlock",
    "SimError",
    "SimLoop",
    "SimQueue",
    "SimSnapshot",
    "SimWorld",
    "StallReport",
    "StuckCode",
    "Trace",
    "TraceEntry",
    "WallBudgetInterrupt",
    "WorldQueue",
    "Writer",
    "WriterHandle",
    "WriterPattern",
    "as_choice_source",
    "simulate",
    "step_short_name",
]

_publish(__name__, globals(), __all__)
