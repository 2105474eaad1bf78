"""Values that cannot cross a step boundary are refused with path, type and fix."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import io
import pickle
import socket
import threading
import types
from collections import OrderedDict
from typing import Any

import attrs
import pytest

from durasim.runtime import (
    FatalError,
    RetryableError,
    RevivedError,
    SerializationError,
    serializable,
)
from durasim.runtime.serialization import ClassRegistry, deserialize, serialize
from durasim.worlds import DurasimError


def _message(value: Any, root: str = "args") -> str:
    with pytest.raises(SerializationError) as info:
        serialize(value, root=root)
    return str(info.value)


def test_socket_names_path_type_and_fix() -> None:
    with socket.socket() as conn:
        message = _message((1, {"conn": conn}))
    assert message == (
        'args[1]["conn"]: socket.socket cannot cross a step boundary; '
        "pass the address and connect inside the step"
    )


def _gen() -> Any:
    yield 1


async def _coro() -> None:
    return None


@pytest.mark.parametrize(
    ("make", "type_text", "fix"),
    [
        (lambda: lambda: 1, "function", "registered step or workflow"),
        (lambda: len, "builtin_function_or_method", "registered step"),
        (_gen, "generator", "list(...)"),
        (threading.Lock, "_thread.lock", "create it inside the step"),
        (asyncio.Lock, "asyncio.locks.Lock", "create it inside the step"),
        (io.StringIO, "_io.StringIO", "pass the path"),
        (lambda: types, "module", "import the module inside the step"),
        (object, "object", "register the class with @serializable"),
        (lambda: OrderedDict(a=1), "collections.OrderedDict", "pass dict(value)"),
        (lambda: int, "type", "classes do not cross the log"),
    ],
)
def test_refusals(make: Any, type_text: str, fix: str) -> None:
    message = _message({"k": [make()]}, root="value")
    assert message.startswith(f'value["k"][0]: {type_text} cannot cross a step boundary; ')
    assert fix in message


def test_coroutine_refused_with_await_hint() -> None:
    coro = _coro()
    try:
        assert "await it and pass the result" in _message([coro])
    finally:
        coro.close()


def test_paths_through_every_container_kind() -> None:
    @serializable(registry=ClassRegistry())
    @attrs.define
    class Local:
        field: Any

    bad = object()
    assert _message([(0, {1: {bad}})]).startswith("args[0][1][1]{...}: object")
    assert _message({"x": [[0, bad]]}).startswith('args["x"][0][1]: object')
    assert _message({bad: 1}).startswith("args[<key 0>]: object")


def test_paths_through_registered_classes_and_exceptions() -> None:
    registry = ClassRegistry()

    @serializable(registry=registry)
    @attrs.define
    class Holder:
        inner: Any

    with pytest.raises(SerializationError) as info:
        serialize([Holder(inner=[1, len])], registry=registry)
    assert str(info.value).startswith("value[0].inner[1]: builtin_function_or_method")
    error = ValueError("x", object())
    assert _message([error]).startswith("args[0].args[1]: object")


def test_unregistered_enum_and_attrs_and_dataclass() -> None:
    class Loose(enum.Enum):
        A = 1

    @attrs.define
    class Plain:
        x: int

    @dataclasses.dataclass
    class Data:
        x: int

    assert "register the enum with @serializable" in _message(Loose.A)
    assert "decorate the class with @serializable" in _message(Plain(1))
    assert "decorate the class with @serializable" in _message(Data(1))


def test_half_a_hook_pair_fails_at_definition() -> None:
    with pytest.raises(SerializationError, match="define __durasim_deserialize__ too"):

        @serializable(registry=ClassRegistry())
        class Half:
            def __durasim_serialize__(self) -> int:
                return 1


def test_deserialize_hook_must_be_a_classmethod() -> None:
    with pytest.raises(SerializationError, match="must be a classmethod"):

        @serializable(registry=ClassRegistry())
        class Wrong:
            def __durasim_serialize__(self) -> int:
                return 1

            def __durasim_deserialize__(self, data: int) -> Any:
                return data


def test_a_plain_class_cannot_be_registered() -> None:
    with pytest.raises(SerializationError, match="add the pair"):
        serializable(registry=ClassRegistry())(type("Bare", (), {}))


def test_class_id_clash_is_refused() -> None:
    registry = ClassRegistry()

    @serializable(class_id="shared", registry=registry)
    @attrs.define
    class One:
        x: int

    with pytest.raises(SerializationError, match="already registered"):

        @serializable(class_id="shared", registry=registry)
        @attrs.define
        class Two:
            x: int


def test_default_class_id_shape() -> None:
    registry = ClassRegistry()

    @serializable(registry=registry)
    @attrs.frozen
    class Shape:
        x: int

    entry = registry.entry_for_class(Shape)
    assert entry is not None
    assert entry.class_id == f"class//{__name__}//{Shape.__qualname__}"
    assert entry.frozen


def test_registered_functions_cross_as_their_id() -> None:
    registry = ClassRegistry()

    def charge(amount: int) -> int:
        return amount

    registry.register_function(charge, "step//billing//charge")
    data = serialize({"callback": charge}, registry=registry)
    assert b"step//billing//charge" in data
    assert deserialize(data, registry=registry)["callback"] is charge


def test_a_cycle_through_a_tuple_is_refused_cleanly() -> None:
    inner: list[Any] = []
    pair = (inner,)
    inner.append(pair)
    assert "contains itself through an immutable container" in _message(pair)


def test_a_failing_hook_is_reported() -> None:
    registry = ClassRegistry()

    @serializable(registry=registry)
    class Broken:
        def __durasim_serialize__(self) -> int:
            raise RuntimeError("boom")

        @classmethod
        def __durasim_deserialize__(cls, data: int) -> Broken:
            return cls()

    with pytest.raises(
        SerializationError, match=r"__durasim_serialize__ raised RuntimeError: boom"
    ):
        serialize([Broken()], registry=registry)


def test_serialization_error_pickles_and_is_a_type_error() -> None:
    with pytest.raises(SerializationError) as info:
        serialize({"f": lambda: 0})
    error = info.value
    assert isinstance(error, DurasimError)
    assert isinstance(error, TypeError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is SerializationError
    assert str(copy) == str(error)
    assert copy.path == 'value["f"]'


def test_step_errors_round_trip_with_retry_after() -> None:
    from datetime import timedelta

    retry = RetryableError("rate limited", retry_after=timedelta(seconds=30))
    fatal = FatalError("card declined")
    fatal.__cause__ = KeyError("card")
    out_retry, out_fatal = deserialize(serialize([retry, fatal]))
    assert type(out_retry) is RetryableError
    assert out_retry.retry_after == timedelta(seconds=30)
    assert str(out_retry) == "rate limited"
    assert type(out_fatal) is FatalError
    assert type(out_fatal.__cause__) is KeyError


def test_unknown_exception_types_revive_with_their_name() -> None:
    class PaymentDeclined(Exception):
        pass

    error = PaymentDeclined("insufficient funds", 42)
    error.add_note("retry tomorrow")
    out = deserialize(serialize(error))
    assert type(out) is RevivedError
    assert out.type_name.endswith("PaymentDeclined")
    assert out.original_args == ("insufficient funds", 42)
    assert out.__notes__ == ["retry tomorrow"]
    again = deserialize(serialize(out))
    assert type(again) is RevivedError
    assert again.type_name == out.type_name
    assert pickle.loads(pickle.dumps(out)).type_name == out.type_name


def test_builtin_exceptions_revive_as_themselves() -> None:
    out = deserialize(serialize(FileNotFoundError(2, "missing")))
    assert type(out) is FileNotFoundError
    assert out.errno == 2
