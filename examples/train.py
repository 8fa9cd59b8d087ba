"""A small real training loop: linear regression by SGD on synthetic data, pure Python.

Each worker makes its own shard of ``y = 3x - 2 + noise`` (seeded by world rank), takes
``steps`` epochs of mini-batch SGD, and reports loss and weights every step. No GPU, no
downloads. Run it with ``wgstore run examples.train:train_fn --workers 4``.

Config (all optional): ``steps`` (20), ``lr`` (0.1), ``samples`` (256), ``batch`` (32),
``step_sleep_s`` (0.05, so a person can watch it), ``fail_rank`` (a rank that raises at
``fail_at_step``; for demos of failures), ``exit_rank`` (a rank whose process dies at
``fail_at_step``), ``checkpoint_every`` (report a checkpoint path every n steps).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from wgstore.orchestration import get_context, report

TRUE_W, TRUE_B = 3.0, -2.0


def _shard(rank: int, samples: int) -> list[tuple[float, float]]:
    rng = random.Random(1234 + rank)
    points = []
    for _ in range(samples):
        x = rng.uniform(-1.0, 1.0)
        points.append((x, TRUE_W * x + TRUE_B + rng.gauss(0.0, 0.1)))
    return points


def train_fn(config: dict[str, Any]) -> None:
    """Fit ``w, b`` by SGD; ``report({"step", "loss", "w", "b"})`` after every step."""
    ctx = get_context()
    steps = int(config.get("steps", 20))
    lr = float(config.get("lr", 0.1))
    batch = int(config.get("batch", 32))
    sleep_s = float(config.get("step_sleep_s", 0.05))
    data = _shard(ctx.world_rank, int(config.get("samples", 256)))
    rng = random.Random(ctx.world_rank)
    w, b = 0.0, 0.0
    for step in range(1, steps + 1):
        if step == config.get("fail_at_step", 1):
            if ctx.world_rank == config.get("fail_rank"):
                raise RuntimeError(f"rank {ctx.world_rank} failed at step {step} (fail_rank)")
            if ctx.world_rank == config.get("exit_rank"):
                os._exit(3)
        rng.shuffle(data)
        for start in range(0, len(data), batch):
            chunk = data[start : start + batch]
            grad_w = sum(2 * (w * x + b - y) * x for x, y in chunk) / len(chunk)
            grad_b = sum(2 * (w * x + b - y) for x, y in chunk) / len(chunk)
            w -= lr * grad_w
            b -= lr * grad_b
        loss = sum((w * x + b - y) ** 2 for x, y in data) / len(data)
        every = int(config.get("checkpoint_every", 0))
        checkpoint = (
            f"memory://{ctx.group_id}/step{step}"  # one checkpoint per step, all ranks
            if every and step % every == 0
            else None
        )
        report(
            {"step": step, "loss": round(loss, 6), "w": round(w, 4), "b": round(b, 4)},
            checkpoint=checkpoint,
        )
        if sleep_s:
            time.sleep(sleep_s)


def sleepy_fn(config: dict[str, Any]) -> None:
    """Report once, then sleep ``seconds`` (per rank: ``seconds + rank * stagger_s``)."""
    ctx = get_context()
    report({"started": 1})
    time.sleep(
        float(config.get("seconds", 60)) + ctx.world_rank * float(config.get("stagger_s", 0))
    )
    report({"done": 1})


not_a_function = 42
"""For tests: a name that imports but is not a function."""

lambda_fn = lambda config: None  # noqa: E731 - for tests: a lambda reachable by path is refused


def timed_report_fn(config: dict[str, Any]) -> None:
    """For bench/lifecycle.py: ``reports`` reports at ``hz``; each ``report()`` call is timed.

    Every report carries ``t`` (wall clock when called); the times spent inside ``report()``
    (seconds) are written, one per line, to ``<out_dir>/rank<r>.txt``. Every
    ``checkpoint_every``-th report carries a checkpoint path.
    """
    ctx = get_context()
    count = int(config.get("reports", 50))
    gap = 1.0 / float(config.get("hz", 10.0))
    every = int(config.get("checkpoint_every", 0))
    spent: list[float] = []
    began = time.monotonic()
    for i in range(count):
        checkpoint = (
            f"memory://{ctx.group_id}/{ctx.world_rank}/{i}" if every and i % every == 0 else None
        )
        before = time.perf_counter()
        report({"i": i, "t": time.time(), "loss": 1.0 / (i + 1)}, checkpoint=checkpoint)
        spent.append(time.perf_counter() - before)
        pause = began + (i + 1) * gap - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    with open(os.path.join(str(config["out_dir"]), f"rank{ctx.world_rank}.txt"), "w") as out:
        out.write("\n".join(f"{s:.9f}" for s in spent))
