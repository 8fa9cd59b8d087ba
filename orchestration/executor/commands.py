"""Commands derived from the log, and the pure function that derives them. No Ray, no I/O.

Commands are named in the imperative. Each carries a ``command_id`` derived (uuid5) from the id
of the event that caused it, so deriving again from the same log gives the same ids; every event
the executor appends while carrying a command out has that id as ``causation_id`` in its
metadata, which is how a restarted executor knows a command is already done.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from wgstore.events.records import RecordedEvent
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import (
    PlacementGroupReserved,
    StartStage,
    SyncActorStarted,
    WorkerGroupContext,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartRequested,
    WorkersStarted,
)
from wgstore.projections.state import WorkerGroupState, WorkerGroupStatus

__all__ = [
    "COMMAND_NAMESPACE",
    "Command",
    "ReleaseResources",
    "ShutdownWorkerGroup",
    "StartWorkerGroup",
    "command_id_for",
    "command_needed",
    "derive_commands",
]

COMMAND_NAMESPACE = uuid.UUID("6f1d8f52-3c1e-4f4e-9a51-7f0c2b9d8e11")
"""The uuid5 namespace of command ids."""


def command_id_for(command_type: str, event_id: uuid.UUID) -> uuid.UUID:
    """The id of the ``command_type`` command caused by the event ``event_id``."""
    return uuid.uuid5(COMMAND_NAMESPACE, f"{command_type}:{event_id}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """Something the executor must do on Ray for one worker group."""

    command_id: uuid.UUID
    group_id: str
    caused_by: uuid.UUID
    """The id of the event this command was derived from."""

    @property
    def stream_id(self) -> str:
        """The group's stream."""
        return group_stream(self.group_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class StartWorkerGroup(Command):
    """Reserve the placement group, start the sync actor and workers, launch training."""

    context: WorkerGroupContext


@dataclass(frozen=True, slots=True, kw_only=True)
class ShutdownWorkerGroup(Command):
    """Poll once more, release every resource of the group, record the shutdown."""

    reason: str
    abort: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseResources(Command):
    """Release what a start left half-done (its executor stopped) and record the failed start.

    ``stage`` is the start step that never completed.
    """

    stage: StartStage


_NEXT_STAGE: dict[type, StartStage] = {
    PlacementGroupReserved: StartStage.SYNC_ACTOR,
    SyncActorStarted: StartStage.WORKERS,
    WorkersStarted: StartStage.INIT_TRAIN_CONTEXT,
    WorkerGroupStarted: StartStage.LAUNCH,
}


def _half_done(state: WorkerGroupState) -> bool:
    if state.status is WorkerGroupStatus.STARTING:
        return True
    return state.status is WorkerGroupStatus.RUNNING and not state.training_launched


def derive_commands(event: RecordedEvent, state: WorkerGroupState | None) -> list[Command]:
    """The commands ``event`` calls for, given ``state``: the group's state right after it.

    - ``WorkerGroupStartRequested`` (group still ``REQUESTED``) -> ``StartWorkerGroup``.
    - ``WorkerGroupShutdownRequested`` (group ``SHUTTING_DOWN``) -> ``ShutdownWorkerGroup``.
    - a builder step (``PlacementGroupReserved``, ``SyncActorStarted``, ``WorkersStarted``,
      ``WorkerGroupStarted``) after which the start is still half-done -> ``ReleaseResources``.
      While the executor that carries the start out is alive, it ignores these (the start
      releases on failure itself); after it died, they are what cleans up.

    Anything else derives nothing. Pure: same event and state, same commands and ids.
    """
    payload = event.event
    if state is None:
        return []
    if isinstance(payload, WorkerGroupStartRequested):
        if state.status is not WorkerGroupStatus.REQUESTED:
            return []
        return [
            StartWorkerGroup(
                command_id=command_id_for("StartWorkerGroup", event.event_id),
                group_id=payload.group_id,
                caused_by=event.event_id,
                context=payload.context,
            )
        ]
    if isinstance(payload, WorkerGroupShutdownRequested):
        if state.status is not WorkerGroupStatus.SHUTTING_DOWN:
            return []
        return [
            ShutdownWorkerGroup(
                command_id=command_id_for("ShutdownWorkerGroup", event.event_id),
                group_id=state.group_id,
                caused_by=event.event_id,
                reason=payload.reason,
                abort=payload.abort,
            )
        ]
    stage = _NEXT_STAGE.get(type(payload))
    if stage is not None and _half_done(state):
        return [
            ReleaseResources(
                command_id=command_id_for("ReleaseResources", event.event_id),
                group_id=state.group_id,
                caused_by=event.event_id,
                stage=stage,
            )
        ]
    return []


def command_needed(command: Command, state: WorkerGroupState) -> bool:
    """Whether ``command`` still has work to do when the group is in ``state`` (the latest)."""
    if isinstance(command, StartWorkerGroup):
        return state.status is WorkerGroupStatus.REQUESTED
    if isinstance(command, ShutdownWorkerGroup):
        return state.status is WorkerGroupStatus.SHUTTING_DOWN
    if isinstance(command, ReleaseResources):
        return _half_done(state)
    return False
