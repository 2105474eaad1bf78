"""Workflows that escape the sandbox in ways only the check before a run can see.

Imported by test_sandbox.py at collection, before any workflow ran in the process:
the ``from ... import`` lines below bind the ORIGINAL functions, as a user module
imported before its first workflow does.
"""

from __future__ import annotations

import datetime as dt
import io
import random
from datetime import date, datetime
from random import random as draw
from time import time
from uuid import uuid4

from durasim.runtime import step, workflow

SHARED = random.Random(7)  # made at import: shared by every run and replay
NOTES = io.StringIO()  # an open file made at import (a StringIO is one too)


def stamp() -> float:
    """A plain helper of the project: the check follows the workflow into it."""
    return datetime.now().timestamp()


@step
def real_clock() -> float:
    """A step may read the wall clock (the check does not look inside steps)."""
    return datetime.now().timestamp() + time()


@workflow
async def bound_time() -> float:
    return time()


@workflow
async def bound_random() -> float:
    return draw()


@workflow
async def bound_uuid() -> str:
    return str(uuid4())


@workflow
async def shared_generator() -> float:
    return SHARED.random()


@workflow
async def datetime_now() -> str:
    return datetime.now().isoformat()


@workflow
async def datetime_utcnow_through_module() -> str:
    return dt.datetime.utcnow().isoformat()


@workflow
async def date_today() -> str:
    return date.today().isoformat()


@workflow
async def through_a_helper() -> float:
    return stamp()


@workflow
async def steps_may_read_the_clock() -> float:
    @step
    def nested_clock() -> float:
        return datetime.now().timestamp()

    return await nested_clock() + await real_clock()


@workflow
async def module_level_file() -> str:
    return NOTES.getvalue()
