"""durasim.scenarios.conformance: does a World keep the contract? (docs/conformance.md).

The contract tests ship in :mod:`durasim.scenarios.conformance.suite` as pytest
modules; they take one fixture, ``durasim_world_factory``, that returns a
factory ``factory(setup: WorldSetup) -> World``.
"""

__all__: list[str] = []
