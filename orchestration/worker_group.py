"""``WorkerGroup.create()`` -> ``ActiveWorkerGroup``: the library face of worker groups.

``WorkerGroup`` is the inactive factory; ``create()`` appends ``WorkerGroupStartRequested`` and
returns an :class:`ActiveWorkerGroup` only once training runs on every worker (so no method ever
asks "am I active?"), or raises :class:`WorkerGroupStartError` once ``WorkerGroupStartFailed`` is
in the log. Everything an ``ActiveWorkerGroup`` says comes from the log.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from wgstore.events import NO_STREAM, EventStore
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import (
    WorkerGroupContext,
    WorkerGroupShutdownRequested,
    WorkerGroupStartRequested,
    WorkerInfo,
)
from wgstore.orchestration.errors import WorkerGroupStartError, WorkerGroupTimeoutError
from wgstore.projections.state import (
    WorkerGroupPollStatus,
    WorkerGroupState,
    WorkerGroupStatus,
    WorkerStatus,
    evolve,
)

if TYPE_CHECKING:
    from wgstore.orchestration.executor.ray_executor import RayExecutor

__all__ = ["ActiveWorkerGroup", "WorkerGroup", "follow_group"]

_GROUP_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def follow_group(
    store: EventStore,
    state: WorkerGroupState | None,
    group_id: str,
    until: Callable[[WorkerGroupState], bool],
    *,
    timeout_s: float | None,
    on_update: Callable[[WorkerGroupState], None] | None = None,
) -> WorkerGroupState:
    """Fold the group's new events into ``state`` until ``until(state)`` holds.

    Wakes on new events (``wait_for_new``). Calls ``on_update`` after each batch of new events.

    Raises:
        WorkerGroupTimeoutError: ``until`` did not hold within ``timeout_s``.
    """
    stream = group_stream(group_id)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        head = store.head()
        changed = False
        for record in store.read_stream(stream, from_version=(state.version if state else 0) + 1):
            state = evolve(state, record)
            changed = True
        if state is not None:
            if changed and on_update is not None:
                on_update(state)
            if until(state):
                return state
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            status = state.status.value if state else "not requested"
            raise WorkerGroupTimeoutError(
                f"worker group {group_id} did not get there within {timeout_s}s (it is {status}); "
                f"is an executor running? Inspect it with `wgstore state {group_id}`"
            )
        store.wait_for_new(head, 0.5 if remaining is None else min(0.5, remaining))


def _default_poll_status(state: WorkerGroupState) -> WorkerGroupPollStatus:
    if state.poll_status is not None:
        return state.poll_status
    return WorkerGroupPollStatus(
        worker_statuses={w.world_rank: WorkerStatus(running=True) for w in state.workers}
    )


class ActiveWorkerGroup:
    """A started worker group: training runs on every worker. Made by :meth:`WorkerGroup.create`.

    Every answer is read from the log, so it is the same in any process that opens the store.
    With the in-process executor (``create(..., executor=None)``), a group still running when
    the interpreter exits is shut down first (reason ``"process exiting"``), since nothing else
    would release its detached Ray resources.
    """

    def __init__(
        self,
        store: EventStore,
        state: WorkerGroupState,
        *,
        executor: RayExecutor | None = None,
    ) -> None:
        self.store = store
        self._state = state
        self._owned_executor = executor
        if executor is not None:  # our executor dies with this process: release first
            atexit.register(self._shutdown_at_exit)

    def _shutdown_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.shutdown(reason="process exiting", timeout_s=30.0)

    @property
    def group_id(self) -> str:
        """The group's id (its stream is ``worker-group-<group_id>``)."""
        return self._state.group_id

    @property
    def run_id(self) -> str:
        """The run this group belongs to."""
        return self._state.run_id

    @property
    def state(self) -> WorkerGroupState:
        """The group's latest state, folded from the log."""
        self._state = follow_group(
            self.store, self._state, self.group_id, lambda _: True, timeout_s=None
        )
        return self._state

    @property
    def workers(self) -> tuple[WorkerInfo, ...]:
        """The workers, in world-rank order, with their ranks, nodes and actor names."""
        return self._state.workers

    def __len__(self) -> int:
        return len(self._state.workers)

    def __repr__(self) -> str:
        return f"ActiveWorkerGroup({self.group_id!r}, {len(self)} workers)"

    def poll_status(self) -> WorkerGroupPollStatus:
        """The status of every worker as of the latest recorded poll (all running before one)."""
        return _default_poll_status(self.state)

    def wait(
        self,
        timeout_s: float | None = None,
        *,
        on_update: Callable[[WorkerGroupState], None] | None = None,
    ) -> WorkerGroupPollStatus:
        """Block until every worker has stopped, or any worker failed, or the group shut down.

        Like Ray Train's controller, a worker error ends the wait at once (the other workers may
        still run; call :meth:`shutdown`). Returns the poll status at that point.

        Raises:
            WorkerGroupTimeoutError: not done within ``timeout_s``.
        """

        def done(state: WorkerGroupState) -> bool:
            status = state.poll_status
            return state.status is not WorkerGroupStatus.RUNNING or (
                status is not None and (status.finished or bool(status.errors))
            )

        self._state = follow_group(
            self.store, self._state, self.group_id, done, timeout_s=timeout_s, on_update=on_update
        )
        return _default_poll_status(self._state)

    def abort(
        self, reason: str = "aborted", *, timeout_s: float | None = 120.0
    ) -> WorkerGroupState:
        """Abort the group, as Ray's ``WorkerGroup.abort()``: a shutdown that runs the
        executor's ``before_/after_worker_group_abort`` hooks instead of the shutdown hooks
        (the workers' own ``on_shutdown`` hooks still get their patience). Recorded as
        ``WorkerGroupShutdownRequested(abort=True)``; returns the final state."""
        return self.shutdown(reason, timeout_s=timeout_s, _abort=True)

    def shutdown(
        self, reason: str = "done", *, timeout_s: float | None = 120.0, _abort: bool = False
    ) -> WorkerGroupState:
        """Ask for shutdown (``WorkerGroupShutdownRequested``) and wait until it is done.

        Idempotent: on a group already shutting down or shut down it only waits. Returns the
        final state (``SHUT_DOWN``, with what was released).
        """
        state = self.state
        if state.status is WorkerGroupStatus.RUNNING:
            self.store.append(
                state.stream_id, [WorkerGroupShutdownRequested(reason=reason, abort=_abort)]
            )
        try:
            self._state = follow_group(
                self.store,
                self._state,
                self.group_id,
                lambda s: s.status.is_terminal,
                timeout_s=timeout_s,
            )
        finally:
            if self._owned_executor is not None and self._state.status.is_terminal:
                atexit.unregister(self._shutdown_at_exit)
                self._owned_executor.stop()
                self._owned_executor = None
        return self._state


def _abandon_start(store: EventStore, group_id: str) -> None:
    """Ctrl-C during ``create()``: ask for shutdown and let the executor release what it took."""
    with contextlib.suppress(Exception):
        state = follow_group(store, None, group_id, lambda _: True, timeout_s=None)
        if not state.status.is_terminal and state.status is not WorkerGroupStatus.SHUTTING_DOWN:
            store.append(
                state.stream_id,
                [WorkerGroupShutdownRequested(reason="interrupted while starting")],
            )
        follow_group(store, state, group_id, lambda s: s.status.is_terminal, timeout_s=60.0)


class WorkerGroup:
    """The factory of worker groups; :meth:`create` returns an :class:`ActiveWorkerGroup`."""

    @classmethod
    def create(
        cls,
        store: EventStore,
        context: WorkerGroupContext,
        *,
        run_id: str | None = None,
        group_id: str | None = None,
        attempt: int = 1,
        executor: RayExecutor | Literal["external"] | None = None,
        timeout_s: float | None = None,
    ) -> ActiveWorkerGroup:
        """Start a worker group and return it once training runs on every worker.

        Args:
            store: the event store that records the group.
            context: what to start (workers, resources, train function by import path, config).
            run_id: the run the group belongs to (default: the group id).
            group_id: letters, digits and ``_`` (default: a new random id).
            attempt: the run attempt this group is.
            executor: ``None`` runs an executor in this process for this group (connecting to
                Ray: ``RAY_ADDRESS`` or a local instance); a :class:`RayExecutor` to use (started
                if it is not); ``"external"`` when a standalone ``wgstore executor`` serves the
                store.
            timeout_s: how long to wait for the start (default: placement timeout + 180 s).

        Raises:
            WorkerGroupStartError: the start failed; ``WorkerGroupStartFailed`` is in the log and
                everything acquired was released. Carries ``stage``, ``cause``, ``group_id``.
            WorkerGroupTimeoutError: the start did not finish in time (nothing serves the
                store?). The group is left as the log shows it.
        """
        group_id = group_id or uuid.uuid4().hex[:16]
        if not _GROUP_ID.match(group_id):
            raise ValueError(
                f"group_id must be 1-64 letters, digits or '_' (it names Ray resources "
                f"wgstore-<group_id>-<n>), got {group_id!r}"
            )
        context = _with_propagated_env(context)
        owned: RayExecutor | None = None
        if executor is None:
            from wgstore.orchestration.executor.ray_executor import RayExecutor

            owned = RayExecutor(store, group_ids={group_id}, from_position=store.head()).start()
        elif executor != "external":
            executor.start()
        try:
            store.append(
                group_stream(group_id),
                [
                    WorkerGroupStartRequested(
                        group_id=group_id,
                        run_id=run_id or group_id,
                        attempt=attempt,
                        context=context,
                    )
                ],
                expected_version=NO_STREAM,
            )
            wait_s = timeout_s if timeout_s is not None else context.placement_timeout_s + 180.0
            state = follow_group(
                store,
                None,
                group_id,
                lambda s: s.training_launched or s.status.is_terminal,
                timeout_s=wait_s,
            )
        except BaseException as error:
            if owned is not None:
                if isinstance(error, KeyboardInterrupt):
                    _abandon_start(store, group_id)
                owned.stop()
            raise
        if not state.training_launched:
            if owned is not None:
                owned.stop()
            failure = state.start_failure
            if failure is None:  # shut down while starting
                from wgstore.events.worker_group import ErrorInfo, StartStage

                raise WorkerGroupStartError(
                    StartStage.PLACEMENT_GROUP,
                    ErrorInfo(type="StartAborted", message="shut down while starting"),
                    group_id=group_id,
                    released=state.released,
                )
            raise WorkerGroupStartError(
                failure.stage, failure.error, group_id=group_id, released=tuple(failure.released)
            )
        return ActiveWorkerGroup(store, state, executor=owned)


def _with_propagated_env(context: WorkerGroupContext) -> WorkerGroupContext:
    """``context`` with this process's Ray Train variables merged into its ``runtime_env``."""
    import dataclasses

    from wgstore.orchestration.runtimes.environment import worker_runtime_env

    runtime_env = worker_runtime_env(context.runtime_env)
    if runtime_env == dict(context.runtime_env):
        return context
    return dataclasses.replace(context, runtime_env=runtime_env)
