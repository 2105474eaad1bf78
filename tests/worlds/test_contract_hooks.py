"""The shipped contract tests (hooks) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_hooks import *  # noqa: F403
