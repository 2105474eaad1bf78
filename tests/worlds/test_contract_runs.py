"""The shipped contract tests (runs) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_runs import *  # noqa: F403
