"""durasim.scenarios: the user-facing top (the ``durasim`` command today; the scenario
book, exploration and the conformance suite in later issues)."""

from ._cli import main

__all__ = ["main"]
