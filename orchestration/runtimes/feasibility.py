"""Can the cluster ever fit a worker group? Ray Train 2.60's insufficient-resources check. Pure.

Ray Train checks, before it asks for the placement group, that ``num_workers`` times each
resource of a worker is within the most the cluster could ever have (its autoscaler's cluster
config), and fails at once with ``InsufficientClusterResourcesError`` instead of waiting out the
placement-group timeout. wgstore does the same. Where Ray has no cluster config (a fixed cluster,
e.g. a local one, where Ray skips the check), wgstore checks against the nodes alive now, which
is then all the cluster will have: the total over all nodes, one bundle on some node, all
bundles on one node for ``STRICT_PACK``, one node per bundle for ``STRICT_SPREAD``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["insufficient_resources"]

_FIX = "Please reduce `num_workers`, lower resource requirements, or increase the cluster size."
_HEAD = "Insufficient cluster resources to launch training workers.\n"


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _fits(bundle: Mapping[str, float], node: Mapping[str, float]) -> bool:
    return all(amount <= node.get(name, 0) for name, amount in bundle.items() if amount > 0)


def insufficient_resources(
    resources_per_worker: Mapping[str, float],
    num_workers: int,
    strategy: str,
    *,
    max_cluster_resources: Mapping[str, float] | None = None,
    nodes: Sequence[Mapping[str, float]] = (),
) -> str | None:
    """Why the group can never be placed (Ray's message), or ``None`` when it might be.

    Args:
        resources_per_worker: one worker's bundle.
        num_workers: how many bundles.
        strategy: the placement strategy.
        max_cluster_resources: the most the cluster can scale to (Ray's
            ``get_max_resources_from_cluster_config()``); when given, only it is checked, as Ray
            does, since nodes may be added.
        nodes: the total resources of each alive node, used when there is no cluster config.
    """
    wanted = {k: v for k, v in resources_per_worker.items() if v > 0}
    if max_cluster_resources:
        limits: Mapping[str, float] = max_cluster_resources
    elif nodes:
        summed: dict[str, float] = {}
        for node in nodes:
            for name, amount in node.items():
                summed[name] = summed.get(name, 0) + amount
        limits = summed
    else:
        return None
    for name, amount in wanted.items():
        total = amount * num_workers
        available = limits.get(name, 0)
        if total > available:
            return (
                f'{_HEAD}The worker group requires {{"{name}": {total}}} but the cluster '
                f'only has a maximum of {{"{name}": {available}}} resources.\n{_FIX}'
            )
    if max_cluster_resources or not nodes:
        return None
    fitting = sum(1 for node in nodes if _fits(wanted, node))
    if fitting == 0:
        return (
            f"{_HEAD}One worker requires {_fmt(wanted)} but no node of the cluster has that "
            f"much (nodes: {len(nodes)}).\n{_FIX}"
        )
    if strategy == "STRICT_PACK":
        packed = {name: amount * num_workers for name, amount in wanted.items()}
        if not any(_fits(packed, node) for node in nodes):
            return (
                f"{_HEAD}Strategy STRICT_PACK puts all workers on one node, which would need "
                f"{_fmt(packed)}; no node has that much.\n{_FIX}"
            )
    if strategy == "STRICT_SPREAD" and fitting < num_workers:
        return (
            f"{_HEAD}Strategy STRICT_SPREAD puts each worker on its own node, but only "
            f"{fitting} node(s) can hold a worker of {_fmt(wanted)} and the group has "
            f"{num_workers} workers.\n{_FIX}"
        )
    return None


def _fmt(resources: Mapping[str, float]) -> str:
    return "{" + ", ".join(f'"{k}": {_num(v)}' for k, v in resources.items()) + "}"
