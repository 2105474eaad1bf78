"""Workflows that misuse user-given strings (imported by tests/test_hostile_input.py).

Each takes the *name* of a hostile string and builds it inside the workflow, so
the run's input stays plain JSON and the misuse happens at the call under test.
"""

from __future__ import annotations

from typing import Any

from durasim.runtime import cancellation_token, create_hook, create_webhook, workflow

BAD_TOKENS: dict[str, str] = {
    "surrogate": "tok\ud800",
    "escaped-byte": "tok\udcff",
    "nul": "tok\x00en",
    "percent-00-decoded": "a\x00",
    "space": "two words",
    "newline": "line\nbreak",
    "empty": "",
    "too-long": "t" * 257,
    "megabyte": "t" * 1_000_000,
}

BAD_REASONS: dict[str, str] = {
    "surrogate": "why\ud800",
    "nul": "why\x00",
    "too-long": "r" * 4097,
}


@workflow(module="wf_hostile")
async def hook_with_token(kind: str) -> Any:
    hook = create_hook(token=BAD_TOKENS[kind])
    return await hook


@workflow(module="wf_hostile")
async def webhook_with_token(kind: str) -> Any:
    hook = create_webhook(token=BAD_TOKENS[kind])
    return await hook


@workflow(module="wf_hostile")
async def caught_bad_token(kind: str) -> str:
    try:
        create_hook(token=BAD_TOKENS[kind])
    except ValueError as exc:  # InvalidRequest is a ValueError: the workflow may recover
        return f"refused: {getattr(exc, 'rule', '?')}"
    return "accepted"


@workflow(module="wf_hostile")
async def cancel_with_reason(kind: str) -> bool:
    token = cancellation_token()
    token.cancel(BAD_REASONS[kind])
    return token.cancelled
