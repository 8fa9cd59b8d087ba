"""Train functions for the controller tests on Ray (imported by path in Ray workers).

``resumable_fn`` counts steps from the checkpoint it resumes from (``get_context().checkpoint``,
``memory://ckpt/step<N>``) to ``steps``, reporting a checkpoint every step. Config:
``kill_rank`` / ``kill_at``: on a fresh start (no checkpoint) that rank SIGKILLs its own process
after reporting step ``kill_at`` (with ``sync``, a folder: once every other rank has stored its
report of that step, so the step is committed however far behind the others run); ``fail`` (a
folder): every rank raises after its first report, on every attempt, once every rank of its
group got there (so all fail at one moment); ``wait_for``: before the last step, wait for this
file to exist (so a test can act while training runs); ``step_sleep_s``; ``raise_rank`` / ``raise_after`` with ``sync`` (a
folder): on a fresh start that rank raises after reporting step ``raise_after``, once every other
rank has stored its report of the next step (so the log holds a step only some ranks reported).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from wgstore.orchestration import get_context, preemption_notice, report


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
        sync = Path(config["sync"]) if config.get("sync") else None
        if sync is not None:  # this rank's report of the step is stored: the others may go on
            (sync / f"{ctx.group_id}-{ctx.world_rank}-step{step}").touch()
            _raise_after_the_others(ctx, config, sync, step, resumed)
        if config.get("fail"):
            _all_ranks_here(ctx, Path(config["fail"]))
            raise RuntimeError(f"rank {ctx.world_rank} fails on purpose at step {step}")
        if (
            resumed is None
            and ctx.world_rank == config.get("kill_rank")
            and step == config.get("kill_at")
        ):
            if sync is not None:
                _wait_for_the_others(ctx, sync, step)
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


def _raise_after_the_others(
    ctx: Any, config: dict[str, Any], folder: Path, step: int, resumed: str | None
) -> None:
    """The raising rank, at its step, waits (up to 60 s) for every other rank's mark of the next
    step, then raises."""
    if resumed is not None or ctx.world_rank != config.get("raise_rank"):
        return
    if step != config.get("raise_after"):
        return
    _wait_for_the_others(ctx, folder, step + 1)
    raise RuntimeError(f"rank {ctx.world_rank} fails on purpose after step {step}")


def _wait_for_the_others(ctx: Any, folder: Path, step: int) -> None:
    """Wait (up to 60 s) until every other rank marked its report of ``step`` as stored."""
    others = [r for r in range(ctx.world_size) if r != ctx.world_rank]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all((folder / f"{ctx.group_id}-{r}-step{step}").exists() for r in others):
            return
        time.sleep(0.01)


def elastic_fn(config: dict[str, Any]) -> dict[str, Any]:
    """Steps from the checkpoint it resumes from, a checkpoint every step, every
    ``step_sleep_s``, until the file ``stop`` exists and this attempt reported twice (the
    elastic tests stop it once the cluster did what they wanted); each report says whether the
    group had a preemption notice (``preemption_notice()``)."""
    ctx = get_context()
    resumed = ctx.checkpoint
    step = int(resumed.rsplit("step", 1)[1]) if resumed else 0
    reports = 0
    while not (Path(config["stop"]).exists() and reports >= 2):
        step += 1
        notice = preemption_notice()  # a node going: say so in the report it checkpoints
        report(
            {
                "step": step,
                "world_size": ctx.world_size,
                "resumed_from": resumed,
                "preemption_seen": notice is not None,
            },
            checkpoint=f"memory://ckpt/step{step}",
        )
        reports += 1
        time.sleep(float(config.get("step_sleep_s", 0.2)))
    return {"end": step}
