"""One workflow in several code versions, chosen by ``CODE["version"]`` (tests flip it).

A real deployment changes the file; a test flips the switch between deliveries
(and drops the kept replays, as a new process would have none):

* ``A``: one, two, sleep;
* ``B``: the same edit made safely: ``three`` instead of ``two`` behind ``patched("use-three")``;
* ``B-unpatched``: the same edit without a patch (breaks runs recorded on A);
* ``B-wrong``: a patch whose old branch forgets ``two`` (breaks runs recorded on A);
* ``C``: the patch retired with ``deprecate_patch`` (only ``three``);
* ``D``: the patch removed outright (breaks runs recorded on B).
"""

from __future__ import annotations

from durasim.runtime import deprecate_patch, patched, sleep, step, workflow

CODE = {"version": "A"}


@step
def one() -> int:
    return 1


@step
def two(x: int) -> int:
    return x + 2


@step
def three(x: int) -> int:
    return x + 3


@workflow
async def versioned() -> int:
    x = await one()
    version = CODE["version"]
    if version == "A":
        y = await two(x)
    elif version == "B":
        if patched("use-three"):
            y = await three(x)
        else:
            y = await two(x)
    elif version == "B-wrong":
        if patched("use-three"):
            y = await three(x)
        else:
            y = x  # the old branch forgot the step two
    elif version == "C":
        deprecate_patch("use-three")
        y = await three(x)
    else:  # B-unpatched, D
        y = await three(x)
    await sleep(10)
    return y
