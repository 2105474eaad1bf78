"""The shipped contract tests (queue races, delays, next_due, keys) on every World kind."""

from durasim.scenarios.conformance.suite.test_contract_queue_races import *  # noqa: F403
