"""The Vercel bridge: durasim conformance --vercel over real Vercel World packages (npm).

The packages are pinned and installed once into the cache (``.ci/run`` does it first).
Without the npm registry (and no cached copy) these tests skip with the reason, except in
CI, where they fail.  world-postgres runs on the PostgreSQL of ``DURASIM_PG_DSN``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from datetime import timedelta
from importlib import resources
from pathlib import Path

import pytest

from durasim.scenarios._cli import main
from durasim.scenarios.conformance import check_repros, run_vercel_conformance
from durasim.worlds import (
    CountingIds,
    EventRequest,
    FactoryError,
    FixedClock,
    InstalledPackage,
    NotExpressible,
    RunExpired,
    VercelFactory,
    WorldSetup,
    install_vercel_package,
    vercel_factory,
)

WORLD_LOCAL = "@workflow/world-local@4.4.1"
WORLD_POSTGRES = "@workflow/world-postgres@4.3.7"
PLANTED = Path(__file__).with_name("fake-world")

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not on PATH")


def _installed(spec: str) -> InstalledPackage:
    try:
        return install_vercel_package(spec)
    except FactoryError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{spec} is not cached and the npm registry is unreachable: {exc}")


def _setup(tmp_path: Path, clock: FixedClock) -> WorldSetup:
    return WorldSetup(clock=clock, ids=CountingIds(), directory=tmp_path)


def test_without_node_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["conformance", "--vercel", WORLD_LOCAL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "Node.js" in err[0]
    assert "install" in err[0]


def test_bytes_dates_and_the_virtual_clock_cross_the_bridge(tmp_path: Path) -> None:
    _installed(WORLD_LOCAL)
    clock = FixedClock()
    factory = vercel_factory(WORLD_LOCAL)
    world = factory(_setup(tmp_path, clock))

    async def scenario() -> None:
        payload = bytes(range(256))
        created = await world.events.create(
            "r1", EventRequest.of("run_created", workflow_name="wf", input=payload)
        )
        assert created.run.run_id == "r1"
        assert created.run.input == payload
        assert created.event is not None
        assert created.event.created_at == clock.now()
        clock.advance(90)
        started = await world.events.create("r1", EventRequest.of("run_started"))
        assert started.event is not None
        assert started.event.seq == 2
        assert started.event.created_at == clock.now()
        done = await world.events.create("r1", EventRequest.of("run_completed", output=b"\0ok"))
        assert done.run.output == b"\0ok"
        with pytest.raises(RunExpired):
            await world.events.create("r1", EventRequest.of("run_started"))
        with pytest.raises(NotExpressible):
            await world.events.create(
                "r1", EventRequest.of("run_started"), in_band=True, expected_seq_in_band=1
            )
        page = await world.events.list("r1")
        assert [e.seq for e in page.events] == [1, 2, 3]
        assert page.events[2].created_at - page.events[0].created_at == timedelta(seconds=90)

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(world.close())
        factory.close()


def test_a_planted_violation_is_reported_with_a_plain_node_reproduction(tmp_path: Path) -> None:
    local = _installed(WORLD_LOCAL)
    entry = local.directory / "node_modules" / "@workflow" / "world-local" / "dist" / "index.js"
    factory = VercelFactory(str(PLANTED), config={"innerEntry": entry.as_uri()})
    verdict = run_vercel_conformance(
        factory, layers=["contract"], only="test_terminal_run_cannot_start_again"
    )
    names = [f.name for f in verdict.violations]
    assert names, verdict.render()
    assert all("test_terminal_run_cannot_start_again" in name for name in names)
    assert verdict.line.startswith(f"{len(names)} violations, ")
    written = verdict.write_repros(tmp_path / "repro")
    assert written
    script = written[0].read_text()
    assert "import(" in script
    assert "events.create" in script
    # The script replays durasim's calls in plain Node and judges them: the planted
    # World's second run_started is accepted again, as durasim saw it.
    results = check_repros(factory, written)
    assert [reproduced for _, reproduced, _ in results] == [True] * len(written), results


def test_a_reproduction_that_no_longer_happens_says_so(tmp_path: Path) -> None:
    """The same calls on the unplanted World: the script runs, reports no reproduction."""
    local = _installed(WORLD_LOCAL)
    entry = local.directory / "node_modules" / "@workflow" / "world-local" / "dist" / "index.js"
    factory = VercelFactory(str(PLANTED), config={"innerEntry": entry.as_uri()})
    verdict = run_vercel_conformance(
        factory, layers=["contract"], only="test_terminal_run_cannot_start_again"
    )
    [planted] = verdict.write_repros(tmp_path / "repro")[:1]
    script = tmp_path / "honest.mjs"
    script.write_text(
        planted.read_text().replace(
            'import("durasim-planted-world")', 'import("@workflow/world-local")'
        )
    )
    assert script.read_text() != planted.read_text()
    done = vercel_factory(WORLD_LOCAL).run_script(script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not reproduced in 1 round(s)" in done.stdout
    assert "durasim saw" in done.stdout  # the answer that differs is named


def _verdict_over(factory: VercelFactory, tmp_path: Path) -> None:
    verdict = run_vercel_conformance(factory, layers=["contract", "concurrency"], examples=3)
    text = verdict.render()
    (tmp_path / "verdict.txt").write_text(text)
    # Every contract violation comes with a plain-Node script that reproduces it in plain
    # Node (deterministic calls); a race's script (when its witness showed the race again)
    # runs its rounds and says how many reproduced: a timing, not asserted here.
    contract = [f.name for f in verdict.violations if f.layer == "contract"]
    assert all(name in verdict.repros for name in contract), text
    written = verdict.write_repros(tmp_path / "repro")
    assert len(written) >= len(contract)
    races = {path.name for path in written if "-group-" in path.name}
    # A race's script runs RACE_ROUNDS (200) rounds for a user; here 5 show it runs its
    # rounds and reports them (the count reproduced is a timing, not asserted).
    for script, reproduced, last in check_repros(factory, written, race_rounds=5):
        if script.name in races:
            assert ("REPRODUCED in" in last and " of 5 round(s)" in last) or (
                "not reproduced in 5 round(s)" in last
            ), last
        else:
            assert reproduced, (script.name, last)
    for script in written:
        if script.name in races:
            # ROUNDS must be a whole number: a bad one is refused before any call.
            refused = factory.run_script(script, args=("0",))
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert "ROUNDS must be a whole number of rounds, 1 or more, not 0" in refused.stderr
            assert "#1 " not in refused.stdout
            break
    layers = {layer.name: layer for layer in verdict.report.layers}
    assert layers["contract"].passed > 0, text
    assert not layers["contract"].not_run
    assert layers["concurrency"].status != "not run", text
    # Every failure is a violation or a documented difference; the stale list is empty.
    failures = sum(len(layer.failed) for layer in verdict.report.layers)
    assert failures == len(verdict.violations) + len(verdict.differences)
    assert not verdict.stale, text


def test_world_local_contract_and_concurrency(tmp_path: Path) -> None:
    _installed(WORLD_LOCAL)
    _verdict_over(vercel_factory(WORLD_LOCAL), tmp_path)


def test_world_postgres_contract_and_concurrency(tmp_path: Path) -> None:
    dsn = os.environ.get("DURASIM_PG_DSN")
    if not dsn:
        if os.environ.get("DURASIM_REQUIRE_PG"):
            pytest.fail("DURASIM_REQUIRE_PG is set but DURASIM_PG_DSN is not")
        pytest.skip("DURASIM_PG_DSN is not set (postgresql://postgres@127.0.0.1:5432/test)")
    _installed(WORLD_POSTGRES)
    _verdict_over(vercel_factory(WORLD_POSTGRES, database_url=dsn), tmp_path)


def test_the_host_exits_when_its_parent_goes(tmp_path: Path) -> None:
    package = _installed(WORLD_LOCAL)
    host_script = resources.files("durasim.worlds") / "vercel_host.mjs"
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, str(host_script), str(package.directory), package.name],
        input=b"",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0


@pytest.mark.parametrize("rounds", [0, -3, True, 2.5, "5"])
def test_race_rounds_must_be_a_whole_number(rounds: object) -> None:
    with pytest.raises(ValueError, match=r"race_rounds=.*pass a whole number of rounds, 1 or more"):
        check_repros(vercel_factory(WORLD_LOCAL), [], race_rounds=rounds)  # type: ignore[arg-type]
