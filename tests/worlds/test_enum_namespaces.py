"""The plain-class views of the enums name every member, and the very same objects."""

from __future__ import annotations

import enum

import pytest

from durasim.worlds import EventType, HookStatus, RunStatus, StepStatus, Types, WaitStatus
from durasim.worlds._entities import HookStatuses, RunStatuses, StepStatuses, WaitStatuses


@pytest.mark.parametrize(
    ("namespace", "enum_class"),
    [
        (Types, EventType),
        (RunStatuses, RunStatus),
        (StepStatuses, StepStatus),
        (HookStatuses, HookStatus),
        (WaitStatuses, WaitStatus),
    ],
)
def test_each_namespace_holds_every_member_itself(
    namespace: type, enum_class: type[enum.Enum]
) -> None:
    names = {n for n in vars(namespace) if not n.startswith("_")}
    assert names == set(enum_class.__members__)
    for member in enum_class:
        assert getattr(namespace, member.name) is member
