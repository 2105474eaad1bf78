"""Nondeterministic workflows, each hiding its nondeterminism the way real code does.

Module ``ndflows`` (module level on purpose: ``durasim reproduce`` and the
fresh-process replay import it by name).  Every workflow here must be refused
by the sandbox or fail ``explore()`` with a seed that reproduces; none may pass
and fail only in production.  ``CORPUS`` names each with its class and which
check is expected to catch it (``sandbox``: refused while it runs or before;
``explore``: an example fails, in this process or in the fresh one).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import secrets
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from random import random as bound_random  # bound at import time: the original function
from time import time as bound_time
from typing import Any
from uuid import uuid4 as bound_uuid4

from durasim.runtime import step, workflow

MODULE = "ndflows"

#: Started before any workflow runs: its threads are not the workflow's.
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ndflows")
#: A module-level generator seeded from the OS at import.
_RNG = random.Random()
#: Made at import: where it lies in memory says nothing about later objects.
_ANCHOR = ["anchor"]
#: Memoized across runs in one process: filled by the first run (or a probe).
_MEMO: dict[str, int] = {}
GREEK = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
DIRECTIONS = ["north", "south", "east", "west", "up", "down", "in", "out"]
#: Counts calls across runs and replays in one process.
_CALLS = [0]


@step(module=MODULE)
def note(label: str) -> str:
    return label


@step(module=MODULE)
def charge(amount: Any) -> str:
    return f"charged {amount}"


async def _branch(flag: bool) -> str:
    """A step chosen by ``flag``: a different command when the flag differs."""
    if flag:
        return await note("heads")
    return await charge(1)


# -- order the process chooses ---------------------------------------------------------


@workflow(module=MODULE)
async def set_order() -> list[str]:
    """Steps in the iteration order of a set of strings (the hash seed's order)."""
    names = set(GREEK)  # built at run time, as real code builds its sets
    return [await note(name) for name in names]


@workflow(module=MODULE)
async def dict_from_set() -> str:
    """A step argument built by iterating a set: its key order is the hash seed's."""
    directions = set(DIRECTIONS)
    return await charge({key: len(key) for key in directions})


@workflow(module=MODULE)
async def hash_order() -> list[str]:
    """Steps sorted by ``hash()`` of strings: the hash seed's order again."""
    names = ["ann", "bob", "cy", "dee", "eve"]
    return [await note(name) for name in sorted(names, key=hash)]


@workflow(module=MODULE)
async def id_order() -> list[str]:
    """Steps ordered by ``id()``: an object made at import beside ones made now.

    Where a new object lands in memory depends on everything the process did
    before (a worker that has served a thousand runs, a fresh one).
    """
    boxes = [_ANCHOR, *([name] for name in ("p", "q", "r", "s", "t", "u"))]
    return [await note(box[0]) for box in sorted(boxes, key=id)]


# -- the process's environment, clock and entropy ------------------------------------


@workflow(module=MODULE)
async def env_read() -> str:
    """A branch on an environment variable."""
    return await _branch(os.environ.get("NDFLOWS_FLAG") is not None)


@workflow(module=MODULE)
async def env_getenv() -> str:
    """The same through ``os.getenv``."""
    return await _branch(bool(os.getenv("HOME")))


@workflow(module=MODULE)
async def datetime_now() -> str:
    """A branch on ``datetime.now()``."""
    return await _branch(datetime.now().microsecond % 2 == 0)


@workflow(module=MODULE)
async def datetime_module_utcnow() -> str:
    """A branch on ``datetime.datetime.utcnow()`` through the module."""
    return await _branch(dt.datetime.utcnow().second % 2 == 0)


@workflow(module=MODULE)
async def date_today() -> str:
    """A step argument from ``date.today()``."""
    return await charge(dt.date.today().isoformat())


@workflow(module=MODULE)
async def import_bound_random() -> str:
    """``from random import random``: the name holds the original, unseeded function."""
    return await _branch(bound_random() < 0.5)


@workflow(module=MODULE)
async def import_bound_time() -> str:
    """``from time import time``: the original wall clock."""
    return await charge(int(bound_time() * 1000) % 1000)


@workflow(module=MODULE)
async def import_bound_uuid4() -> str:
    """``from uuid import uuid4``: an idempotency key from the original generator."""
    return await charge(str(bound_uuid4()))


@workflow(module=MODULE)
async def fresh_random_instance() -> str:
    """``random.Random()`` made in workflow code: seeded from the OS."""
    return await _branch(random.Random().random() < 0.5)


@workflow(module=MODULE)
async def module_random_instance() -> str:
    """A generator made at import time, used in workflow code."""
    return await _branch(_RNG.random() < 0.5)


@workflow(module=MODULE)
async def secrets_token() -> str:
    """An idempotency key from ``secrets``."""
    return await charge(secrets.token_hex(8))


@workflow(module=MODULE)
async def urandom_key() -> str:
    """An idempotency key from ``os.urandom``."""
    return await charge(os.urandom(8).hex())


@workflow(module=MODULE)
async def uuid1_key() -> str:
    """``uuid.uuid1()``: the clock and the node."""
    return await charge(str(uuid.uuid1()))


# -- the process's state -------------------------------------------------------------


@workflow(module=MODULE)
async def memoized_global(key: str) -> int:
    """A memoizing module global: the step runs only the first time in a process."""
    if key not in _MEMO:
        _MEMO[key] = len(await note(key))
    return _MEMO[key]


@workflow(module=MODULE)
async def counted_argument() -> str:
    """A step argument whose meaning changes: a process-wide call counter."""
    _CALLS[0] += 1
    return await charge(_CALLS[0])


# -- threads and files -------------------------------------------------------------------


@workflow(module=MODULE)
async def thread_pool() -> str:
    """Work handed to a pool started before the workflow ran."""
    value = _POOL.submit(random.random).result()
    return await _branch(value < 0.5)


@workflow(module=MODULE)
async def file_stat() -> str:
    """A branch on a file's metadata."""
    return await _branch(os.stat(__file__).st_size % 2 == 0)


@workflow(module=MODULE)
async def file_exists() -> str:
    """A branch on whether a file exists (``os.path`` calls ``os.stat``)."""
    return await _branch(os.path.exists("/tmp/ndflows-flag"))  # noqa: ASYNC240 -- under test


@workflow(module=MODULE)
async def list_directory() -> list[str]:
    """Steps per directory entry, in the directory's order."""
    return [await note(name) for name in os.listdir(os.path.dirname(__file__))[:3]]


#: name -> (workflow, args, the class of nondeterminism, which check catches it)
CORPUS: dict[str, tuple[Any, tuple[Any, ...], str, str]] = {
    "set_order": (set_order, (), "set iteration order", "explore"),
    "dict_from_set": (dict_from_set, (), "dict built from a set", "explore"),
    "hash_order": (hash_order, (), "hash() ordering", "explore"),
    "id_order": (id_order, (), "id() ordering", "explore"),
    "env_read": (env_read, (), "os.environ", "sandbox"),
    "env_getenv": (env_getenv, (), "os.getenv", "sandbox"),
    "datetime_now": (datetime_now, (), "datetime.now()", "sandbox"),
    "datetime_module_utcnow": (datetime_module_utcnow, (), "datetime.utcnow()", "sandbox"),
    "date_today": (date_today, (), "date.today()", "sandbox"),
    "import_bound_random": (import_bound_random, (), "from random import random", "sandbox"),
    "import_bound_time": (import_bound_time, (), "from time import time", "sandbox"),
    "import_bound_uuid4": (import_bound_uuid4, (), "from uuid import uuid4", "sandbox"),
    # Made deterministic rather than refused: seeded from the run's own generator.
    "fresh_random_instance": (fresh_random_instance, (), "random.Random()", "deterministic"),
    "module_random_instance": (module_random_instance, (), "a module Random()", "sandbox"),
    "secrets_token": (secrets_token, (), "secrets", "sandbox"),
    "urandom_key": (urandom_key, (), "os.urandom", "sandbox"),
    "uuid1_key": (uuid1_key, (), "uuid.uuid1()", "sandbox"),
    "memoized_global": (memoized_global, ("k",), "a memoizing module global", "explore"),
    "counted_argument": (counted_argument, (), "a step argument whose meaning changes", "explore"),
    "thread_pool": (thread_pool, (), "a thread pool started before", "sandbox"),
    "file_stat": (file_stat, (), "os.stat", "sandbox"),
    "file_exists": (file_exists, (), "os.path.exists", "sandbox"),
    "list_directory": (list_directory, (), "os.listdir", "sandbox"),
}
