"""The one answer to "what is running now": workflow code, a step body, or neither.

Hooks, cancellation, streams, run handles and the waiting helpers ask
:func:`running`; none reads the engine's context variables itself.  (The
sandbox's guards are the exception that proves the rule: they run on every
guarded call, so they read the workflow loop's thread-local directly,
:func:`~durasim.runtime._loop.in_workflow`, which :func:`running` reports too.)
"""

from __future__ import annotations

from typing import Any

import attrs

from durasim.worlds import World

from ._decorators import STEP_CALLER
from ._loop import WorkflowLoop, in_workflow
from ._metadata import STEP_METADATA, STEP_WORLD, WORKFLOW_METADATA, StepMetadata, WorkflowMetadata

__all__ = ["Running", "running"]


@attrs.frozen
class Running:
    """What runs in the current context.

    Attributes:
        workflow: the run, in workflow code or a step body.
        step: the step, in a step body only.
        caller: what the engine installed for workflow code (the live replay),
            in workflow code only.
        world: the World of a running step body.
        loop: the workflow loop running workflow code on this thread, if any.
    """

    workflow: WorkflowMetadata | None
    step: StepMetadata | None
    caller: Any
    world: World | None
    loop: WorkflowLoop | None

    @property
    def kind(self) -> str:
        """``"step"``, ``"workflow"`` or ``"outside"``."""
        if self.step is not None:
            return "step"
        return "workflow" if self.in_workflow_code else "outside"

    @property
    def in_workflow_code(self) -> bool:
        """Whether workflow code (not a step body) runs now."""
        return self.step is None and hasattr(self.caller, "create_hook")

    def replay(self, needs: str) -> Any:
        """The live replay of the running workflow if it has ``needs``, else ``None``."""
        caller = self.caller
        return caller if caller is not None and hasattr(caller, needs) else None


def running() -> Running:
    """What runs in the current context (see :class:`Running`)."""
    return Running(
        workflow=WORKFLOW_METADATA.get(),
        step=STEP_METADATA.get(),
        caller=STEP_CALLER.get(),
        world=STEP_WORLD.get(),
        loop=in_workflow(),
    )
