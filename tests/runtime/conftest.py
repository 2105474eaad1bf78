"""Fixtures shared by the runtime's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import durasim.runtime._heartbeat as beats

BOUND = 60.0  # seconds a join may take at most (never reached when the code is right)


@pytest.fixture
def own_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[beats._Hub]:
    """A heartbeat hub (and so a heartbeat thread) of the test's own.

    The process's one heartbeat thread serves every worker of every test that ran
    in this process: a test that asserts the thread ends, or how many there are,
    must not depend on no earlier test having left a worker on it.  Heartbeats made
    during the test join this hub; at its end the hub's thread is made to end (no
    lingering), and joined.
    """
    hub = beats._Hub()
    monkeypatch.setattr(beats, "_hub", hub)
    yield hub
    monkeypatch.setattr(beats.Heartbeat, "LINGER_SECONDS", 0.0)
    with hub.lock:
        thread = hub.thread
        hub.poke()
    if thread is not None:
        thread.join(timeout=BOUND)
