"""Serialization throughput: durasim vs json vs pickle, in the same run.

Run by hand: ``.venv/bin/python bench/bench_serialization.py``.  Prints a
Markdown table (median of several repetitions) for:

* ``step payload (JSON-only)``: a dict of 20 mixed JSON fields, the typical step
  argument; compared with json and pickle;
* ``step payload (extended)``: the same with datetime, bytes, tuple, set, Decimal
  and UUID fields (json cannot encode it; compared with pickle only);
* ``1 MB payload (JSON-only)``: a list of records totalling about 1 MB of JSON.

The ratio column is durasim's time over json's (1.00x = as fast as json).
"""

from __future__ import annotations

import json
import pickle
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from durasim.runtime.serialization import deserialize, serialize

REPEATS = 7


def step_payload(i: int = 0) -> dict[str, Any]:
    return {
        "order_id": f"ord_{i:08d}",
        "customer_id": 123456 + i,
        "amount": 1999,
        "currency": "EUR",
        "tax_rate": 0.21,
        "paid": True,
        "refunded": False,
        "coupon": None,
        "email": "ada@example.com",
        "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
        "address": {"street": "1 Main St", "city": "Springfield", "zip": "12345"},
        "notes": "leave at the door",
        "attempt": 1,
        "score": 0.87,
        "flags": ["express", "gift"],
        "created_at": "2024-05-01T12:00:00Z",
        "locale": "en-GB",
        "weight_kg": 1.25,
        "priority": 3,
        "metadata": {"source": "web", "campaign": "spring"},
    }


def extended_payload() -> dict[str, Any]:
    payload = step_payload()
    payload.update(
        created_at=datetime(2024, 5, 1, 12, tzinfo=UTC),
        receipt=b"\x00" * 64,
        dims=(10, 20, 30),
        flags={"express", "gift"},
        amount=Decimal("19.99"),
        coupon=uuid.UUID(int=7),
    )
    return payload


def megabyte_payload() -> list[dict[str, Any]]:
    records = []
    size = 0
    i = 0
    while size < 1_000_000:
        record = step_payload(i)
        records.append(record)
        size += len(json.dumps(record))
        i += 1
    return records


def _median_seconds(fn: Callable[[], object], loops: int) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops)
    return statistics.median(times)


def _loops_for(fn: Callable[[], object]) -> int:
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, int(0.2 / once))  # about 0.2 s per repetition


Codec = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]

CODECS: dict[str, Codec] = {
    "durasim": (serialize, deserialize),
    "json": (lambda v: json.dumps(v).encode(), json.loads),
    "pickle": (lambda v: pickle.dumps(v, protocol=5), pickle.loads),
}


def measure(name: str, value: Any, codecs: list[str]) -> list[str]:
    rows = []
    json_times: dict[str, float] = {}
    results: list[tuple[str, str, float, int]] = []
    for codec in codecs:
        encode, decode = CODECS[codec]
        data = encode(value)
        ops: list[tuple[str, Callable[[], object]]] = [
            ("encode", lambda encode=encode: encode(value)),
            ("decode", lambda decode=decode, data=data: decode(data)),
        ]
        for op, fn in ops:
            seconds = _median_seconds(fn, _loops_for(fn))
            results.append((codec, op, seconds, len(data)))
            if codec == "json":
                json_times[op] = seconds
    for codec, op, seconds, size in results:
        ratio = f"{seconds / json_times[op]:.2f}x" if op in json_times else "n/a"
        rows.append(
            f"| {name} | {codec} | {op} | {size:,} | {size / seconds / 1e6:,.1f} | "
            f"{1 / seconds:,.0f} | {seconds * 1e6:,.1f} | {ratio} |"
        )
    return rows


def main() -> None:
    print("| payload | codec | op | bytes | MB/s | values/s | us/value | vs json |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for row in measure("step payload (JSON-only)", step_payload(), ["durasim", "json", "pickle"]):
        print(row)
    for row in measure("step payload (extended)", extended_payload(), ["durasim", "pickle"]):
        print(row)
    for row in measure(
        "1 MB payload (JSON-only)", megabyte_payload(), ["durasim", "json", "pickle"]
    ):
        print(row)


if __name__ == "__main__":
    main()
