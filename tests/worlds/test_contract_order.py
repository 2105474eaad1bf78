"""The shipped contract tests (order) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_order import *  # noqa: F403
