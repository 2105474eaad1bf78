"""The example runner's fast paths give what the plain code they replace gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from durasim.scenarios._example import _REJECTED, _rejections

_PIECES = st.sampled_from(
    [
        "!!",
        "!",
        "\n",
        "\r",
        "\r\n",
        "\x0b",
        "\x0c",
        "\x1c",
        "\x85",
        "\u2028",
        "\u2029",
        " ",
        "#1",
        "x",
        "  +0.000001s ",
        "d1 events.create_batch ",
        "(msg_000001) ",
        "StaleWrite: ",
        "LeaseLost: gone",
    ]
)


def _rejections_by_lines(trace: str) -> list[str]:
    """The plain definition: every line that starts with ``!!``, matched one by one."""
    found = []
    for line in trace.splitlines():
        if line.startswith("!!"):
            match = _REJECTED.match(line)
            found.append(match.group(1) if match else "?")
    return found


@given(st.lists(_PIECES, max_size=40).map("".join))
def test_rejections_match_the_line_by_line_scan(trace: str) -> None:
    assert _rejections(trace) == _rejections_by_lines(trace)


@given(st.text())
def test_rejections_match_the_line_by_line_scan_on_any_text(trace: str) -> None:
    assert _rejections(trace) == _rejections_by_lines(trace)


def test_rejections_name_each_refused_call() -> None:
    trace = (
        "#1    +0.000000s run_1 external run_created -\n"
        "!!    +0.000100s d1 events.create_batch (msg_000001) StaleWrite: stale\n"
        "..    +0.000200s note !! not at a line start\n"
        "!!    +0.000300s unparsed\r\n"
        "!!    +0.000400s d2 queue.settle LeaseLost: lost\n"
    )
    assert _rejections(trace) == ["StaleWrite", "?", "LeaseLost"]
