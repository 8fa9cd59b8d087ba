"""``RayRuntime``: the :class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime` on a Ray cluster.

A thin layer over :mod:`~wgstore.orchestration.runtimes.ray_resources` (named, detached placement groups
and actors), :mod:`~wgstore.orchestration.polling.poller` (health-check polling) and the worker actor's
calls (:class:`~wgstore.orchestration.runtimes.actors.WgstoreWorker`).

Failpoints (tests of Ray's own behaviour only; executor logic is tested on
:class:`~wgstore.orchestration.runtimes.fake_runtime.FakeRuntime`): handed to the actors, which really
exit, SIGKILL themselves, raise or hang: ``sync_actor_exit_on_init``, ``worker_exit_on_init`` /
``worker_sigkill_on_init`` (a bundle index), ``worker_init_sleep_s``, ``launch_raise``,
``poll_hang`` / ``shutdown_hang`` (a bundle index).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import ray

from wgstore.orchestration.polling.poller import GroupPoller, remote_error_info
from wgstore.orchestration.runtimes import ray_resources
from wgstore.orchestration.runtimes.protocol import (
    ReservedPlacementGroup,
    StartedActor,
    StartedWorker,
    TrainSetup,
)

if TYPE_CHECKING:
    from wgstore.events.worker_group import ErrorInfo, WorkerGroupContext
    from wgstore.orchestration.train_context import TrainContext
    from wgstore.projections.state import WorkerStatus

__all__ = ["RayRuntime"]

_ACTOR_FAILPOINTS = frozenset(
    {
        "sync_actor_exit_on_init",
        "worker_exit_on_init",
        "worker_sigkill_on_init",
        "worker_init_sleep_s",
        "launch_raise",
        "poll_hang",
        "shutdown_hang",
    }
)


class RayRuntime:
    """Worker groups as detached, named Ray actors in a placement group.

    Args:
        address: the cluster to connect to (else ``RAY_ADDRESS``, else a local instance).
        failpoints: faults the actors inject for real (see the module docstring).
    """

    def __init__(
        self, *, address: str | None = None, failpoints: Mapping[str, Any] | None = None
    ) -> None:
        unknown = sorted(set(failpoints or {}) - _ACTOR_FAILPOINTS)
        if unknown:
            raise ValueError(
                f"unknown RayRuntime failpoint(s) {unknown}; the failpoints are "
                f"{sorted(_ACTOR_FAILPOINTS)}"
            )
        self.address = address
        self.failpoints: dict[str, Any] = dict(failpoints or {})

    def connect(self) -> None:
        """Connect to Ray if not yet connected."""
        ray_resources.ensure_ray(self.address)

    def check_can_fit(self, group_id: str, context: WorkerGroupContext) -> None:
        """Fail at once when the cluster can never fit the group."""
        ray_resources.check_cluster_can_fit(
            context.resources_per_worker, context.num_workers, context.placement_strategy
        )

    def reserve_placement_group(
        self, group_id: str, bundles: Sequence[Mapping[str, float]], strategy: str, timeout_s: float
    ) -> ReservedPlacementGroup:
        """Create the detached placement group ``wgstore-<group_id>`` and wait until ready."""
        pg = ray_resources.reserve_placement_group(group_id, bundles, strategy, timeout_s)
        return ReservedPlacementGroup(
            handle=pg,
            placement_group_id=pg.id.hex(),
            name=ray_resources.placement_group_name(group_id),
        )

    def start_sync_actor(self, group_id: str, *, timeout_s: float) -> StartedActor:
        """Start ``wgstore-<group_id>-sync`` on this driver's node."""
        actor = ray_resources.start_sync_actor(
            group_id, failpoints=self.failpoints, timeout_s=timeout_s
        )
        return StartedActor(
            handle=actor,
            actor_id=actor._actor_id.hex(),
            name=ray_resources.sync_actor_name(group_id),
        )

    def start_workers(
        self,
        group_id: str,
        placement_group: ReservedPlacementGroup,
        context: WorkerGroupContext,
        *,
        timeout_s: float,
    ) -> list[StartedWorker]:
        """One detached worker actor per bundle."""
        pairs = ray_resources.start_workers(
            group_id,
            placement_group.handle,
            context.num_workers,
            context.resources_per_worker,
            failpoints=self.failpoints,
            timeout_s=timeout_s,
            runtime_env=context.runtime_env,
        )
        return [StartedWorker(handle, meta) for handle, meta in pairs]

    def init_train_contexts(
        self,
        workers: Sequence[Any],
        contexts: Sequence[TrainContext],
        setup: TrainSetup,
        *,
        timeout_s: float,
    ) -> None:
        """``init_train_context`` on every worker (each opens the store at ``store_url``)."""
        context = setup.context
        ray.get(
            [
                handle.init_train_context.remote(
                    context=train_context,
                    train_fn=context.train_fn,
                    train_fn_pickle=context.train_fn_pickle,
                    train_fn_digest=context.train_fn_digest,
                    store_url=setup.store_url,
                    hmac_key=setup.hmac_key,
                    report_metadata=dict(setup.report_metadata),
                    extra_sys_path=setup.extra_sys_path,
                )
                for handle, train_context in zip(workers, contexts, strict=True)
            ],
            timeout=timeout_s,
        )

    def arm_training(self, workers: Sequence[Any], *, timeout_s: float) -> None:
        """``run_train_fn`` on every worker: armed, no user code run yet."""
        ray.get([h.run_train_fn.remote() for h in workers], timeout=timeout_s)

    def start_training(self, workers: Sequence[Any], *, timeout_s: float) -> None:
        """Start the armed train functions. A worker that dies now died training: its failure
        is the poll's to record, so errors are only fetched (so Ray does not print them)."""
        refs = [h.start_training.remote() for h in workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            with contextlib.suppress(Exception):  # the poll records the worker's death
                ray.get(ref)

    def find_workers(self, actor_names: Mapping[int, str]) -> dict[int, Any]:
        """``ray.get_actor`` by name in wgstore's namespace; None for an actor that is gone."""
        workers: dict[int, Any] = {}
        for rank, name in actor_names.items():
            try:
                workers[rank] = ray.get_actor(name, namespace=ray_resources.NAMESPACE)
            except ValueError:
                workers[rank] = None
        return workers

    def poller(
        self,
        workers: Mapping[int, Any],
        actor_names: Mapping[int, str],
        health_check_timeout_s: float,
        known: Mapping[int, WorkerStatus],
    ) -> GroupPoller:
        """A :class:`~wgstore.orchestration.polling.poller.GroupPoller`."""
        return GroupPoller(workers, actor_names, health_check_timeout_s, known=known)

    def shutdown_workers(
        self, actor_names: Mapping[int, str], patience_s: float
    ) -> dict[int, tuple[str, ErrorInfo | None]]:
        """Ray Train 2.60's ``_shutdown_workers`` (see ``ray_resources.shutdown_workers``)."""
        return ray_resources.shutdown_workers(actor_names, patience_s)

    def release_group(
        self, group_id: str, *, extra_handles: Iterable[Any] = (), wait_s: float = 15.0
    ) -> tuple[str, ...]:
        """Kill the group's actors and remove its placement group (found by name)."""
        return ray_resources.release_group(group_id, extra_actors=extra_handles, wait_s=wait_s)

    def release_placement_group(self, placement_group_id: str, name: str) -> tuple[str, ...]:
        """Remove the placement group by id if Ray still has it (its actors go with it)."""
        return ray_resources.release_placement_group(placement_group_id, name)

    def list_group_resources(self) -> dict[str, list[str]]:
        """Every live wgstore actor and placement group, by group id."""
        return ray_resources.list_group_resources()

    def describe_error(self, error: BaseException) -> ErrorInfo:
        """The original exception of a Ray task error, with its traceback."""
        return remote_error_info(error)
