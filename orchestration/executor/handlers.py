"""One handler per command; routing is the :data:`COMMAND_HANDLERS` table.

Handlers touch the cluster only through the executor's runtime
(:class:`~wgstore.orchestration.runtimes.protocol.WorkerGroupRuntime`), so they run the same on Ray and on
the in-memory :class:`~wgstore.orchestration.runtimes.fake_runtime.FakeRuntime`.

Every handler first reads the group's stream afresh and returns without doing anything when the
command is already done (an event carries its id as ``causation_id``) or no longer needed (the
latest state says so). Every event it appends carries the command's id as ``causation_id``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from wgstore.events import ConcurrencyError, EventStore, FencedError, NewEvent
from wgstore.events.records import Fence
from wgstore.events.streams import run_stream
from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerEnding,
    WorkerGroupShutDown,
    WorkerGroupStartFailed,
    WorkerShutdown,
)
from wgstore.orchestration.builder import BuiltGroup, StartAborted, WorkerGroupStateBuilder
from wgstore.orchestration.executor.commands import (
    Command,
    ReleaseResources,
    ShutdownWorkerGroup,
    StartWorkerGroup,
    command_needed,
)
from wgstore.orchestration.runtimes.protocol import TrainSetup, WorkerGroupRuntime
from wgstore.orchestration.runtimes.ranks import assign_ranks
from wgstore.orchestration.train_context import TrainContext
from wgstore.orchestration.train_fn.report_writer import absolute_store_url
from wgstore.projections.run_state import RunState, evolve_run
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus, evolve

__all__ = [
    "COMMAND_HANDLERS",
    "HandlerServices",
    "release_resources",
    "shutdown_worker_group",
    "start_worker_group",
]


class HandlerServices(Protocol):
    """What a handler uses of the executor that runs it (``RayExecutor`` is one): the store, the
    cluster, its claims' fences, and a few services. Handlers take this narrow protocol, not the
    executor, so they never import it and a test can run one on anything that provides these."""

    @property
    def store(self) -> EventStore:
        """The store the executor follows and appends to."""

    @property
    def runtime(self) -> WorkerGroupRuntime:
        """The cluster commands are carried out on."""

    @property
    def executor_id(self) -> str:
        """The executor's id, in the metadata of what it appends."""

    @property
    def actor_timeout_s(self) -> float:
        """How long actor calls during a start may take."""

    @property
    def extra_sys_path(self) -> tuple[str, ...]:
        """Folders workers add to ``sys.path`` before importing the train function."""

    def fence(self, group_id: str) -> Fence | None:
        """The executor's claim of ``group_id``: the fence of every append for it."""

    def metadata(self, command: Command) -> dict[str, Any]:
        """Metadata of every event appended for ``command``."""

    def load(self, group_id: str) -> tuple[WorkerGroupState, Callable[[Command], bool]]:
        """The group's latest state, read afresh, and a test of whether a command is done."""

    def attach(self, built: BuiltGroup, state: WorkerGroupState) -> None:
        """Keep a freshly started group's handles for polling."""

    def detach(self, state: WorkerGroupState) -> list[Any]:
        """Forget a group's handles (it is being released); returns them."""

    def final_poll_events(self, state: WorkerGroupState, command: Command) -> list[NewEvent]:
        """The last poll before a shutdown, plus the trailing unchanged polls."""

    def invoke(self, hook: str, *args: Any) -> list[Any]:
        """Call ``hook`` on every callback; returns the ``CallbackFailed`` events to record."""

    def record_callback_failures(
        self, group_id: str, failures: Sequence[Any], metadata: Mapping[str, Any]
    ) -> None:
        """Append ``CallbackFailed`` events."""


def _finish_start_with(
    ex: HandlerServices,
    command: Command,
    state: WorkerGroupState,
    failure: WorkerGroupStartFailed,
    started: float,
) -> None:
    """Append the failed start; if shutdown was asked meanwhile, the shutdown instead."""
    stream = command.stream_id
    while True:
        if state.status is WorkerGroupStatus.SHUTTING_DOWN:
            event: Any = WorkerGroupShutDown(
                duration_s=round(time.monotonic() - started, 6), released=failure.released
            )
        else:
            event = failure
        new = NewEvent(
            event,
            event_id=uuid.uuid5(command.command_id, type(event).__name__),
            metadata=ex.metadata(command),
        )
        try:
            ex.store.append(
                stream, [new], expected_version=state.version, fence=ex.fence(command.group_id)
            )
            return
        except ConcurrencyError:
            for record in ex.store.read_stream(stream, from_version=state.version + 1):
                state = evolve(state, record)
            if state.status.is_terminal:
                return


def start_worker_group(command: StartWorkerGroup, ex: HandlerServices) -> None:
    """Carry out a start: placement group, sync actor, workers, train context, launch.

    Atomic: when any step fails, everything acquired is released and ``WorkerGroupStartFailed``
    names the stage, the cause (with traceback) and what was released; a failure after
    ``build()`` (at launch) is cleaned up the same way.

    Endings are classified by what happened: launching arms every worker's train function
    without running user code (a failure there fails the start at ``launch``); only once
    ``TrainingLaunched`` is in the log do the train functions start, so any later death or
    error of a worker is a worker failure, recorded by the polls with its rank.
    """
    state, done = ex.load(command.group_id)
    if done(command) or not command_needed(command, state):
        return
    context = command.context
    group_id = command.group_id
    started = time.monotonic()
    ended = _run_ended(ex.store, state.run_id)
    if ended is not None:
        # Never start a group for a run that is over (its start request came from a controller
        # that had lost the run, say): record why, and release anything left under its name.
        released = tuple(ex.runtime.release_group(group_id, wait_s=5.0))
        refused = ErrorInfo(
            type="RunEnded",
            message=f"run {state.run_id} had ended ({ended}) before this group was started: "
            "nothing was started",
        )
        failure = WorkerGroupStartFailed(
            stage=StartStage.PLACEMENT_GROUP, error=refused, released=released
        )
        _finish_start_with(ex, command, state, failure, started)
        return
    runtime = ex.runtime
    builder = WorkerGroupStateBuilder(
        ex.store,
        runtime,
        state,
        command_id=command.command_id,
        metadata=ex.metadata(command),
        fence=ex.fence(group_id),
    )
    stage = StartStage.PLACEMENT_GROUP
    hook_failures = ex.invoke("before_worker_group_start", context)
    try:
        runtime.release_group(group_id, wait_s=5.0)  # leftovers nobody recorded
        runtime.check_can_fit(group_id, context)
        bundles = [dict(context.resources_per_worker)] * context.num_workers
        reserve_started = time.monotonic()
        pg = runtime.reserve_placement_group(
            group_id, bundles, context.placement_strategy, context.placement_timeout_s
        )
        builder.with_placement_group(
            pg,
            bundles=bundles,
            strategy=context.placement_strategy,
            wait_s=time.monotonic() - reserve_started,
        )
        stage = StartStage.SYNC_ACTOR
        sync = runtime.start_sync_actor(group_id, timeout_s=ex.actor_timeout_s)
        builder.with_sync_actor(sync)
        stage = StartStage.WORKERS
        started_workers = runtime.start_workers(group_id, pg, context, timeout_s=ex.actor_timeout_s)
        infos = assign_ranks([w.metadata for w in started_workers])
        by_name = {w.metadata.actor_name: w.handle for w in started_workers}
        handles = [by_name[info.actor_name] for info in infos]
        builder.with_workers(handles, infos)
        stage = StartStage.INIT_TRAIN_CONTEXT
        setup = TrainSetup(
            context=context,
            store=ex.store,
            store_url=absolute_store_url(ex.store.url),
            hmac_key=ex.store.hmac_key,
            report_metadata={
                "causation_id": str(command.command_id),
                "executor_id": ex.executor_id,
            },
            extra_sys_path=ex.extra_sys_path,
        )
        contexts = [
            TrainContext(
                group_id=group_id,
                world_rank=info.world_rank,
                local_rank=info.local_rank,
                node_rank=info.node_rank,
                world_size=info.world_size,
                local_world_size=info.local_world_size,
                config=dict(context.train_fn_config),
                resume_checkpoint=context.resume_checkpoint,
                run_id=state.run_id,
            )
            for info in infos
        ]
        runtime.init_train_contexts(handles, contexts, setup, timeout_s=ex.actor_timeout_s)
        built = builder.build(startup_s=time.monotonic() - started)
        hook_failures += ex.invoke("after_worker_group_start", builder.state)
        stage = StartStage.LAUNCH
        builder.check_not_aborted()
        runtime.arm_training(handles, timeout_s=ex.actor_timeout_s)
        builder.launched(context.train_fn)  # from here on, failures are the workers'
        hook_failures += ex.invoke("after_worker_group_training_start", builder.state)

    except FencedError:
        raise  # another executor took the group over: what was built is its business now
    except StartAborted:
        released = builder.release()
        failure = WorkerGroupStartFailed(stage=stage, error=_aborted(), released=released)
        _finish_start_with(ex, command, builder.state, failure, started)
        ex.record_callback_failures(group_id, hook_failures, ex.metadata(command))
        return
    except Exception as error:  # noqa: BLE001 - every failure of a step fails the start
        released = builder.release()
        failure = WorkerGroupStartFailed(
            stage=stage, error=runtime.describe_error(error), released=released
        )
        _finish_start_with(ex, command, builder.state, failure, started)
        ex.record_callback_failures(group_id, hook_failures, ex.metadata(command))
        return
    ex.record_callback_failures(group_id, hook_failures, ex.metadata(command))
    ex.attach(built, builder.state)
    runtime.start_training(list(built.workers), timeout_s=ex.actor_timeout_s)


def _run_ended(store: EventStore, run_id: str | None) -> str | None:
    """The final status of run ``run_id`` if it has ended, else None (also for no run)."""
    if not run_id:
        return None
    state: RunState | None = None
    for record in store.read_stream(run_stream(run_id)):
        state = evolve_run(state, record)
    return state.status.value if state is not None and state.ended else None


def _aborted() -> ErrorInfo:
    return ErrorInfo(
        type="StartAborted", message="shutdown was requested while the group was starting"
    )


def shutdown_worker_group(command: ShutdownWorkerGroup, ex: HandlerServices) -> None:
    """Poll once more (last reports), release every resource, append ``WorkerGroupShutDown``."""
    state, done = ex.load(command.group_id)
    if done(command) or not command_needed(command, state):
        return
    started = time.monotonic()
    events = ex.final_poll_events(state, command)
    hooks = "abort" if command.abort else "shutdown"
    hook_failures = ex.invoke(
        f"before_worker_group_{hooks}", state.context if command.abort else state
    )
    patience_s = float(state.context.shutdown_patience_s)
    endings = ex.runtime.shutdown_workers(
        {info.world_rank: info.actor_name for info in state.workers}, patience_s
    )
    released = ex.runtime.release_group(command.group_id, extra_handles=ex.detach(state))
    # after_* hooks run before the end is appended, so shutdown()/abort() return once they ran
    # (Ray calls them synchronously); their failures go in the same batch as the end
    hook_failures += ex.invoke(f"after_worker_group_{hooks}", state.context)
    workers = tuple(
        WorkerShutdown(world_rank=rank, ending=WorkerEnding(ending), hook_error=error)
        for rank, (ending, error) in endings.items()
    )
    events.append(
        NewEvent(
            WorkerGroupShutDown(
                duration_s=round(time.monotonic() - started, 6),
                released=released,
                workers=workers,
                patience_s=patience_s if workers else None,
            ),
            event_id=uuid.uuid5(command.command_id, "WorkerGroupShutDown"),
            metadata=ex.metadata(command),
        )
    )
    events += [NewEvent(f, metadata=ex.metadata(command)) for f in hook_failures]
    ex.store.append(command.stream_id, events, fence=ex.fence(command.group_id))


def release_resources(command: ReleaseResources, ex: HandlerServices) -> None:
    """Release a start left half-done by an executor that stopped; record the failed start."""
    state, done = ex.load(command.group_id)
    if done(command) or not command_needed(command, state):
        return
    started = time.monotonic()
    released = ex.runtime.release_group(command.group_id, extra_handles=ex.detach(state))
    failure = WorkerGroupStartFailed(
        stage=command.stage,
        error=ErrorInfo(
            type="ExecutorLostError",
            message=(
                f"the executor carrying out the start of group {command.group_id} stopped "
                f"before the {command.stage.value} step completed; a new executor released "
                "what the start had acquired"
            ),
        ),
        released=released,
    )
    _finish_start_with(ex, command, state, failure, started)


COMMAND_HANDLERS: dict[type[Command], Callable[[Any, HandlerServices], None]] = {
    StartWorkerGroup: start_worker_group,
    ShutdownWorkerGroup: shutdown_worker_group,
    ReleaseResources: release_resources,
}
"""Exactly one handler per command type."""
