"""Worker order and ranks, exactly as Ray Train assigns them. Pure: no Ray, no I/O.

``sort_workers``: group by node id in first-seen order (optionally a given node first), sort each
group by its lowest GPU id (as int, else as string, 0 without GPUs), concatenate.
``assign_ranks``: world_rank is the sorted position; local_rank and local_world_size count workers
on the same node IP; node_rank is the index of the node IP in first-seen order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Ray worker processes import ActorMetadata; keep this module light
    from wgstore.events.worker_group import WorkerInfo

__all__ = ["ActorMetadata", "assign_ranks", "sort_workers"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorMetadata:
    """Where a worker actor runs, as the actor reports it (Ray Train's ``ActorMetadata``)."""

    actor_name: str
    actor_id: str
    node_id: str
    node_ip: str
    pid: int
    hostname: str = ""
    gpu_ids: tuple[str, ...] = ()


def _lowest_gpu_id(meta: ActorMetadata) -> int | str:
    if not meta.gpu_ids:
        return 0
    try:
        return min(int(gpu) for gpu in meta.gpu_ids)
    except ValueError:
        return min(meta.gpu_ids)


def sort_workers(
    workers: Sequence[ActorMetadata], *, first_node_id: str | None = None
) -> list[ActorMetadata]:
    """Workers grouped by node id (first seen first), each group sorted by lowest GPU id."""
    by_node: dict[str, list[ActorMetadata]] = {}
    if first_node_id is not None:
        by_node[first_node_id] = []
    for meta in workers:
        by_node.setdefault(meta.node_id, []).append(meta)
    ordered: list[ActorMetadata] = []
    for group in by_node.values():
        ordered.extend(sorted(group, key=_lowest_gpu_id))  # stable: ties keep arrival order
    return ordered


def assign_ranks(
    workers: Sequence[ActorMetadata], *, first_node_id: str | None = None
) -> tuple[WorkerInfo, ...]:
    """Sort ``workers`` as Ray Train does and give each its ranks, in world-rank order."""
    from wgstore.events.worker_group import WorkerInfo

    ordered = sort_workers(workers, first_node_id=first_node_id)
    by_ip: dict[str, list[ActorMetadata]] = {}
    for meta in ordered:
        by_ip.setdefault(meta.node_ip, []).append(meta)
    node_ips = list(by_ip)
    return tuple(
        WorkerInfo(
            world_rank=world_rank,
            local_rank=by_ip[meta.node_ip].index(meta),
            node_rank=node_ips.index(meta.node_ip),
            local_world_size=len(by_ip[meta.node_ip]),
            world_size=len(ordered),
            node_id=meta.node_id,
            node_ip=meta.node_ip,
            pid=meta.pid,
            actor_id=meta.actor_id,
            actor_name=meta.actor_name,
            gpu_ids=tuple(str(g) for g in meta.gpu_ids),
        )
        for world_rank, meta in enumerate(ordered)
    )
