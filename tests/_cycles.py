"""What the cyclic garbage collector would free: the no-cycle tests' shared tools (issue 22)."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_off() -> Iterator[None]:
    """The cyclic collector off (after one collection) for the block: only refcounting frees.

    No durasim record reaches pytest's log capture meanwhile: it keeps every record,
    and a failure's record holds its error, whose frames (on Python 3.12+, through
    ``f_back``) reach the delivery; the references counted are the runtime's own.
    """
    gc.collect()
    enabled = gc.isenabled()
    logger = logging.getLogger("durasim")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        logger.setLevel(level)


def durasim_garbage(*packages: str) -> list[str]:
    """The durasim objects a full collection would free now, by type name.

    ``packages`` narrows them to those modules (``"durasim.sim"``); none: every durasim
    module.  ``gc.DEBUG_SAVEALL`` keeps what it would free in ``gc.garbage``.
    """
    prefixes = packages or ("durasim",)
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if type(o).__module__.startswith(prefixes)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found
