"""Which runs a listing keeps: status, source, orphaned, created since (``wgstore runs``' filters).

:meth:`RunFilter.of` checks the wanted statuses and source against what a run can have and
names the valid ones when one is not; :meth:`RunFilter.matches` keeps a run summary
(:func:`~wgstore.projections.run_views.run_summaries`) or not. Pure: no store, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from wgstore.events import InvalidArgumentError
from wgstore.projections.rows import UNREADABLE, RunSummary
from wgstore.projections.run_rows import RUN_SOURCES
from wgstore.projections.run_state import RunStatus

__all__ = ["UNREADABLE", "RunFilter"]


@dataclass(frozen=True)
class RunFilter:
    """What a run must be to be listed; an empty filter keeps every run, unreadable ones too.

    ``statuses``: any of these :class:`~wgstore.projections.run_state.RunStatus` values (empty:
    any); ``source``: ``wgstore``, ``ray_train`` or ``ray_export`` (None: any); ``orphaned``: only orphaned
    runs; ``since``: only runs created at or after this moment (a run without a creation time is
    left out). A run that cannot be read is left out by every filter that is set.
    """

    statuses: frozenset[str] = frozenset()
    source: str | None = None
    orphaned: bool = False
    since: datetime | None = None

    @classmethod
    def of(
        cls,
        statuses: Iterable[str] = (),
        source: str | None = None,
        *,
        orphaned: bool = False,
        since: datetime | None = None,
    ) -> RunFilter:
        """A filter from what a user typed: statuses in any case, ``-`` for ``_``.

        Raises:
            InvalidArgumentError: an unknown status or source (the message lists the valid ones).
        """
        known = [status.value for status in RunStatus]
        wanted = frozenset(status.upper().replace("-", "_") for status in statuses)
        unknown = sorted(wanted - set(known))
        if unknown:
            raise InvalidArgumentError(
                f"unknown status {', '.join(unknown)}; use one of {', '.join(known)}"
            )
        if source is not None and source not in RUN_SOURCES:
            raise InvalidArgumentError(
                f"unknown source {source!r}; use one of {', '.join(RUN_SOURCES)}"
            )
        return cls(statuses=wanted, source=source, orphaned=orphaned, since=since)

    @property
    def active(self) -> bool:
        """True when any criterion is set (then unreadable runs are left out)."""
        return bool(self.statuses or self.source or self.orphaned or self.since)

    def matches(self, summary: RunSummary) -> bool:
        """Whether the run ``summary`` passes every criterion."""
        if not self.active:
            return True
        if summary.status == UNREADABLE:
            return False
        if self.statuses and summary.status not in self.statuses:
            return False
        if self.source and summary.source != self.source:
            return False
        if self.orphaned and not summary.orphaned:
            return False
        created = summary.created_at
        return not (self.since and (created is None or created < self.since))
