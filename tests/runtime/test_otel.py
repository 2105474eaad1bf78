"""The ``otel`` extra: a span per delivery and per step attempt, failures recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from durasim.runtime import Worker, enable_tracing, start, step, workflow
from durasim.runtime.lowlevel import disable_tracing, tracing_enabled
from durasim.worlds import SQLiteWorld

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk not installed")
exporters = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")


@step(max_retries=0)
def traced_fail(x: int) -> int:
    raise ValueError(f"bad {x}")


@step
def traced_ok(x: int) -> int:
    return x + 1


@workflow
async def traced(x: int) -> int:
    y = await traced_ok(x)
    try:
        await traced_fail(y)
    except Exception:
        return -y
    return y


@pytest.fixture
def spans() -> Iterator[object]:
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(exporters.SimpleSpanProcessor(exporter))
    enable_tracing(provider)
    try:
        yield exporter
    finally:
        disable_tracing()


async def test_spans_per_delivery_and_step_attempt(tmp_path: Path, spans: object) -> None:
    assert tracing_enabled()
    world = SQLiteWorld(tmp_path / "w.db")
    try:
        run = await start(traced, 1, world=world, run_id="t1")
        assert await Worker(world).run_until_complete(run) == -2
    finally:
        await world.close()
    finished = spans.get_finished_spans()  # type: ignore[attr-defined]
    by_name = {s.name: s for s in finished}
    ok = by_name["durasim.step traced_ok"]
    assert ok.attributes["durasim.run_id"] == "t1"
    assert ok.attributes["durasim.attempt"] == 1
    assert ok.attributes["durasim.outcome"] == "step_completed"
    assert ok.attributes["durasim.step_id"].endswith("traced_ok#1")
    bad = by_name["durasim.step traced_fail"]
    assert bad.attributes["durasim.outcome"] == "step_failed"
    assert bad.status.status_code.name == "ERROR"
    assert any(e.name == "exception" for e in bad.events)
    delivery = next(s for s in finished if s.name == "durasim.delivery")
    assert delivery.attributes["durasim.run_id"] == "t1"
    assert ok.parent is not None
    assert ok.parent.span_id == delivery.context.span_id  # the step ran inside the delivery


def test_tracing_is_off_by_default() -> None:
    assert not tracing_enabled()
