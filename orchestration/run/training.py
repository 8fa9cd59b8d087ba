"""Runs from Python: ``start_run``, ``resume_run``, and ``run_training`` (what ``wgstore run`` calls).

A run is attempts of a worker group under a failure policy, driven by a
:class:`~wgstore.orchestration.run.controller.RunController` that records every decision in the
run's stream ``run-<run_id>``. These functions record into a store (an :class:`EventStore` or its
URL) and run an executor in this process unless told one runs elsewhere.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from wgstore.events import NO_STREAM, ConcurrencyError, EventStore
from wgstore.events.run import FailureConfig, RunCreated, ScalingConfig
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupContext
from wgstore.orchestration.errors import (
    InsufficientClusterResourcesError,
    OrchestrationError,
    WorkerGroupStartError,
)
from wgstore.orchestration.run.controller import RunController, read_run
from wgstore.orchestration.run.inputs import RUN_ID_PATTERN
from wgstore.orchestration.train_fn.loading import TrainFn, import_path_of
from wgstore.projections.projector import catch_up_read_models
from wgstore.projections.run_state import RunState
from wgstore.projections.state import TrainingOutcome, WorkerGroupState, project_worker_group

if TYPE_CHECKING:
    from wgstore.orchestration.executor.ray_executor import RayExecutor

__all__ = [
    "NO_RETRY",
    "RunResult",
    "resume_run",
    "run_training",
    "start_run",
    "worker_resources",
]


NO_RETRY = FailureConfig(max_failures=0, controller_failure_limit=0, max_preemption_failures=0)
"""No retry of any kind: :func:`run_training`'s default (one attempt, as before runs had a
controller)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended: its last worker group's state, and (for controller runs) the run's.

    ``group_id``/``state`` are the last attempt's worker group; ``run_id``, ``run_state`` and
    ``attempts`` (every attempt's group id, in order) describe the whole run.
    """

    group_id: str
    state: WorkerGroupState
    interrupted: bool
    run_id: str = ""
    run_state: RunState | None = None
    attempts: tuple[str, ...] = ()

    @property
    def outcome(self) -> TrainingOutcome | None:
        """finished, errored or aborted (of the last attempt)."""
        return self.state.outcome

    @property
    def failures(self) -> int:
        """How many failures the run's failure policy decided about."""
        return self.run_state.failures if self.run_state is not None else 0


@contextlib.contextmanager
def _store_of(store_or_url: EventStore | str) -> Iterator[EventStore]:
    if isinstance(store_or_url, EventStore):
        yield store_or_url
        return
    with EventStore.open(store_or_url) as store:
        yield store


def _result(store: EventStore, run: RunState, interrupted: bool) -> RunResult:
    group_id = run.final_group_id or run.current_group_id
    no_group = group_id is None or not store.stream_version(group_stream(group_id))
    error = run.error
    if no_group and error is not None and error.type == InsufficientClusterResourcesError.__name__:
        # an elastic run whose minimum never fit: say so, not that it has no group
        raise InsufficientClusterResourcesError(f"run {run.run_id} never started: {error.message}")
    if no_group or group_id is None:
        raise OrchestrationError(
            f"run {run.run_id} is {run.status.value} and has no worker group yet (it ended or "
            "stopped before its first attempt was requested)"
        )
    state = project_worker_group(store.read_stream(group_stream(group_id)))
    return RunResult(
        group_id=group_id,
        state=state,
        interrupted=interrupted,
        run_id=run.run_id,
        run_state=run,
        attempts=run.groups,
    )


def _drive(
    store: EventStore,
    run_id: str,
    *,
    executor: RayExecutor | Literal["external"] | None,
    lease_s: float | None,
    on_update: Callable[[WorkerGroupState], None] | None,
    timeout_s: float | None,
) -> RunResult:
    controller = RunController(
        store, run_id, executor=executor, lease_s=lease_s, on_update=on_update
    )
    interrupted = False
    try:
        try:
            run = controller.run(timeout_s=timeout_s)
        except KeyboardInterrupt:
            interrupted = True
            run = controller.run_state
    finally:
        controller.close()
    # So plain SQL on wg_worker_groups & co. shows this run as soon as the call returns.
    catch_up_read_models(store)
    return _result(store, run, interrupted)


def start_run(
    store_or_url: EventStore | str,
    train_fn: TrainFn | str,
    *,
    scaling_config: ScalingConfig,
    failure_config: FailureConfig | None = None,
    train_fn_config: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    name: str = "",
    lease_s: float = 60.0,
    executor: RayExecutor | Literal["external"] | None = None,
    poll_interval_s: float = 1.0,
    placement_timeout_s: float = 60.0,
    runtime_env: Mapping[str, Any] | None = None,
    resume_checkpoint: str | None = None,
    on_update: Callable[[WorkerGroupState], None] | None = None,
    timeout_s: float | None = None,
) -> RunResult:
    """Create a run and drive it to its end: attempts of a worker group under a failure policy.

    Every attempt starts ``train_fn`` on ``scaling_config.num_workers`` workers; a failed
    attempt is retried as ``failure_config`` allows (Ray Train 2.60's counting), from the latest
    checkpoint any attempt reported (``get_context().checkpoint`` in the train function).

    An elastic run (Ray's ``ScalingConfig(num_workers=(2, 4))`` is
    ``ScalingConfig(num_workers=4, min_workers=2)`` here) starts each attempt at what fits
    between the two, grows or shrinks it (a restart from the committed checkpoint, no failure
    charged) when another size fits, looked at every ``elastic_resize_monitor_interval_s``,
    restarts a failed group at the size that fits then, treats a node's preemption notice as its
    own kind (``max_preemption_failures``), and waits at most ``min_workers_timeout_s`` for
    ``min_workers`` to fit.

    Args:
        store_or_url: the store, or its URL (opened and closed here).
        train_fn: a module-level function, any picklable callable, or ``"package.module:fn"``.
        scaling_config: workers per attempt and resources per worker.
        failure_config: the failure budget (default: Ray Train's, ``FailureConfig()``).
        train_fn_config: the JSON config handed to the train function.
        run_id: letters, digits, ``_ . -`` (default: a new random id).
        name: a name to show in listings.
        lease_s: a controller silent this long is gone and the run orphaned (``wgstore gc``).
        executor: ``None`` (one in this process for this run), a :class:`RayExecutor`, or
            ``"external"`` (a standalone ``wgstore executor`` serves the store).
        poll_interval_s, placement_timeout_s, runtime_env: of every attempt's group.
        resume_checkpoint: the checkpoint the first attempt starts from.
        on_update: called with the current group's state whenever it changed.
        timeout_s: give up waiting after this long (the run goes on; resume it later).

    Returns:
        A :class:`RunResult`; ``interrupted`` after Ctrl-C (the run is then aborted).

    Raises:
        ValueError: a bad ``run_id``, a run with that id exists (use :func:`resume_run`), or an
            elastic range whose minimum is 0.
        RunLeaseHeldError: another controller holds the run.
    """
    failure_config = failure_config if failure_config is not None else FailureConfig()
    if scaling_config.min_workers is not None and scaling_config.min_workers < 1:
        raise ValueError(
            f"min_workers must be 1 or more for a wgstore run, got {scaling_config.min_workers} "
            "(Ray Train allows 0 for runs it drives itself)"
        )
    path: Any = import_path_of(train_fn) if isinstance(train_fn, str) else train_fn
    run_id = run_id or uuid.uuid4().hex[:16]
    if not RUN_ID_PATTERN.match(run_id):
        raise ValueError(f"run_id must be 1-128 letters, digits, '_', '.' or '-', got {run_id!r}")
    context = WorkerGroupContext(
        num_workers=scaling_config.num_workers,
        resources_per_worker=scaling_config.resources,
        placement_strategy=scaling_config.placement_strategy,
        train_fn=path,
        train_fn_config=dict(train_fn_config or {}),
        poll_interval_s=poll_interval_s,
        placement_timeout_s=placement_timeout_s,
        runtime_env=dict(runtime_env or {}),
        resume_checkpoint=resume_checkpoint,
    )
    from wgstore.orchestration.worker_group import _with_propagated_env

    context = _with_propagated_env(context)
    created = RunCreated(
        run_id=run_id,
        name=name,
        scaling_config=scaling_config,
        failure_config=failure_config,
        context=context,
        lease_s=lease_s,
    )
    with _store_of(store_or_url) as store:
        try:
            store.append(run_stream(run_id), [created], expected_version=NO_STREAM)
        except ConcurrencyError:
            raise ValueError(
                f"a run {run_id!r} exists already; continue it with resume_run(store, "
                f"{run_id!r}) (`wgstore run --resume {run_id}`) or choose another run_id"
            ) from None
        return _drive(
            store,
            run_id,
            executor=executor,
            lease_s=lease_s,
            on_update=on_update,
            timeout_s=timeout_s,
        )


def resume_run(
    store_or_url: EventStore | str,
    run_id: str,
    *,
    executor: RayExecutor | Literal["external"] | None = None,
    lease_s: float | None = None,
    on_update: Callable[[WorkerGroupState], None] | None = None,
    timeout_s: float | None = None,
) -> RunResult:
    """Continue run ``run_id`` from its log (after its controller died) and drive it to its end.

    Re-attaches to a group that still runs (the executor finds its actors by name), re-issues
    nothing already done (ids are derived), and loses no decision (they are in the log). A run
    that already ended is returned as it is.

    Raises:
        RunNotFoundError: no such run.
        RunLeaseHeldError: its controller is still alive (holds an unexpired lease).
    """
    with _store_of(store_or_url) as store:
        run = read_run(store, run_id)
        if run.ended:
            return _result(store, run, False)
        return _drive(
            store,
            run_id,
            executor=executor,
            lease_s=lease_s,
            on_update=on_update,
            timeout_s=timeout_s,
        )


def _default_resources(workers: int, external_executor: bool) -> dict[str, float]:
    import os

    if external_executor and not os.environ.get("RAY_ADDRESS"):
        return {"CPU": 1.0}  # no cluster to ask, and none to start here: the executor has it
    import ray

    from wgstore.orchestration.runtimes import ray_resources

    ray_resources.ensure_ray()
    cpus = float(ray.cluster_resources().get("CPU", 1.0))  # type: ignore[no-untyped-call]
    return {"CPU": min(1.0, cpus / workers)}


def run_training(
    url: str,
    train_fn: TrainFn | str,
    *,
    workers: int | tuple[int, int] = 4,
    config: Mapping[str, Any] | None = None,
    resources_per_worker: Mapping[str, float] | None = None,
    poll_interval_s: float = 1.0,
    run_id: str | None = None,
    external_executor: bool = False,
    on_update: Callable[[WorkerGroupState], None] | None = None,
    failure_config: FailureConfig | None = None,
    resize_interval_s: float = 60.0,
    min_workers_timeout_s: float | None = 600.0,
) -> RunResult:
    """Start ``train_fn`` on ``workers`` workers as a run, follow it until it ends.

    A run with a controller (:func:`start_run`): by default one attempt and no retry
    (:data:`NO_RETRY`); pass ``failure_config`` (e.g. ``FailureConfig(max_failures=2)``) to
    retry failed attempts from the latest checkpoint. Inputs are checked before Ray is touched:
    the train function's path form and the store (opened, so a bad URL or an unreachable
    database fails at once). At the end the SQL read models are brought up to date.

    Args:
        url: the store (``sqlite:///wgstore.db`` or a Postgres URL).
        train_fn: a module-level function or its import path ``"package.module:function"``.
        workers: how many workers, or ``(min, max)`` for an elastic run (see :func:`start_run`).
        config: the JSON config handed to the train function.
        resources_per_worker: default ``{"CPU": min(1, cluster CPUs / workers)}`` (``{"CPU": 1}``
            with an external executor and no ``RAY_ADDRESS``: this process then never touches
            Ray).
        poll_interval_s: seconds between polls.
        run_id: the run id (default: a new random id).
        external_executor: True when a standalone ``wgstore executor`` serves the store.
        on_update: called with the current group's state after every batch of new events
            (start, polls, reports, shutdown), e.g. to draw a live table.
        failure_config: the failure budget (default :data:`NO_RETRY`).
        resize_interval_s: an elastic run's look for a better size, this often.
        min_workers_timeout_s: an elastic run waits this long for its minimum to fit, then
            errors (``None``: for ever).

    Returns:
        A :class:`RunResult` (the last attempt's group, the run's id, state and attempts).
        Ctrl-C (``KeyboardInterrupt``) aborts the run, shuts the group down with reason
        ``"interrupted"`` and returns with ``interrupted=True``.

    Raises:
        WorkerGroupStartError: the last attempt failed to start and the run errored (recorded,
            everything released).
        TrainFnError: ``train_fn`` is a string that is not an import path.
        ValueError: ``train_fn`` is a callable that cannot be pickled.
    """
    path: Any = import_path_of(train_fn) if isinstance(train_fn, str) else train_fn
    low, high = workers if isinstance(workers, tuple) else (None, workers)
    with EventStore.open(url) as store:  # before Ray: a bad store fails in a moment
        resources = dict(resources_per_worker or _default_resources(high, external_executor))
        scaling = ScalingConfig(
            num_workers=high,
            resources_per_worker=resources,
            min_workers=low,
            elastic_resize_monitor_interval_s=resize_interval_s,
            min_workers_timeout_s=min_workers_timeout_s if low is not None else None,
        )
        result = start_run(
            store,
            path,
            scaling_config=scaling,
            failure_config=failure_config if failure_config is not None else NO_RETRY,
            train_fn_config=config,
            run_id=run_id,
            executor="external" if external_executor else None,
            poll_interval_s=poll_interval_s,
            on_update=on_update,
        )
    failure = result.state.start_failure
    if failure is not None and not result.interrupted:
        raise WorkerGroupStartError(
            failure.stage, failure.error, group_id=result.group_id, released=failure.released
        )
    return result


def worker_resources(cpus: float | None, gpus: float = 0) -> dict[str, float] | None:
    """``resources_per_worker`` from CPU and GPU counts; ``None`` (let :func:`run_training`
    choose) when neither is given. GPUs without CPUs ask for one CPU per worker."""
    if cpus is None and not gpus:
        return None
    resources = {"CPU": 1.0 if cpus is None else cpus}
    if gpus:
        resources["GPU"] = gpus
    return resources
