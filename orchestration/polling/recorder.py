"""Poll results and the recorder that turns polls into ``WorkerGroupPolled`` events. Pure.

Polls are frequent, so only changes are stored: a poll where no worker's status differs from the
last recorded poll is not stored but counted, and the count (``unchanged_polls``) and the time of
the first of them (``unchanged_since``) ride on the next recorded poll. ``flush()`` records the
trailing unchanged polls when polling stops, so the history accounts for every poll.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Ray worker processes import this module; keep it light
    from wgstore.events.worker_group import ErrorInfo, WorkerGroupPolled
    from wgstore.projections.state import WorkerStatus as WorkerObservation

__all__ = [
    "PREEMPTED_NOTE",
    "PollRecorder",
    "WorkerObservation",
    "WorkerPoll",
    "health_check_failed",
    "health_check_timed_out",
]


PREEMPTED_NOTE = "The actor's node was preempted."
"""The line the poller adds to a worker's health-check error when Ray says its actor died
because its node was preempted (``RayActorError.preempted``); the run's decider reads it as a
``preemption`` failure."""


@dataclass(frozen=True, slots=True)
class WorkerPoll:
    """What one worker answered to ``poll_status()``."""

    running: bool
    error: ErrorInfo | None = None
    return_value: Any = None


def health_check_failed(detail: str, traceback: str = "") -> ErrorInfo:
    """The error of a worker whose poll raised or whose actor is gone."""
    from wgstore.events.worker_group import ErrorInfo

    return ErrorInfo(
        type="WorkerHealthCheckFailedError",
        message=f"A worker health check failed.\n{detail}",
        traceback=traceback,
    )


CLUSTER_LOST = "ClusterLostError"
"""The error type of a worker whose cluster lost the whole group: when the group was found again
(an executor or controller resumed), none of its actors and not its placement group existed any
more (the local Ray of a driver that died, a cluster restarted). Not the training's failure: the
run's controller counts it against ``controller_failure_limit``, as Ray Train 2.60 counts a lost
controller, never against ``max_failures``."""


def cluster_lost(name: str) -> ErrorInfo:
    """The error of worker ``name`` when its cluster lost the whole group (see above)."""
    from wgstore.events.worker_group import ErrorInfo

    return ErrorInfo(
        type=CLUSTER_LOST,
        message=f"Worker actor {name} is gone, with every other actor and the placement group of "
        "its group: the cluster lost the group (its driver's local Ray died, or the cluster "
        "restarted).",
    )


def health_check_timed_out(timeout_s: float, name: str) -> ErrorInfo:
    """The error of a worker whose poll hung longer than ``timeout_s`` (Ray Train's words)."""
    from wgstore.events.worker_group import ErrorInfo

    return ErrorInfo(
        type="WorkerHealthCheckTimeoutError",
        message=(
            f"A worker health check has been hanging for more than {timeout_s:g} seconds. "
            f"Marking the worker as dead.\nWorker: {name}"
        ),
    )


def __getattr__(name: str) -> Any:
    # ``WorkerObservation`` (the status of one worker as a poll saw it, health-check failures
    # included) is the projections' ``WorkerStatus``: one type, under the poller's name. Looked
    # up lazily: Ray worker processes import this module for WorkerPoll and must stay light.
    if name == "WorkerObservation":
        from wgstore.projections.state import WorkerStatus

        return WorkerStatus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class PollRecorder:
    """Decides which polls are stored and what they carry.

    Args:
        last_recorded: each worker's status as of the last recorded poll (empty at first).
        last_poll_seq: ``poll_seq`` of the last recorded poll (0 at first).
    """

    def __init__(
        self,
        last_recorded: Mapping[int, WorkerObservation] | None = None,
        last_poll_seq: int = 0,
    ) -> None:
        self._last: dict[int, WorkerObservation] = dict(last_recorded or {})
        self._seq = last_poll_seq
        self._unchanged = 0
        self._unchanged_since: datetime | None = None
        self._last_unchanged_at: datetime | None = None

    @property
    def poll_seq(self) -> int:
        """How many polls so far, recorded or not."""
        return self._seq

    def observe(
        self, statuses: Mapping[int, WorkerObservation], polled_at: datetime
    ) -> WorkerGroupPolled | None:
        """Count one poll; return the event to store, or None when nothing changed."""
        from wgstore.events.worker_group import WorkerGroupPolled, WorkerStatusChange

        self._seq += 1
        changes = tuple(
            WorkerStatusChange(
                world_rank=rank,
                running=obs.running,
                error=obs.error,
                return_value=obs.return_value,
            )
            for rank, obs in sorted(statuses.items())
            if self._last.get(rank) != obs
        )
        if not changes:
            if self._unchanged == 0:
                self._unchanged_since = polled_at
            self._unchanged += 1
            self._last_unchanged_at = polled_at
            return None
        event = WorkerGroupPolled(
            poll_seq=self._seq,
            polled_at=polled_at,
            changes=changes,
            unchanged_polls=self._unchanged,
            unchanged_since=self._unchanged_since if self._unchanged else None,
        )
        self._last.update(statuses)
        self._unchanged = 0
        self._unchanged_since = None
        return event

    def flush(self) -> WorkerGroupPolled | None:
        """Record the trailing unchanged polls: the last of them, standing for the ones before."""
        from wgstore.events.worker_group import WorkerGroupPolled

        if self._unchanged == 0 or self._last_unchanged_at is None:
            return None
        before = self._unchanged - 1
        event = WorkerGroupPolled(
            poll_seq=self._seq,
            polled_at=self._last_unchanged_at,
            changes=(),
            unchanged_polls=before,
            unchanged_since=self._unchanged_since if before else None,
        )
        self._unchanged = 0
        self._unchanged_since = None
        return event
