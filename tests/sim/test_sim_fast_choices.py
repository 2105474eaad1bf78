"""as_choice_source's per-class fast path agrees with the Protocol's isinstance check."""

from __future__ import annotations

from typing import Any

import pytest

from durasim.sim import ChoiceSource, FifoChoices, SeededChoices, SequenceChoices
from durasim.sim._choices import _has_choose, as_choice_source


class _Plain:
    def choose(self, n: int) -> int:
        return 0


class _Child(_Plain):
    pass


class _Slotted:
    __slots__ = ()

    def choose(self, n: int) -> int:
        return n - 1


class _NoneMethod:
    choose = None


class _Attr:
    def __init__(self) -> None:
        self.choose = lambda n: 0


class _Custom:
    def __getattribute__(self, name: str) -> Any:
        return object.__getattribute__(self, name)

    def choose(self, n: int) -> int:
        return 0


class _Registered:
    pass


ChoiceSource.register(_Registered)


def _shadowed() -> _Plain:
    plain = _Plain()
    plain.choose = None  # type: ignore[method-assign,assignment]
    return plain


def _cases() -> list[object]:
    return [
        FifoChoices(),
        SeededChoices(3),
        SequenceChoices([1, 2]),
        _Plain(),
        _Child(),
        _Slotted(),
        _NoneMethod(),
        _Attr(),
        _Custom(),
        _shadowed(),
        [0, 1],
        (1,),
        lambda n: 0,
        iter([1]),
        _Registered(),
    ]


@pytest.mark.parametrize("value", _cases(), ids=lambda v: type(v).__name__)
def test_fast_path_never_contradicts_isinstance(value: object) -> None:
    for _ in range(2):  # the second time from the per-class cache
        if _has_choose(value):
            assert isinstance(value, ChoiceSource)
        assert _outcome(as_choice_source, value) == _outcome(_plain_source, value)


def _plain_source(choices: Any, *, seed: int | None) -> Any:
    """as_choice_source without the fast path (what it was)."""
    if choices is None:
        return FifoChoices() if seed is None else SeededChoices(seed)
    if isinstance(choices, ChoiceSource):
        return choices
    return SequenceChoices(choices)


def _outcome(normalize: Any, value: object) -> tuple[str, object]:
    try:
        source = normalize(value, seed=None)
    except Exception as exc:  # compared, error for error
        return ("raised", (type(exc), str(exc)))
    return ("same", True) if source is value else ("new", type(source))


def test_known_sources_take_the_fast_path() -> None:
    for value in (FifoChoices(), SeededChoices(1), SequenceChoices(()), _Plain(), _Slotted()):
        assert _has_choose(value)
    for value in (_shadowed(), _Custom(), _NoneMethod(), [1], lambda n: 0):
        assert not _has_choose(value)
