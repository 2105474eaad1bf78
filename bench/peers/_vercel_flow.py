"""The n-step sequential workflow for vercel-workflow (imported by vercel_steps.py).

The workflow body runs in vercel-workflow's sandbox, which imports it by module
name, so it lives in its own importable module (not ``__main__``).
"""

from __future__ import annotations

from vercel.workflow import Workflows

wf = Workflows()


@wf.step
async def add(a: int, b: int) -> int:
    return a + b


@wf.workflow
async def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total
