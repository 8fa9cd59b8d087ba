"""Train functions for the Ray Train parity tests (imported by path in Ray workers)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from wgstore.orchestration import get_context


def returning_fn(config: dict[str, Any]) -> dict[str, Any]:
    """Return a JSON-able value naming the rank (after ``sleep_s``)."""
    time.sleep(float(config.get("sleep_s", 0)))
    rank = get_context().world_rank
    return {"rank": rank, "loss": 0.5 / (rank + 1), "steps": (1, 2)}


def unjsonable_fn(config: dict[str, Any]) -> object:
    """Return something the log cannot hold."""
    return object()


def env_fn(config: dict[str, Any]) -> dict[str, Any]:
    """Return the environment variables named in ``config["names"]`` and the working dir."""
    return {
        "env": {name: os.environ.get(name) for name in config.get("names", [])},
        "cwd": os.getcwd(),
        "files": sorted(p.name for p in Path.cwd().iterdir())[:20],
    }


def hooked_fn(config: dict[str, Any]) -> None:
    """Register a shutdown hook that writes ``<out_dir>/rank<r>.bye`` (after ``hook_sleep_s``),
    then train until shut down; ``hook_raise`` makes the hook raise after writing."""
    from wgstore.orchestration import on_shutdown

    rank = get_context().world_rank
    out = Path(config["out_dir"])

    def goodbye() -> None:
        time.sleep(float(config.get("hook_sleep_s", 0)))
        (out / f"rank{rank}.bye").write_text(f"rank {rank} shut down cleanly\n")
        if config.get("hook_raise"):
            raise RuntimeError(f"hook of rank {rank} failed")

    on_shutdown(goodbye)
    (out / f"rank{rank}.ready").write_text("ready\n")
    time.sleep(600)


def checkpoint_fn(config: dict[str, Any]) -> dict[str, Any]:
    """Report once with a checkpoint (``same``: one path for all ranks, else one per rank);
    return the refusal, if any. Rank r reports after ``r * stagger_s``."""
    from wgstore.orchestration import report
    from wgstore.orchestration.errors import CheckpointMismatchError

    ctx = get_context()
    time.sleep(ctx.world_rank * float(config.get("stagger_s", 0.3)))
    path = "memory://ckpt/0" if config.get("same") else f"memory://ckpt/rank{ctx.world_rank}"
    try:
        report({"loss": 1.0}, checkpoint=path)
    except CheckpointMismatchError as error:
        return {"refused": str(error)}
    return {"refused": None}
