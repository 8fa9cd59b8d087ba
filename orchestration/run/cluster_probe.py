"""What the Ray cluster offers an elastic run now: the controller's eyes for :func:`decide`.

:class:`RayClusterProbe` reads Ray's GCS: the nodes alive, each node's free resources, and the
nodes announced as going (``get_draining_nodes``: a drain with a deadline, as a cloud's
preemption notice arrives through the autoscaler, or ``ray drain-node``). It counts the workers
that fit with :func:`~wgstore.orchestration.run.scaling.workers_that_fit`, counting the resources
the run's own group's placement group holds on each node as the run's (a resize restarts that
group, so they are free for the next one). Ray's resource view shows a released placement group
about 0.1 s after its removal: a look right after the run's group was released, that finds
fewer workers fitting than the group had on the nodes still there, reads again for up to a
second. Ray Train asks its ``AutoscalingCoordinator`` (a Ray Data
actor whose reservations move on a 20 s tick); reading the GCS directly sees a node the moment
it joins.

:class:`ClusterProbe` is what the controller needs; tests hand it views of their own.
"""

from __future__ import annotations

import time
from typing import Protocol

from wgstore.orchestration.run.scaling import ClusterView, workers_that_fit
from wgstore.orchestration.runtimes.resource_names import placement_group_name
from wgstore.projections.run_state import RunState
from wgstore.projections.state import WorkerGroupState

__all__ = ["ClusterProbe", "RayClusterProbe"]


class ClusterProbe(Protocol):
    """Looks at the cluster for an elastic run."""

    def look(self, run: RunState, group: WorkerGroupState | None, *, size: bool) -> ClusterView:
        """The nodes going, and with ``size`` how many of ``run``'s workers fit now
        (``group``, the run's current group, counted as the run's while it holds resources)."""
        ...


_SETTLE_S, _SETTLE_STEP_S = 1.0, 0.1
"""How long a look after the run's group was released waits for Ray's resource view to show the
release (it lags the placement group's removal by ~0.1 s), and how often it reads again."""


class RayClusterProbe:
    """:class:`ClusterProbe` over the Ray this process is connected to."""

    def look(self, run: RunState, group: WorkerGroupState | None, *, size: bool) -> ClusterView:
        """See :meth:`ClusterProbe.look` (connects to Ray first if this process is not: a
        controller whose executor runs elsewhere, ``--external-executor``)."""
        from ray._private import state as ray_state

        from wgstore.orchestration.runtimes.ray_resources import ensure_ray

        ensure_ray()
        draining = {node: (ms or None) for node, ms in ray_state.state.get_draining_nodes().items()}
        if not size:
            return ClusterView(fits=None, draining=draining)
        deadline = time.monotonic() + _SETTLE_S
        while True:
            fits, nodes_left = self._fits(run, group, draining)
            if not _release_may_lag(group, fits, nodes_left) or time.monotonic() >= deadline:
                return ClusterView(fits=fits, draining=draining)
            time.sleep(_SETTLE_STEP_S)

    @staticmethod
    def _fits(
        run: RunState, group: WorkerGroupState | None, draining: dict[str, int | None]
    ) -> tuple[int, set[str]]:
        """How many workers fit now, and the nodes alive and not going."""
        import ray
        from ray._private import state as ray_state

        context = run.context
        scaling = run.scaling_config
        assert context is not None and scaling is not None
        alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}  # type: ignore[no-untyped-call]
        free = {
            node: dict(resources)
            for node, resources in ray_state.available_resources_per_node().items()  # type: ignore[no-untyped-call]
            if node in alive
        }
        if group is not None:  # its placement group's bundles, while Ray holds them, are the run's
            name = placement_group_name(group.group_id)
            for info in ray.util.placement_group_table().values():
                if info.get("name") != name or info.get("state") == "REMOVED":
                    continue
                for index, node in (info.get("bundles_to_node_id") or {}).items():
                    if node in free:
                        held = free[node]
                        for resource, amount in info["bundles"][index].items():
                            held[resource] = held.get(resource, 0.0) + float(amount)
        need = {name: float(amount) for name, amount in context.resources_per_worker.items()}
        fits = workers_that_fit(
            free,
            need,
            scaling.num_workers,
            strategy=context.placement_strategy,
            draining=draining,
        )
        return fits, {node for node in free if node not in draining}


def _release_may_lag(group: WorkerGroupState | None, fits: int, nodes_left: set[str]) -> bool:
    """True when the run's group was just released and fewer workers fit than it had on the
    nodes still there (alive, not going): Ray's resource view may not show the release yet."""
    if group is None or not group.status.is_terminal:
        return False
    return fits < sum(1 for worker in group.workers if worker.node_id in nodes_left)
