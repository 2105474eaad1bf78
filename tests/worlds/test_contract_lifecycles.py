"""The shipped contract tests (lifecycles) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_lifecycles import *  # noqa: F403
