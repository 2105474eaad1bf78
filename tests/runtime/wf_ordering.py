"""Workflows whose step order depends on asyncio.wait / as_completed (see test_ordering.py)."""

from __future__ import annotations

import asyncio

from durasim.runtime import as_completed, wait
from durasim.runtime._authoring import step, workflow


@step
async def fetch(name: str) -> str:
    return name.upper()


async def two_fetches(prefix: str) -> str:
    first = await fetch(f"{prefix}-1")
    second = await fetch(f"{prefix}-2")
    return first + second


@workflow
async def racing() -> list[str]:
    seen: list[str] = []
    branches = [two_fetches(p) for p in ("a", "b", "c", "d")]
    done, pending = await asyncio.wait(branches, return_when=asyncio.FIRST_COMPLETED)
    seen += sorted(t.result() for t in done)
    ordered_done, _ = await wait(pending)
    seen += [t.result() for t in ordered_done]
    async for value in as_completed([fetch("x"), fetch("y"), fetch("z")]):
        seen.append(value)
    return seen
