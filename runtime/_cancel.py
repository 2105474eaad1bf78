"""Cancellation signals a step body can observe, and workflow-made cancellation tokens.

Two things can be cancelled:

* a **run** (``run.cancel(reason)``): ``run_cancelled`` in its log;
* a **token** a workflow made (:func:`cancellation_token`, the ``AbortController``
  analogue) and cancelled itself (``token.cancel(reason)``): an ``attr_set`` of
  ``durasim.cancel.<token id>`` in the run's log, journaled and replayed like any
  command.

A step body observes either through a flag (``get_step_metadata().cancelled``,
``token.cancelled``) and an awaitable (``await get_step_metadata().cancellation()``,
``await token.wait()``).  The source of truth is the log; this process learns of
a cancellation at once when it wrote it (a cancel made here, a token cancelled
by a workflow this worker drives), and otherwise by reading the run, which
every awaitable does every ``poll`` seconds while it waits.
"""

from __future__ import annotations

from typing import Any

import attrs

from durasim.worlds import DurasimError

from ._context import running
from ._signals import CANCEL_ATTR, DEFAULT_POLL, cancelled_reason, wait_cancelled
from .serialization import serializable

__all__ = ["CancellationToken", "cancellation_token"]


@serializable(class_id="durasim.CancellationToken")
@attrs.frozen
class CancellationToken:
    """A cancellation a workflow makes, passes to steps, and triggers itself.

    Made by :func:`cancellation_token` in workflow code.  ``cancel(reason)`` is
    workflow-only and journaled; ``cancelled`` and ``wait()`` work in the
    workflow (``cancelled``) and in any step the token was passed to.
    """

    run_id: str
    token_id: str

    @property
    def key(self) -> str:
        return f"{self.run_id}/{CANCEL_ATTR}{self.token_id}"

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel the token (workflow code only; journaled, replayed)."""
        _workflow_caller("CancellationToken.cancel()").cancel(self.token_id, reason)

    @property
    def cancelled(self) -> bool:
        """Whether the token is cancelled (as far as this process knows, in a step)."""
        now = running()
        caller = now.replay("cancellations")
        if caller is not None:
            return self.token_id in caller.cancellations
        return cancelled_reason(now.world, self.key) is not None

    async def wait(self, *, poll: float = DEFAULT_POLL) -> str:
        """In a step: wait until the workflow cancels the token; the reason."""
        return await wait_cancelled(running().world, self.key, self.run_id, poll=poll)


def _workflow_caller(what: str) -> Any:
    caller = running().replay("new_cancellation")
    if caller is None:
        raise DurasimError(
            f"{what} is for workflow code: make and cancel tokens in a @workflow function, "
            "and pass the token to steps"
        )
    return caller


def cancellation_token() -> CancellationToken:
    """A new cancellation token of the running workflow (workflow code only)."""
    caller = _workflow_caller("cancellation_token()")
    return CancellationToken(run_id=caller.run_id, token_id=caller.new_cancellation())
