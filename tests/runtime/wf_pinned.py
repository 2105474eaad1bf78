"""A workflow for the version-pinning tests (imported by worker processes too)."""

from __future__ import annotations

from durasim.runtime import step, workflow


@step
def double(n: int) -> int:
    return 2 * n


@workflow
async def pinned(n: int) -> int:
    return await double(n)
