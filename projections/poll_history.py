"""The poll history of a worker group: every recorded poll, each with the full status of every worker.

A ``WorkerGroupPolled`` event stores only the workers whose status changed, and how many
unchanged polls came before it (from ``unchanged_since``). The history rebuilds the full
:class:`~wgstore.projections.state.WorkerGroupPollStatus` at each recorded poll, so every status
change is exact, with the number of polls and the time span between changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from wgstore.events.records import RecordedEvent
from wgstore.events.worker_group import WorkerGroupPolled, WorkerStatusChange
from wgstore.projections.state import WorkerGroupFold, WorkerGroupPollStatus, WorkerGroupState

__all__ = ["PollRecord", "fold_poll_history", "iter_poll_history"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PollRecord:
    """One recorded poll of a worker group.

    Attributes:
        poll_seq: the executor's counter of every poll of the group, recorded or not.
        polled_at: when the poll ran (the executor's clock).
        status: the full status of every worker at this poll.
        changes: the workers whose status changed since the previous recorded poll.
        unchanged_polls: how many polls before this one found nothing new.
        unchanged_since: when the first of those unchanged polls ran, if any.
        version: the event's version in its stream.
        position: the event's global position in the log.
    """

    poll_seq: int
    polled_at: datetime
    status: WorkerGroupPollStatus
    changes: tuple[WorkerStatusChange, ...]
    unchanged_polls: int
    unchanged_since: datetime | None
    version: int
    position: int

    @property
    def polls(self) -> int:
        """How many polls this record stands for: itself and the unchanged ones before it."""
        return self.unchanged_polls + 1


def iter_poll_history(
    events: Iterable[RecordedEvent], state: WorkerGroupState | None = None
) -> Iterator[PollRecord]:
    """Yield a :class:`PollRecord` for each recorded poll in ``events``, in order.

    Every event is folded as :func:`~wgstore.projections.state.evolve` does, so an invalid stream
    raises :class:`~wgstore.projections.errors.ProjectionError` instead of a wrong history.

    Args:
        events: the events of one worker-group stream, from version 1 or following ``state``.
        state: the state to continue from, when ``events`` does not start at version 1.
    """
    fold = WorkerGroupFold(state)
    for event in events:
        fold.apply(event)
        payload = event.event
        if isinstance(payload, WorkerGroupPolled):
            status = fold.poll_status
            assert status is not None
            yield PollRecord(
                poll_seq=payload.poll_seq,
                polled_at=payload.polled_at,
                status=status,
                changes=tuple(payload.changes),
                unchanged_polls=payload.unchanged_polls,
                unchanged_since=payload.unchanged_since,
                version=event.version,
                position=event.position,
            )


def fold_poll_history(
    events: Iterable[RecordedEvent], state: WorkerGroupState | None = None
) -> list[PollRecord]:
    """Every recorded poll in ``events``, in order; see :func:`iter_poll_history`."""
    return list(iter_poll_history(events, state))
