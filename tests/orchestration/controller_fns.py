"""Train functions for the controller tests on Ray (imported by path in Ray workers).

``resumable_fn`` counts steps from the checkpoint it resumes from (``get_context().checkpoint``,
``memory://ckpt/step<N>``) to ``steps``, reporting a checkpoint every step. Config:
``kill_rank`` / ``kill_at``: on a fresh start (no checkpoint) that rank SIGKILLs its own process
after reporting step ``kill_at``; ``fail`` (a folder): every rank raises after its first report,
on every attempt, once every rank of its group got there (so all fail at one moment); ``wait_for``: before the last step, wait for this file to exist (so a test can act
while training runs); ``step_sleep_s``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from wgstore.orchestration import get_context, report


def resumable_fn(config: dict[str, Any]) -> dict[str, Any]:
    """See the module docstring; returns where it started and ended."""
    ctx = get_context()
    resumed = ctx.checkpoint
    start = int(resumed.rsplit("step", 1)[1]) if resumed else 0
    steps = int(config.get("steps", 3))
    wait_for = config.get("wait_for")
    for step in range(start + 1, steps + 1):
        if wait_for and step == steps:
            deadline = time.monotonic() + 120
            while not Path(wait_for).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        report({"step": step, "resumed_from": resumed}, checkpoint=f"memory://ckpt/step{step}")
        if config.get("fail"):
            _all_ranks_here(ctx, Path(config["fail"]))
            raise RuntimeError(f"rank {ctx.world_rank} fails on purpose at step {step}")
        if (
            resumed is None
            and ctx.world_rank == config.get("kill_rank")
            and step == config.get("kill_at")
        ):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(config.get("step_sleep_s", 0.02)))
    return {"start": start, "end": steps}


def _all_ranks_here(ctx: Any, folder: Path) -> None:
    """Mark this rank as here, then wait (up to 60 s) until every rank of the group is."""
    (folder / f"{ctx.group_id}-{ctx.world_rank}").touch()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all((folder / f"{ctx.group_id}-{r}").exists() for r in range(ctx.world_size)):
            return
        time.sleep(0.01)
