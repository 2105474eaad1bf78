"""The shipped contract tests (streams) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_streams import *  # noqa: F403
