"""The shipped contract tests (input) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_input import *  # noqa: F403
