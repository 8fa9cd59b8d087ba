"""Measure what encoding one event costs, with the checks that refuse values which would not read
back exactly (NaN/inf, -0.0, floats >= 1e16, sets, bytes in untyped fields).

Three payloads: the poll-like event of ``bench/store.py`` (its fields cannot hold such values, so
it skips the check), a ``WorkerReported`` with a metrics dict (an ``Any``-typed field: checked),
and orchestration-like append metadata (always checked). Prints microseconds per item, the
median of several rounds. Run ``python bench/encode.py``; compare against an older checkout by
running the same file with that checkout's interpreter.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import make_event  # bench/store.py, next to this file

from wgstore.events.codec import Codec, canonical_json
from wgstore.events.worker_group import WorkerReported

ITEMS = 5000
ROUNDS = 9


def per_item_us(encode: Callable[[Any], object], items: list[Any]) -> float:
    """The median over ``ROUNDS`` rounds of the time ``encode`` takes per item, in µs."""
    runs = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for item in items:
            encode(item)
        runs.append((time.perf_counter() - started) / len(items) * 1e6)
    return statistics.median(runs)


def main() -> int:
    """Print the encode cost of each payload."""
    codec = Codec()
    polls = [make_event(i) for i in range(ITEMS)]
    reports = [
        WorkerReported(
            world_rank=1,
            index=i,
            metrics={"loss": 0.5 / (i + 1), "acc": 0.9, "step": i, "lr": 3e-4},
            checkpoint=None,
        )
        for i in range(ITEMS)
    ]
    metadata = [
        {
            "host": "node-1",
            "pid": 4242,
            "wgstore": "0.1",
            "command_id": str(uuid.uuid4()),
            "causation_id": str(uuid.uuid4()),
            "attempt": 1,
        }
        for _ in range(ITEMS)
    ]
    print(f"poll event (not checked)   {per_item_us(codec.encode, polls):6.2f} µs")
    print(f"report event (metrics Any) {per_item_us(codec.encode, reports):6.2f} µs")
    print(f"append metadata            {per_item_us(canonical_json, metadata):6.2f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
