"""durasim.scenarios.book: scripted races, each pinning the log it must produce.

:data:`BOOK` lists every :class:`Scenario`; :func:`run_scenario` runs one in a
fresh simulation over any World factory (the conformance suite runs the whole
book against third-party Worlds).  docs/scenario-book.md describes each one;
:func:`render_book` writes that page.
"""

from durasim.worlds._public import publish as _publish

from . import _faults, _forks, _hooks, _leases, _lifecycle, _smoke  # noqa: F401  (the chapters)
from ._docs import render_book
from ._model import Scenario, ScenarioFailed, ScenarioResult, Script, run_scenario
from ._registry import SCENARIOS, in_reading_order

#: Every scenario of the book, chapter by chapter (smoke, hooks, forks, faults, leases,
#: lifecycle).
BOOK: tuple[Scenario, ...] = in_reading_order(SCENARIOS)

__all__ = [
    "BOOK",
    "Scenario",
    "ScenarioFailed",
    "ScenarioResult",
    "Script",
    "render_book",
    "run_scenario",
]

_publish(__name__, globals(), __all__)
