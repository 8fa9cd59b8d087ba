"""``run_training``: one call that starts a group, follows it to the end and shuts it down.

This is what ``wgstore run`` calls. It records into the store at ``url`` and runs an executor in
this process (unless told one runs elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from wgstore.events import EventStore
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.loading import TrainFn, import_path_of
from wgstore.orchestration.worker_group import WorkerGroup
from wgstore.projections.projector import catch_up_read_models
from wgstore.projections.state import TrainingOutcome, WorkerGroupState

__all__ = ["RunResult", "run_training", "worker_resources"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a :func:`run_training` call ended."""

    group_id: str
    state: WorkerGroupState
    interrupted: bool

    @property
    def outcome(self) -> TrainingOutcome | None:
        """finished, errored or aborted."""
        return self.state.outcome


def _default_resources(workers: int, external_executor: bool) -> dict[str, float]:
    import os

    if external_executor and not os.environ.get("RAY_ADDRESS"):
        return {"CPU": 1.0}  # no cluster to ask, and none to start here: the executor has it
    import ray

    from wgstore.orchestration import ray_resources

    ray_resources.ensure_ray()
    cpus = float(ray.cluster_resources().get("CPU", 1.0))  # type: ignore[no-untyped-call]
    return {"CPU": min(1.0, cpus / workers)}


def run_training(
    url: str,
    train_fn: TrainFn | str,
    *,
    workers: int = 4,
    config: Mapping[str, Any] | None = None,
    resources_per_worker: Mapping[str, float] | None = None,
    poll_interval_s: float = 1.0,
    run_id: str | None = None,
    external_executor: bool = False,
    on_update: Callable[[WorkerGroupState], None] | None = None,
) -> RunResult:
    """Start ``train_fn`` on ``workers`` workers, follow it until it ends, shut the group down.

    Inputs are checked before Ray is touched: the train function's path form and the store
    (opened, so a bad URL or an unreachable database fails at once). The executor keeps the SQL
    read models current while the group runs, and at the end they are brought up to date
    (:func:`catch_up_read_models`).

    Args:
        url: the store (``sqlite:///wgstore.db`` or a Postgres URL).
        train_fn: a module-level function or its import path ``"package.module:function"``.
        workers: how many workers.
        config: the JSON config handed to the train function.
        resources_per_worker: default ``{"CPU": min(1, cluster CPUs / workers)}`` (``{"CPU": 1}``
            with an external executor and no ``RAY_ADDRESS``: this process then never touches
            Ray).
        poll_interval_s: seconds between polls.
        run_id: the run id (default: the group id).
        external_executor: True when a standalone ``wgstore executor`` serves the store.
        on_update: called with the group's state after every batch of new events (start,
            polls, reports, shutdown), e.g. to draw a live table.

    Returns:
        A :class:`RunResult`. Ctrl-C (``KeyboardInterrupt``) shuts the group down with reason
        ``"interrupted"`` and returns with ``interrupted=True``.

    Raises:
        WorkerGroupStartError: the group failed to start (recorded, everything released).
        TrainFnError: ``train_fn`` is a string that is not an import path.
        ValueError: ``train_fn`` is a callable that cannot be pickled.
    """
    path: Any = import_path_of(train_fn) if isinstance(train_fn, str) else train_fn
    with EventStore.open(url) as store:  # before Ray: a bad store fails in a moment
        resources = dict(resources_per_worker or _default_resources(workers, external_executor))
        context = WorkerGroupContext(
            num_workers=workers,
            resources_per_worker=resources,
            train_fn=path,
            train_fn_config=dict(config or {}),
            poll_interval_s=poll_interval_s,
        )
        group = WorkerGroup.create(
            store, context, run_id=run_id, executor="external" if external_executor else None
        )
        if on_update is not None:
            on_update(group.state)
        interrupted = False
        try:
            group.wait(on_update=on_update)
            reason = "finished" if not group.poll_status().errors else "worker error"
        except KeyboardInterrupt:
            interrupted = True
            reason = "interrupted"
        state = group.shutdown(reason=reason)
        if on_update is not None:
            on_update(state)
        # So plain SQL on wg_worker_groups & co. shows this run as soon as the command ends.
        catch_up_read_models(store)
        return RunResult(group_id=group.group_id, state=state, interrupted=interrupted)


def worker_resources(cpus: float | None, gpus: float = 0) -> dict[str, float] | None:
    """``resources_per_worker`` from CPU and GPU counts; ``None`` (let :func:`run_training`
    choose) when neither is given. GPUs without CPUs ask for one CPU per worker."""
    if cpus is None and not gpus:
        return None
    resources = {"CPU": 1.0 if cpus is None else cpus}
    if gpus:
        resources["GPU"] = gpus
    return resources
