"""The health of one group's workers by Ray Train's health-check rules, kept across polls. Pure.

Both pollers (Ray's :class:`~wgstore.orchestration.polling.poller.GroupPoller` and the in-memory
:class:`~wgstore.orchestration.runtimes.fake_runtime.FakePoller`) keep their workers' statuses
here, so the rules are written once and tested without Ray (tests/orchestration/test_health_checks.py):

- A worker whose actor could not be found is failed (``WorkerHealthCheckFailedError``, "is gone").
- A worker whose poll raised (its actor died) is failed with the error, and the preemption note
  when its node was preempted; it is not polled again.
- A poll outstanding longer than ``timeout_s`` keeps the worker ``running=True`` but carries
  ``WorkerHealthCheckTimeoutError`` (Ray Train's "marking the worker as dead"); the poll stays
  outstanding (it is not sent again), and an answer that comes later still counts.
- A worker that answered ``running=False`` is not polled again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from wgstore.orchestration.polling.recorder import (
    PREEMPTED_NOTE,
    health_check_failed,
    health_check_timed_out,
)
from wgstore.projections.state import WorkerStatus

__all__ = ["HealthChecks"]


class HealthChecks:
    """The last status of every worker of one group, and its outstanding polls.

    Args:
        names: world rank -> actor name (for messages); every rank of the group.
        timeout_s: how long a poll may stay outstanding before the worker is marked failed.
        known: world rank -> the last status the log has (the rest start ``running=True``).
        missing: ranks whose actors could not be found.
    """

    def __init__(
        self,
        names: Mapping[int, str],
        timeout_s: float,
        known: Mapping[int, WorkerStatus] | None = None,
        missing: Collection[int] = (),
    ) -> None:
        self._names = dict(names)
        self._timeout_s = timeout_s
        self._last = {rank: WorkerStatus(running=True) for rank in self._names}
        self._last.update(known or {})
        self._outstanding: dict[int, float] = {}  # rank -> when its unanswered poll was sent
        for rank in missing:
            if self._last[rank].running:
                self._last[rank] = WorkerStatus(
                    running=False,
                    error=health_check_failed(f"Worker actor {self._names[rank]} is gone."),
                )

    @property
    def finished(self) -> bool:
        """True when no worker is running any more."""
        return not any(status.running for status in self._last.values())

    def statuses(self) -> dict[int, WorkerStatus]:
        """world rank -> the worker's status now (a copy)."""
        return dict(self._last)

    def to_poll(self) -> list[int]:
        """The ranks to send a poll to: of this group's workers, running, no poll outstanding
        (a rank the log knows and the poller was not given is reported as known, never polled)."""
        return [
            rank
            for rank, status in self._last.items()
            if status.running and rank in self._names and rank not in self._outstanding
        ]

    def sent(self, rank: int, at: float) -> None:
        """A poll was sent to ``rank`` at ``at`` (seconds on the poller's clock)."""
        self._outstanding[rank] = at

    def answered(self, rank: int, status: WorkerStatus) -> None:
        """``rank`` answered its poll with ``status``."""
        self._outstanding.pop(rank, None)
        self._last[rank] = status

    def died(self, rank: int, error: str, traceback: str = "", *, preempted: bool = False) -> None:
        """``rank``'s poll raised: its actor died (``preempted``: with its node)."""
        self._outstanding.pop(rank, None)
        detail = f"Worker: {self._names[rank]}\n{error}"
        if preempted:
            detail += f"\n{PREEMPTED_NOTE}"
        self._last[rank] = WorkerStatus(running=False, error=health_check_failed(detail, traceback))

    def check_timeouts(self, now: float) -> None:
        """Mark every worker whose poll has been outstanding longer than the timeout."""
        for rank, sent_at in self._outstanding.items():
            if now - sent_at > self._timeout_s:
                self._last[rank] = WorkerStatus(
                    running=True, error=health_check_timed_out(self._timeout_s, self._names[rank])
                )
