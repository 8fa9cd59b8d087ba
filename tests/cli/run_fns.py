"""Train functions for the ``wgstore run`` tests (imported by path in Ray workers).

``chatty_fn`` prints a line of its own on each rank, reports step 1, waits for the file
``config["release"]`` (so a test can look at the run while it trains), then reports step 2.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from wgstore.orchestration import get_context, report

NAMES = ("alpha", "beta", "gamma", "delta")
"""Words, not numbers: Ray folds printed lines that differ only in numbers into one."""


def chatty_fn(config: dict[str, Any]) -> None:
    """See the module docstring."""
    rank = get_context().world_rank
    print(f"train function {NAMES[rank]} says hello", flush=True)
    report({"step": 1, "loss": 0.5})
    deadline = time.monotonic() + 180
    while not Path(config["release"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    report({"step": 2, "loss": 0.25})
