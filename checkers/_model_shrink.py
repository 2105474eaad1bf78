"""Minimizing a World model failure by replaying its rules, fewer each time.

Hypothesis shrinks the failing example, but the machine's rule choices go
through switches drawn lazily (its per-rule swarm) so deleting a step often
shifts every later choice: shrunk reproductions kept unrelated steps (three
``advance`` calls before a single conflicting ``hook_created``).  The machine
records every rule it runs with its arguments (``history``); this module
replays that history on fresh machines outside Hypothesis and deletes steps
(delta debugging: halves, then quarters, ... then single steps) as long as the
same failure comes back, then prints what is left as ``state.rule(...)`` lines.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Step", "failure_signature", "minimize_steps", "render_steps"]

#: A recorded rule call: the rule's name and its keyword arguments.
Step = tuple[str, dict[str, Any]]


def failure_signature(error: BaseException) -> tuple[str, str]:
    """What makes two failures the same one: the error's type and the start of its first line.

    The first line up to its first parenthesis: ``X differs from the reference on
    events.create`` (the call, not its arguments, which a shorter reproduction
    may change).
    """
    return type(error).__name__, str(error).split("\n", 1)[0].split("(", 1)[0]


def replay(machine_class: Callable[[], Any], steps: list[Step]) -> BaseException | None:
    """Run ``steps`` on a fresh machine, each followed by the machine's invariant.

    Returns the exception the replay ended with, or ``None`` if every step held.
    """
    try:
        machine = machine_class()
    except Exception as exc:
        return exc
    try:
        machine.same_observable_state()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.same_observable_state()
    except Exception as exc:
        return exc
    finally:
        with contextlib.suppress(Exception):  # a failure already decided the replay
            machine.teardown()
    return None


def minimize_steps(
    machine_class: Callable[[], Any],
    steps: list[Step],
    signature: tuple[str, str],
    *,
    seconds: float,
) -> tuple[list[Step], BaseException] | None:
    """The fewest of ``steps`` (in order) that still fail with ``signature``, and that failure.

    The first step (the machine's ``@initialize`` rule) is always kept.  Returns
    ``None`` when ``steps`` do not fail that way when replayed (a World whose
    failure depends on more than the rules: timing, leftovers of an earlier
    example); stops deleting after ``seconds`` with what it has.
    """
    deadline = time.monotonic() + seconds
    last: list[BaseException] = []

    def fails(candidate: list[Step]) -> bool:
        error = replay(machine_class, candidate)
        if error is None or failure_signature(error) != signature:
            return False
        last[:] = [error]
        return True

    if not steps or not fails(steps):
        return None
    head, rest = steps[:1], _delete_steps(steps[1:], lambda c: fails(steps[:1] + c), deadline)
    # Then the items of list arguments (a race's writers, a batch's requests).
    for index in range(len(rest)):
        name, arguments = rest[index]
        for key, value in arguments.items():
            if not isinstance(value, list) or len(value) < 2:
                continue
            kept = list(value)
            for item in reversed(range(len(kept))):
                if time.monotonic() >= deadline or len(kept) < 2:
                    break
                fewer = kept[:item] + kept[item + 1 :]
                candidate = [*rest[:index], (name, {**arguments, key: fewer}), *rest[index + 1 :]]
                if fails(head + candidate):
                    kept = fewer
                    arguments = {**arguments, key: fewer}
                    rest = candidate
    # The failure of what is left (the last replay that failed may have had more).
    fails(head + rest)
    return head + rest, last[0]


def _delete_steps(
    rest: list[Step], fails: Callable[[list[Step]], bool], deadline: float
) -> list[Step]:
    """Delta debugging: delete chunks of ``rest`` (halves, quarters, ... single steps)."""
    parts = 2
    while rest and time.monotonic() < deadline:
        size = max(1, -(-len(rest) // parts))
        for start in range(0, len(rest), size):
            candidate = rest[:start] + rest[start + size :]
            if fails(candidate):
                rest = candidate
                parts = max(parts - 1, 2)
                break
            if time.monotonic() >= deadline:
                break
        else:
            if size == 1:
                break
            parts = min(len(rest), parts * 2)
    return rest


def render_steps(machine_name: str, steps: list[Step]) -> list[str]:
    """``state = Machine()``, one ``state.rule(arg=value, ...)`` line per step, ``teardown``."""
    lines = [f"state = {machine_name}()"]
    for name, arguments in steps:
        # The swarm only steered what was drawn; replayed rules do not read it.
        shown = {k: v for k, v in arguments.items() if k != "swarm"}
        args = ", ".join(f"{key}={_code(value)}" for key, value in sorted(shown.items()))
        lines.append(f"state.{name}({args})")
    lines.append("state.teardown()")
    return lines


def _code(value: Any) -> str:
    """``value`` as it would be written in a test (enums by name, containers item by item)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, frozenset):
        return (
            f"frozenset({{{', '.join(sorted(_code(v) for v in value))}}})"
            if value
            else "frozenset()"
        )
    if isinstance(value, list):
        return f"[{', '.join(_code(v) for v in value)}]"
    if isinstance(value, tuple):
        inner = ", ".join(_code(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_code(k)}: {_code(v)}" for k, v in value.items()) + "}"
    return repr(value)
