"""The shipped contract tests (queue) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_queue import *  # noqa: F403
