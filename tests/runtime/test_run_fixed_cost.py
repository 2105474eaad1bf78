"""What a run pays once is built lazily, with the same values as when built up front."""

from __future__ import annotations

import hashlib
import random
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime._determinism import RunDeterminism


def _eager(run_id: str) -> random.Random:
    """The generator as the runtime made it for every run before it was lazy."""
    seed = int.from_bytes(hashlib.sha256(f"durasim:{run_id}".encode()).digest()[:16], "big")
    return random.Random(seed)


def test_the_generator_is_made_only_when_drawn_from() -> None:
    run = RunDeterminism(run_id="run-1", clock=lambda: 0.0)
    assert run._random is None
    first = run.random
    assert run.random is first  # one generator per run, kept


@given(run_id=st.text(min_size=1, max_size=40), draws=st.integers(min_value=1, max_value=5))
@settings(max_examples=50, deadline=None)
def test_a_lazy_generator_draws_what_an_eager_one_drew(run_id: str, draws: int) -> None:
    run = RunDeterminism(run_id=run_id, clock=lambda: 0.0)
    eager = _eager(run_id)
    assert [run.random.random() for _ in range(draws)] == [eager.random() for _ in range(draws)]
    assert run.random.getstate() == eager.getstate()


def test_workflow_randomness_is_the_run_ids_whenever_first_drawn() -> None:
    run = RunDeterminism(run_id="run-2", clock=lambda: 0.0)
    eager = _eager("run-2")
    with run.active():
        drawn = (random.random(), uuid.uuid4(), random.Random().random())
    expected_first = eager.random()
    expected_uuid = uuid.UUID(int=eager.getrandbits(128), version=4)
    local = random.Random(eager.getrandbits(128))
    assert drawn == (expected_first, expected_uuid, local.random())
