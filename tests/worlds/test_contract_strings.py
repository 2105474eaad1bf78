"""The shipped contract tests (strings) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_strings import *  # noqa: F403
