"""Train functions for the fault-matrix tests (imported by path in Ray workers).

``faulty_fn`` reports ``reports`` times and then dies the way its rank is told to. After each
``report()`` returns it appends the report's index to ``<out_dir>/rank<r>.txt`` with one
``os.write`` (in the kernel at once, so it survives a SIGKILL of the process right after): the
test then knows exactly which reports returned.

Config: ``out_dir``; ``reports`` (how many before dying); ``kinds`` (``{"<rank>": "sigkill" |
"exit" | "raise"}``; a rank not named finishes normally); ``checkpoint`` (the last report
carries a checkpoint path); ``wait_for`` (a file name in ``out_dir``: after the reports, wait
for it to exist before dying or finishing, e.g. until the test asked for shutdown).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from wgstore.orchestration import get_context, report


def checkpoint_path(group_id: str, rank: int, index: int) -> str:
    """The checkpoint a rank reports with its report ``index``: one path for every rank (Ray
    Train's consolidation, and wgstore's report(), refuse different paths at one index)."""
    return f"memory://{group_id}/report{index}"


def faulty_fn(config: dict[str, Any]) -> None:
    """Report, record what returned, then die as told (see the module docstring)."""
    ctx = get_context()
    rank = ctx.world_rank
    out = Path(config["out_dir"])
    count = int(config.get("reports", 1))
    fd = os.open(out / f"rank{rank}.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for index in range(count):
        last = index == count - 1
        checkpoint = (
            checkpoint_path(ctx.group_id, rank, index)
            if last and config.get("checkpoint")
            else None
        )
        report({"index": index, "loss": 1.0 / (index + 1)}, checkpoint=checkpoint)
        os.write(fd, f"{index}\n".encode())
    os.close(fd)
    wait_for = config.get("wait_for")
    if wait_for:
        deadline = time.monotonic() + 60
        while not (out / wait_for).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    kind = dict(config.get("kinds", {})).get(str(rank))
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "exit":
        os._exit(7)
    elif kind == "raise":
        raise RuntimeError(f"rank {rank} raised after {count} report(s)")
