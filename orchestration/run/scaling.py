"""How many workers of an elastic run fit, and a scaling decision in words. Pure.

An elastic run (``ScalingConfig(min_workers=...)``) starts each group at the size that fits,
between ``min_workers`` and ``num_workers``; the controller looks at the cluster
(:class:`ClusterView`, made by :mod:`wgstore.orchestration.run.cluster_probe` from Ray, or by a test)
and :func:`~wgstore.orchestration.run.decide.decide` chooses from it.

Ray Train 2.60's ``ElasticScalingPolicy`` counts, per node, how many workers the resources Ray's
``AutoscalingCoordinator`` reserved for the run can hold (``floor`` of each resource over the
worker's need, the smallest of them), sums the nodes and caps the sum at ``max_workers``.
:func:`workers_that_fit` counts the same way, over what each node has free for the run now
(its free resources, plus what the run's own running group holds there), leaving out nodes that
announced their preemption: they are going.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from wgstore.events.run import RankError, ResizeCause, ScalingConfig

__all__ = ["ClusterView", "failure_summary", "resize_reason", "workers_that_fit"]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the cluster offers an elastic run, as the controller looked at it.

    Args:
        fits: how many of the run's workers fit now (the run's own running group counted as
            the run's), capped at its ``num_workers``; ``None`` when only the nodes going were
            looked at.
        draining: nodes that announced they are going (a drain, a preemption notice), by node
            id, with the time they go in epoch milliseconds (``None``: no deadline given).
    """

    fits: int | None
    draining: Mapping[str, int | None] = field(default_factory=dict)


def workers_that_fit(
    free_by_node: Mapping[str, Mapping[str, float]],
    resources_per_worker: Mapping[str, float],
    max_workers: int,
    *,
    strategy: str = "PACK",
    draining: Mapping[str, int | None] | None = None,
) -> int:
    """How many workers fit on ``free_by_node`` (each node's resources free for the run), as
    Ray's elastic policy counts: per node the fewest of ``free / need`` over the worker's
    resources, summed over the nodes (``STRICT_PACK``: the best single node; ``STRICT_SPREAD``:
    one a node), capped at ``max_workers``. Draining nodes count for nothing."""
    need = {name: amount for name, amount in resources_per_worker.items() if amount > 0}
    going = draining or {}
    per_node = []
    for node, free in free_by_node.items():
        if node in going:
            continue
        if not need:
            per_node.append(max_workers)
            continue
        per_node.append(
            min(math.floor(free.get(name, 0.0) / amount + 1e-9) for name, amount in need.items())
        )
    if not per_node:
        return 0
    if strategy == "STRICT_PACK":
        total = max(per_node)
    elif strategy == "STRICT_SPREAD":
        total = sum(1 for count in per_node if count > 0)
    else:
        total = sum(per_node)
    return max(0, min(int(total), max_workers))


def _workers(count: int) -> str:
    return f"{count} worker" + ("" if count == 1 else "s")


def resize_reason(
    cause: ResizeCause,
    previous_workers: int | None,
    num_workers: int,
    scaling: ScalingConfig | None,
    failure_reason: str = "",
) -> str:
    """A scaling decision in words: what fits, against what the run had and why it changed."""
    fits = f"{_workers(num_workers)} fit" + ("s" if num_workers == 1 else "")
    if scaling is not None and scaling.elastic:
        fits += f" (range {scaling.describe()})"
    was = f"; was {previous_workers}" if previous_workers is not None else ""
    if cause is ResizeCause.INITIAL:
        return f"start: {fits}"
    if cause is ResizeCause.GREW:
        return f"more resources available: {fits}{was}"
    if cause is ResizeCause.SHRANK:
        return f"fewer resources available: {fits}{was}"
    what = {
        ResizeCause.START_RETRY: "the start failed",
        ResizeCause.PREEMPTION: "a preemption",
        ResizeCause.FAILURE: "a failure",
    }[cause]
    return f"restart after {what} ({failure_reason or 'no detail'}): {fits}{was}"


_NODE_LOST = ("its node has died", "node was terminated", "node died")
"""What Ray says of an actor whose node went away (``ActorDiedError``'s message)."""


def failure_summary(kind: str, errors: tuple[RankError, ...]) -> str:
    """A failure in a few words, for a scaling decision's reason: ``node lost: rank 1, rank 2``
    when Ray says the failed workers' node died, else ``worker_group failure: rank 1
    ValueError``."""
    lost = [e.world_rank for e in errors if any(m in e.error.message for m in _NODE_LOST)]
    if lost and len(lost) == len(errors):
        return "node lost: " + ", ".join(f"rank {rank}" for rank in lost)
    ranks = ", ".join(
        f"rank {e.world_rank} {e.error.type}" if e.world_rank >= 0 else e.error.type
        for e in errors[:3]
    )
    return f"{kind} failure" + (f": {ranks}" if ranks else "")
