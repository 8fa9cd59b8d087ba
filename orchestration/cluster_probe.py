"""What the Ray cluster offers an elastic run now: the controller's eyes for :func:`decide`.

:class:`RayClusterProbe` reads Ray's GCS: the nodes alive, each node's free resources, and the
nodes announced as going (``get_draining_nodes``: a drain with a deadline, as a cloud's
preemption notice arrives through the autoscaler, or ``ray drain-node``). It counts the workers
that fit with :func:`~wgstore.orchestration.scaling.workers_that_fit`, counting the resources
the run's own running group holds on each node as the run's (a resize restarts that group, so
they are free for the next one). Ray Train asks its ``AutoscalingCoordinator`` (a Ray Data
actor whose reservations move on a 20 s tick); reading the GCS directly sees a node the moment
it joins.

:class:`ClusterProbe` is what the controller needs; tests hand it views of their own.
"""

from __future__ import annotations

from typing import Protocol

from wgstore.orchestration.scaling import ClusterView, workers_that_fit
from wgstore.projections.run_state import RunState
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus

__all__ = ["ClusterProbe", "RayClusterProbe"]


class ClusterProbe(Protocol):
    """Looks at the cluster for an elastic run."""

    def look(self, run: RunState, group: WorkerGroupState | None, *, size: bool) -> ClusterView:
        """The nodes going, and with ``size`` how many of ``run``'s workers fit now
        (``group``, the run's current group, counted as the run's while it holds resources)."""
        ...


_HOLDING = (WorkerGroupStatus.STARTING, WorkerGroupStatus.RUNNING, WorkerGroupStatus.SHUTTING_DOWN)


class RayClusterProbe:
    """:class:`ClusterProbe` over the Ray this process is connected to."""

    def look(self, run: RunState, group: WorkerGroupState | None, *, size: bool) -> ClusterView:
        """See :meth:`ClusterProbe.look`."""
        import ray
        from ray._private import state as ray_state

        draining = {node: (ms or None) for node, ms in ray_state.state.get_draining_nodes().items()}
        if not size:
            return ClusterView(fits=None, draining=draining)
        context = run.context
        scaling = run.scaling_config
        assert context is not None and scaling is not None
        alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}  # type: ignore[no-untyped-call]
        free = {
            node: dict(resources)
            for node, resources in ray_state.available_resources_per_node().items()  # type: ignore[no-untyped-call]
            if node in alive
        }
        need = {name: float(amount) for name, amount in context.resources_per_worker.items()}
        if group is not None and group.status in _HOLDING:
            for worker in group.workers:  # one bundle per worker, on the worker's node
                if worker.node_id in free:
                    held = free[worker.node_id]
                    for name, amount in need.items():
                        held[name] = held.get(name, 0.0) + amount
        fits = workers_that_fit(
            free,
            need,
            scaling.num_workers,
            strategy=context.placement_strategy,
            draining=draining,
        )
        return ClusterView(fits=fits, draining=draining)
