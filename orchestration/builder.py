"""``WorkerGroupStateBuilder``: the incremental construction of a group; every step is an event.

Like Ray Train's builder, each ``with_*`` step records a resource that is already live, and
``release()`` tears down only what was acquired (workers, then the sync actor, then the
placement group), plus anything still named for the group. Unlike Ray's, every step appends its
event at once (``PlacementGroupReserved``, ``SyncActorStarted``, ``WorkersStarted``,
``WorkerGroupStarted``), so an executor that dies mid-start leaves a log that says what to
release. Appends use the stream version the builder expects; if someone asked for shutdown
meanwhile, the step raises :class:`StartAborted` instead of appending.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wgstore.events import ConcurrencyError, EventStore, Fence, NewEvent
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupStarted,
    WorkerInfo,
    WorkersStarted,
)
from wgstore.orchestration.errors import OrchestrationError
from wgstore.orchestration.runtimes.protocol import (
    ReservedPlacementGroup,
    StartedActor,
    WorkerGroupRuntime,
)
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus, evolve

__all__ = ["BuiltGroup", "StartAborted", "WorkerGroupStateBuilder"]


class StartAborted(OrchestrationError):
    """Shutdown was requested while the group was starting; the start stops and releases."""


@dataclass(frozen=True, slots=True)
class BuiltGroup:
    """A started group's live handles, in world-rank order."""

    group_id: str
    placement_group: Any
    sync_actor: Any
    workers: tuple[Any, ...]
    infos: tuple[WorkerInfo, ...]


class WorkerGroupStateBuilder:
    """Builds one worker group step by step, appending an event per step.

    Args:
        store: the event store.
        runtime: the cluster the resources live on (``release()`` goes through it).
        state: the group's state as read just before the start (status ``REQUESTED``).
        command_id: the ``StartWorkerGroup`` command; event ids derive from it, so a retried
            append after a lost reply is idempotent.
        metadata: metadata for every appended event (``causation_id`` and the like).
        fence: the executor's claim of the group, carried by every append.
    """

    def __init__(
        self,
        store: EventStore,
        runtime: WorkerGroupRuntime,
        state: WorkerGroupState,
        *,
        command_id: uuid.UUID,
        metadata: Mapping[str, Any],
        fence: Fence | None = None,
    ) -> None:
        self.store = store
        self._fence = fence
        self.runtime = runtime
        self.state = state
        self._command_id = command_id
        self._metadata = dict(metadata)
        self.placement_group: Any = None
        self.sync_actor: Any = None
        self.workers: tuple[Any, ...] = ()
        self.infos: tuple[WorkerInfo, ...] = ()

    @property
    def group_id(self) -> str:
        """The group being built."""
        return self.state.group_id

    def _append(self, event: Any) -> None:
        new = NewEvent(
            event,
            event_id=uuid.uuid5(self._command_id, type(event).__name__),
            metadata=self._metadata,
        )
        while True:
            try:
                records = self.store.append(
                    self.state.stream_id,
                    [new],
                    expected_version=self.state.version,
                    fence=self._fence,
                )
            except ConcurrencyError:
                for record in self.store.read_stream(
                    self.state.stream_id, from_version=self.state.version + 1
                ):
                    self.state = evolve(self.state, record)
                if self.state.status is WorkerGroupStatus.SHUTTING_DOWN:
                    raise StartAborted(
                        f"shutdown of group {self.group_id} was requested while it was starting"
                    ) from None
                continue
            for record in records:
                if record.version == self.state.version + 1:
                    self.state = evolve(self.state, record)
            return

    def check_not_aborted(self) -> None:
        """Raise :class:`StartAborted` if shutdown was requested since the last step."""
        for record in self.store.read_stream(
            self.state.stream_id, from_version=self.state.version + 1
        ):
            self.state = evolve(self.state, record)
        if self.state.status is WorkerGroupStatus.SHUTTING_DOWN:
            raise StartAborted(f"shutdown of group {self.group_id} was requested while starting")

    def with_placement_group(
        self,
        placement_group: ReservedPlacementGroup,
        *,
        bundles: Sequence[Mapping[str, float]],
        strategy: str,
        wait_s: float,
    ) -> WorkerGroupStateBuilder:
        """Record the ready placement group (appends ``PlacementGroupReserved``)."""
        self.placement_group = placement_group.handle
        self._append(
            PlacementGroupReserved(
                placement_group_id=placement_group.placement_group_id,
                name=placement_group.name,
                bundles=tuple(dict(b) for b in bundles),
                strategy=strategy,
                wait_s=round(wait_s, 6),
            )
        )
        return self

    def with_sync_actor(self, sync_actor: StartedActor) -> WorkerGroupStateBuilder:
        """Record the live sync actor (appends ``SyncActorStarted``)."""
        self.sync_actor = sync_actor.handle
        self._append(SyncActorStarted(actor_id=sync_actor.actor_id, name=sync_actor.name))
        return self

    def with_workers(
        self, workers: Sequence[Any], infos: Sequence[WorkerInfo]
    ) -> WorkerGroupStateBuilder:
        """Record the live workers, in world-rank order, with their ranks (``WorkersStarted``)."""
        self.workers = tuple(workers)
        self.infos = tuple(infos)
        self._append(WorkersStarted(workers=self.infos))
        return self

    def build(self, *, startup_s: float) -> BuiltGroup:
        """The group is active (appends ``WorkerGroupStarted``).

        Raises:
            ValueError: a step is missing, as Ray's ``build()`` refuses an incomplete state.
        """
        missing = [
            name
            for name, value in (
                ("placement_group", self.placement_group),
                ("workers", self.workers),
                ("sync_actor", self.sync_actor),
            )
            if not value
        ]
        if missing:
            raise ValueError(f"Cannot build incomplete state. Missing: {', '.join(missing)}")
        self._append(
            WorkerGroupStarted(start_time=datetime.now(UTC), startup_s=round(startup_s, 6))
        )
        return BuiltGroup(
            self.group_id, self.placement_group, self.sync_actor, self.workers, self.infos
        )

    def launched(self, train_fn: str) -> None:
        """Training runs on every worker (appends ``TrainingLaunched``)."""
        self._append(TrainingLaunched(train_fn=train_fn))

    def release(self) -> tuple[str, ...]:
        """Tear down what was acquired, and anything else named for the group."""
        return self.runtime.release_group(
            self.group_id,
            extra_handles=[*self.workers, *([self.sync_actor] if self.sync_actor else [])],
        )
