"""The shipped contract tests (batch) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_batch import *  # noqa: F403
