"""The authoring layer: ids, validation, calling steps in and out of workflows, closures."""

from __future__ import annotations

import asyncio
import pickle
import re
from collections.abc import Awaitable, Generator
from typing import Any

import attrs
import pytest

from durasim.runtime import (
    DefinitionNotFound,
    InvalidDefinition,
    WorkflowCallError,
    serializable,
    step,
    workflow,
)
from durasim.runtime._authoring import STEP_CALLER, closure_of, with_closure
from durasim.runtime._ids import MAX_ID_LENGTH
from durasim.runtime.lowlevel import (
    StepDef,
    find_step,
    find_workflow,
    step_definition,
    workflow_definition,
)
from durasim.runtime.serialization import default_registry, deserialize, serialize

MOD = __name__


# -- definitions at module level ------------------------------------------------------


@step
def add(a: int, b: int) -> int:
    return a + b


@step(max_retries=0)
async def shout(text: str) -> str:
    return text.upper()


@step(name="charge_card", module="payments@2", max_retries=7)
def charge(amount: int) -> str:
    return f"charged {amount}"


@serializable
@attrs.define
class Cart:
    items: list[int]

    @step
    def total(self, tax: int = 0) -> int:
        return sum(self.items) + tax

    @step
    @staticmethod
    def make(*items: int) -> Cart:
        return Cart(list(items))

    @step(max_retries=1)
    @classmethod
    async def empty(cls) -> Cart:
        return cls([])


class Box:
    """The hook pair without @serializable: the step's first use registers it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __durasim_serialize__(self) -> int:
        return self.value

    @classmethod
    def __durasim_deserialize__(cls, data: int) -> Box:
        return cls(data)

    @step
    def get(self) -> int:
        return self.value


@workflow
async def checkout(order: int) -> str:
    return f"order {order}"


@workflow(name="checkout_v2", module="shop@2")
async def checkout_two(order: int) -> str:
    return f"order {order}"


# -- a fake engine ----------------------------------------------------------------------


class Ready:
    """An awaitable that is already done (no event loop needed)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, object]:
        return self.value
        yield  # pragma: no cover -- makes this a generator


@attrs.define
class RecordingCaller:
    calls: list[tuple[StepDef, tuple[Any, ...], dict[str, Any], dict[str, Any]]] = attrs.field(
        factory=list
    )

    def call_step(
        self,
        definition: StepDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        closure: dict[str, Any],
    ) -> Awaitable[Any]:
        self.calls.append((definition, args, kwargs, closure))
        return Ready(f"journaled {definition.name}")


@pytest.fixture
def caller() -> Generator[RecordingCaller, None, None]:
    fake = RecordingCaller()
    token = STEP_CALLER.set(fake)
    try:
        yield fake
    finally:
        STEP_CALLER.reset(token)


def run(awaitable: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await awaitable

    return asyncio.run(main())


# -- ids ----------------------------------------------------------------------------------


def test_ids_of_every_kind() -> None:
    def nested() -> StepDef:
        @step
        def inner() -> None:
            pass

        found = step_definition(inner)
        assert found is not None
        return found

    expected = {
        add: (f"step//{MOD}//add", "add", "function"),
        shout: (f"step//{MOD}//shout", "shout", "function"),
        Cart.total: (f"step//{MOD}//Cart#total", "Cart#total", "method"),
        Cart.make: (f"step//{MOD}//Cart.make", "Cart.make", "staticmethod"),
        Cart.empty: (f"step//{MOD}//Cart.empty", "Cart.empty", "classmethod"),
    }
    for obj, (step_id, name, kind) in expected.items():
        definition = step_definition(obj)
        assert definition is not None
        assert (definition.step_id, definition.name, definition.kind) == (step_id, name, kind)
    inner = nested()
    assert inner.step_id == f"step//{MOD}//test_ids_of_every_kind/nested/inner"
    assert (inner.name, inner.kind, inner.owner) == (
        "test_ids_of_every_kind/nested/inner",
        "nested",
        None,
    )
    assert workflow_definition(checkout).workflow_id == f"workflow//{MOD}//checkout"
    assert workflow_definition(checkout).name == "checkout"


def test_step_definition_fields() -> None:
    definition = step_definition(shout)
    assert definition is not None
    assert definition.max_retries == 0
    assert definition.is_async
    assert definition.fn is shout.__wrapped__  # type: ignore[attr-defined]
    total = step_definition(Cart.total)
    assert total is not None
    assert total.owner is Cart
    assert total.max_retries == 3
    assert not total.is_async
    empty = step_definition(Cart.empty)
    assert empty is not None
    assert (empty.owner, empty.max_retries, empty.is_async) == (Cart, 1, True)
    assert getattr(empty.fn, "__name__", None) == "empty"


def test_name_and_module_overrides() -> None:
    definition = step_definition(charge)
    assert definition is not None
    assert definition.step_id == "step//payments@2//charge_card"
    assert definition.name == "charge_card"
    assert definition.max_retries == 7
    assert workflow_definition(checkout_two).workflow_id == "workflow//shop@2//checkout_v2"

    @step(module="billing@1.2.0")
    def invoice() -> None:
        pass

    found = step_definition(invoice)
    assert found is not None
    assert found.step_id == "step//billing@1.2.0//test_name_and_module_overrides/invoice"


def test_class_inside_a_function_and_methods_of_nested_classes() -> None:
    @serializable
    @attrs.define
    class Local:
        x: int

        @step
        def read(self) -> int:
            return self.x

        @attrs.define
        class Inner:
            @step
            @staticmethod
            def ping() -> str:
                return "pong"

    read = step_definition(Local.read)
    ping = step_definition(Local.Inner.ping)
    assert read is not None
    assert ping is not None
    prefix = f"step//{MOD}//test_class_inside_a_function_and_methods_of_nested_classes/"
    assert read.step_id == prefix + "Local#read"
    assert ping.step_id == prefix + "Local.Inner.ping"
    assert read.owner is Local


def test_step_definition_finds_every_form() -> None:
    cart = Cart([1, 2])
    assert step_definition(cart.total) is step_definition(Cart.total)
    assert step_definition(Cart.__dict__["total"]) is step_definition(Cart.total)
    assert step_definition(Cart.__dict__["make"]) is step_definition(cart.make)
    assert step_definition(cart.empty) is step_definition(Cart.empty)
    assert step_definition(len) is None
    assert step_definition(lambda: None) is None
    assert step_definition(checkout) is None


def test_ids_refused_outside_the_world_alphabet() -> None:
    with pytest.raises(InvalidDefinition, match=r"name part 'pay ment'.*name='\.\.\.'"):

        @step(name="pay ment")
        def a() -> None:
            pass

    with pytest.raises(InvalidDefinition, match=r"module part 'shop//2'.*module="):

        @step(module="shop//2")
        def b() -> None:
            pass

    with pytest.raises(InvalidDefinition, match=r"name part 'caf\\xe9'|name part 'café'"):

        @step(name="café")
        def c() -> None:
            pass

    long_name = "x" * MAX_ID_LENGTH
    with pytest.raises(InvalidDefinition, match=rf"more than {MAX_ID_LENGTH}; pass a shorter"):

        @workflow(name=long_name)
        async def d() -> None:
            pass


def test_ids_fit_the_world_correlation_id_rule() -> None:
    pattern = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/#@+=~-]{0,255}")
    for obj in (add, shout, charge, Cart.total, Cart.make, Cart.empty, Box.get):
        definition = step_definition(obj)
        assert definition is not None
        assert pattern.fullmatch(definition.step_id + "#12")
        assert len(definition.step_id) <= MAX_ID_LENGTH


# -- validation -----------------------------------------------------------------------


def test_sync_workflow_is_refused_naming_the_function() -> None:
    with pytest.raises(InvalidDefinition, match=r"ship.*not an async def.*async def ship"):

        @workflow
        def ship() -> None:
            pass


def test_async_generator_workflow_and_generator_step_are_refused() -> None:
    with pytest.raises(InvalidDefinition, match=r"feed.*async generator"):

        @workflow
        async def feed() -> Any:
            yield 1

    with pytest.raises(InvalidDefinition, match=r"items.*generator; a step returns one value"):

        @step
        def items() -> Any:
            yield 1


def test_workflow_on_an_instance_method_is_refused() -> None:
    with pytest.raises(InvalidDefinition, match=r"instance method .*Shop\.run.*no `self`"):

        class Shop:
            @workflow
            async def run(self) -> None:
                pass

    with pytest.raises(InvalidDefinition, match=r"classmethod .*Shop2\.run"):

        class Shop2:
            @workflow
            @classmethod
            async def run(cls) -> None:
                pass


def test_workflow_on_a_static_method_is_allowed() -> None:
    class Jobs:
        @workflow
        @staticmethod
        async def nightly() -> str:
            return "ok"

    definition = workflow_definition(Jobs.nightly)
    assert definition.workflow_id.endswith(
        "//test_workflow_on_a_static_method_is_allowed/Jobs.nightly"
    )


def test_lambdas_and_non_functions_are_refused() -> None:
    with pytest.raises(InvalidDefinition, match=r"lambda .*write it as a def"):
        step(lambda: 1)
    with pytest.raises(InvalidDefinition, match=r"needs a function written with def, got type"):
        step(int)
    with pytest.raises(InvalidDefinition, match="already a step"):
        step(add)
    with pytest.raises(InvalidDefinition, match="already a workflow"):
        workflow(checkout)
    with pytest.raises(InvalidDefinition, match=r"staticmethod .*not written in a class body"):

        @step
        @staticmethod
        def loose() -> None:
            pass


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_max_retries_must_be_a_non_negative_int(bad: Any) -> None:
    with pytest.raises(InvalidDefinition, match=r"max_retries must be an int >= 0"):
        step(max_retries=bad)


def test_instance_method_step_of_an_unserializable_class_fails_at_first_call() -> None:
    class Plain:
        @step
        def work(self) -> int:
            return 1

    message = r"'[^']*Plain#work' is an instance method of .*Plain.*decorate .*@serializable"
    with pytest.raises(InvalidDefinition, match=message):
        Plain().work()
    definition = step_definition(Plain.work)
    assert definition is not None
    with pytest.raises(InvalidDefinition, match=message):
        find_step(definition.step_id)


def test_instance_method_step_is_fine_once_the_class_is_registered_later() -> None:
    class Later:
        def __init__(self, n: int) -> None:
            self.n = n

        @step
        def work(self) -> int:
            return self.n

    serializable(attrs.define(Later))  # registration after the body, by hand
    assert Later(4).work() == 4


def test_a_class_with_the_hook_pair_is_registered_on_first_use() -> None:
    registry = default_registry()
    assert registry.entry_for_class(Box) is None or registry.entry_for_class(Box) is not None
    assert Box(5).get() == 5
    entry = registry.entry_for_class(Box)
    assert entry is not None
    assert entry.kind == "pair"
    assert deserialize(serialize(Box(9))).value == 9


def test_a_class_with_one_hook_is_refused_at_definition() -> None:
    with pytest.raises(Exception) as info:  # noqa: PT011 -- the cause is checked below

        class Half:
            def __durasim_serialize__(self) -> int:
                return 1

            @step
            def work(self) -> int:
                return 1

    # Python 3.11 wraps errors of __set_name__ in a RuntimeError; 3.12 does not.
    error = info.value if isinstance(info.value, InvalidDefinition) else info.value.__cause__
    assert isinstance(error, InvalidDefinition)
    assert re.search(r"Half defines only one of .*define __durasim_deserialize__ too", str(error))


def test_wrong_decorator_order_is_refused_at_first_use() -> None:
    class Tools:
        @staticmethod
        @step
        def util() -> int:
            return 1

    with pytest.raises(InvalidDefinition, match=r"never bound to its class: put @step above"):
        Tools.util()


# -- calling --------------------------------------------------------------------------


def test_calling_a_workflow_directly_points_to_start() -> None:
    with pytest.raises(
        WorkflowCallError, match=r"durasim\.runtime\.start\(checkout, \.\.\.\)"
    ) as info:
        checkout(1)
    assert "durasim.runtime.run(checkout, ...)" in str(info.value)
    assert info.value.workflow_id == f"workflow//{MOD}//checkout"
    assert isinstance(info.value, TypeError)


def test_steps_run_normally_outside_a_workflow() -> None:
    assert add(2, 3) == 5
    assert run(shout("hi")) == "HI"
    cart = Cart.make(1, 2, 3)
    assert cart.total() == 6
    assert cart.total(tax=1) == 7
    assert Cart.total(cart) == 6
    assert run(Cart.empty()) == Cart([])
    assert run(cart.empty()) == Cart([])


def test_steps_inside_a_workflow_go_to_the_step_caller(caller: RecordingCaller) -> None:
    cart = Cart([1])
    assert run(add(2, b=3)) == "journaled add"
    run(shout("hi"))
    run(cart.total(tax=2))
    run(Cart.total(cart))
    run(Cart.make(4, 5))
    run(Cart.empty())
    run(cart.empty())
    got = [
        (d.step_id.rpartition("//")[2], args, kwargs, closure)
        for d, args, kwargs, closure in caller.calls
    ]
    assert got == [
        ("add", (2,), {"b": 3}, {}),
        ("shout", ("hi",), {}, {}),
        ("Cart#total", (cart,), {"tax": 2}, {}),
        ("Cart#total", (cart,), {}, {}),
        ("Cart.make", (4, 5), {}, {}),
        ("Cart.empty", (Cart,), {}, {}),
        ("Cart.empty", (Cart,), {}, {}),
    ]
    assert caller.calls[0][0] is step_definition(add)
    assert type(caller.calls[0][1]) is tuple
    assert type(caller.calls[0][2]) is dict


def test_nested_step_carries_the_workflow_locals(caller: RecordingCaller) -> None:
    async def body(order: int, discount: int) -> Any:
        label = f"order-{order}"

        @step
        def price(base: int) -> str:
            return f"{label}: {base - discount}"

        return await price(100)

    assert run(body(7, 5)) == "journaled test_nested_step_carries_the_workflow_locals/body/price"
    ((definition, args, kwargs, closure),) = caller.calls
    assert (args, kwargs) == ((100,), {})
    assert closure == {"discount": 5, "label": "order-7"}
    # The engine runs the body later from the registry, over the recorded values.
    latest = find_step(definition.step_id)
    rebound = with_closure(latest.fn, closure)
    assert rebound(100) == "order-7: 95"
    assert with_closure(latest.fn, {"discount": 0, "label": "x"})(10) == "x: 10"


def test_closure_of_and_with_closure() -> None:
    def outer() -> Any:
        a, b = 1, [2]

        def inner(x: int = 0, *, y: int = 1) -> Any:
            return (a, b, x, y)

        return inner

    inner = outer()
    assert closure_of(inner) == {"a": 1, "b": [2]}
    assert closure_of(add) == {}
    copy = with_closure(inner, {"a": 10, "b": [20]})
    assert copy() == (10, [20], 0, 1)
    assert inner() == (1, [2], 0, 1)  # the original keeps its cells
    assert (copy.__name__, copy.__qualname__) == (inner.__name__, inner.__qualname__)
    assert with_closure(inner, {"a": 5, "unused": 0})() == (5, [2], 0, 1)
    plain = with_closure(add, {})
    assert plain(1, 2) == 3


def test_closure_of_an_unassigned_variable_is_a_clear_error() -> None:
    def outer() -> Any:
        def inner() -> Any:
            return later

        with pytest.raises(InvalidDefinition, match=r"inner uses the variable 'later'.*assign it"):
            closure_of(inner)
        later = 1
        return inner

    assert closure_of(outer()) == {"later": 1}


def test_closure_skips_the_class_cell_of_super() -> None:
    class Base:
        def hello(self) -> str:
            return "base"

    @serializable
    @attrs.define
    class Child(Base):
        @step
        def hello(self) -> str:
            return "child of " + super().hello()

    definition = step_definition(Child.hello)
    assert definition is not None
    assert closure_of(definition.fn) == {}
    assert with_closure(definition.fn, {})(Child()) == "child of base"
    assert Child().hello() == "child of base"


# -- registry -------------------------------------------------------------------------


def test_lookups() -> None:
    assert find_step(f"step//{MOD}//add") is step_definition(add)
    assert find_workflow(f"workflow//{MOD}//checkout") is workflow_definition(checkout)
    with pytest.raises(DefinitionNotFound, match=r"'step//nowhere//x'.*import the module"):
        find_step("step//nowhere//x")
    with pytest.raises(DefinitionNotFound, match=r"'workflow//nowhere//x'.*import the module"):
        find_workflow("workflow//nowhere//x")
    with pytest.raises(LookupError):
        find_step("step//nowhere//y")
    with pytest.raises(InvalidDefinition, match=r"is not a workflow: decorate it with @workflow"):
        workflow_definition(add)


def test_registered_functions_cross_the_log_as_their_id() -> None:
    registry = default_registry()
    assert registry.function_id(add) == f"step//{MOD}//add"
    assert registry.function_id(checkout) == f"workflow//{MOD}//checkout"
    assert deserialize(serialize([add, checkout])) == [add, checkout]


def test_nested_step_redefined_each_call_is_not_a_duplicate() -> None:
    def outer(n: int) -> Any:
        @step
        def inner() -> int:
            return n

        return inner

    first, second = outer(1), outer(2)
    one, two = step_definition(first), step_definition(second)
    assert one is not None
    assert two is not None
    assert one.step_id == two.step_id
    assert one is not two
    assert find_step(one.step_id) is two  # the registry follows the latest definition
    assert (first(), second()) == (1, 2)


def test_another_function_under_a_taken_id_is_a_duplicate() -> None:
    @step(name="dup_target")
    def first() -> None:
        pass

    with pytest.raises(InvalidDefinition) as info:

        @step(name="dup_target")
        def second() -> None:
            pass

    message = str(info.value)
    assert "'step//" in message
    assert "dup_target' is taken" in message
    assert re.search(r"second \(.*test_authoring\.py:\d+\)", message)
    assert re.search(r"first \(.*test_authoring\.py:\d+\)", message)
    assert "name='...'" in message

    @workflow(name="wf_dup")
    async def w1() -> None:
        pass

    with pytest.raises(InvalidDefinition, match=r"workflow id .*wf_dup' is taken"):

        @workflow(name="wf_dup")
        async def w2() -> None:
            pass


def test_re_importing_a_module_is_not_a_duplicate(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import sys

    (tmp_path / "authoring_reimport.py").write_text(
        "from durasim.runtime import step, workflow\n"
        "@step\ndef s():\n    return 1\n"
        "@workflow\nasync def w():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("authoring_reimport")
    try:
        old = step_definition(module.s)
        module = importlib.reload(module)
        new = step_definition(module.s)
        assert old is not None
        assert new is not None
        assert old.fn is not new.fn
        assert find_step("step//authoring_reimport//s") is new
        assert find_workflow("workflow//authoring_reimport//w").fn is module.w.__wrapped__
    finally:
        sys.modules.pop("authoring_reimport", None)


# -- errors ---------------------------------------------------------------------------


def test_errors_pickle_with_their_facts() -> None:
    errors: list[Exception] = []
    for make in (
        lambda: checkout(1),
        lambda: find_step("step//nowhere//z"),
        lambda: step(lambda: 1),
    ):
        with pytest.raises(Exception) as info:  # noqa: PT011 -- each kind checked below
            make()
        errors.append(info.value)
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert copy.facts == error.facts  # type: ignore[attr-defined]
    assert errors[0].workflow_id == f"workflow//{MOD}//checkout"  # type: ignore[attr-defined]
    assert errors[1].definition_id == "step//nowhere//z"  # type: ignore[attr-defined]
