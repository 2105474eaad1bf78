"""What a World is built from: one factory shape, ``make(setup: WorldSetup) -> World``.

Everything that builds Worlds takes this shape: the simulator (with its virtual
clock), ``explore()`` and ``durasim reproduce`` (which rebuild an exploration's
World from the factory's ``module:qualname``), the scenario book, the World
model machine, the conformance suite and its pytest plugin.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ._errors import DurasimError
from ._time import Clock, IdSource

if TYPE_CHECKING:
    from ._protocol import World

__all__ = ["FactoryError", "WorldFactory", "WorldSetup", "check_factory"]


@attrs.frozen(kw_only=True)
class WorldSetup:
    """What a factory builds a World from.

    Attributes:
        clock: the clock the World MUST read every time from (``created_at``,
            lease expiry, due times, ``TooEarly``); virtual under simulation.
        ids: the id source the World MUST mint run, message and lease ids from.
        directory: an empty scratch directory for the World's files, removed
            when its user is done.  A durable World (``capabilities.durable``)
            MUST reopen what it stored there when the factory is called again
            with the same setup: that is how the World model restarts it.
        max_deliveries: the World option of the same name: claims without an
            ack before a message is dead-lettered (``None``: never).
    """

    clock: Clock
    ids: IdSource
    directory: Path
    max_deliveries: int | None = None


#: Builds a World: ``make(setup) -> World``.
WorldFactory = Callable[[WorldSetup], "World"]


class FactoryError(DurasimError, ValueError):
    """A World factory (or a reference to one) is unusable; the message says how to fix it."""


def check_factory(factory: Callable[..., World]) -> WorldFactory:
    """``factory`` itself, once its signature shows it takes one :class:`WorldSetup`.

    Raises:
        FactoryError: ``factory`` has the old ``make(clock, ids)`` shape (or
            takes no argument at all).  A factory whose signature cannot be
            read is accepted as it is.
    """
    if not callable(factory):
        raise FactoryError(
            f"{factory!r} is a {type(factory).__name__}, not a World factory: pass "
            "make(setup: WorldSetup) -> World"
        )
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return factory
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    takes_many = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    name = getattr(factory, "__qualname__", None) or type(factory).__name__
    short = getattr(factory, "__name__", None) or "make"
    if not short.isidentifier():  # a lambda
        short = "make"
    if len(required) >= 2:
        called = ", ".join(p.name for p in required)
        raise FactoryError(
            f"the World factory {name}({called}) has the old shape: durasim now calls "
            f"every factory with one WorldSetup; write `def {short}(setup: WorldSetup) -> "
            "World` and read setup.clock and setup.ids (and setup.directory, "
            "setup.max_deliveries) -- WorldSetup is in durasim.worlds"
        )
    if not positional and not takes_many:
        raise FactoryError(
            f"the World factory {name}() takes no argument: durasim calls it with one "
            f"WorldSetup; write `def {short}(setup: WorldSetup) -> World` and build the "
            "World on setup.clock and setup.ids"
        )
    return factory
