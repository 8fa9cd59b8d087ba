"""``wgstore supervise --archive-to LOCATION --archive-after AGE --archive-every EVERY``: the
archive on a schedule, beside supervise's passes (:class:`PeriodicArchive`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import typer

from wgstore.cli.archive import open_location, probe_location
from wgstore.cli.common import (
    CliError,
    UsageProblem,
    err_console,
    json_line,
    opened,
    out_console,
    parse_duration,
)
from wgstore.events import EventStore, WgstoreError

__all__ = [
    "PeriodicArchive",
    "archive_while_supervising",
    "show_archive_outcome",
    "supervise_archive",
]


@dataclass
class PeriodicArchive:
    """``wgstore supervise --archive-to``: on a pass, archive the runs that ended more than
    ``after`` ago, at most once every ``every`` (an attempt that failed counts: it is tried
    again ``every`` later). Errors are returned, never raised: supervise goes on."""

    location: str
    after: timedelta
    every: timedelta
    dry_run: bool = False
    batch_runs: int = 200
    clock: Callable[[], float] = time.monotonic
    last_try: float | None = field(default=None, init=False)

    def due(self) -> bool:
        """True when no attempt was made yet, or the last one was ``every`` ago or more."""
        return self.last_try is None or self.clock() - self.last_try >= self.every.total_seconds()

    def run(self, store: EventStore, *, now: datetime | None = None) -> dict[str, Any]:
        """Archive now (whether due or not) into ``store``; what was done, as a JSON object
        (``action``: ``archived``, ``would archive`` or ``archive failed`` with ``error``)."""
        from wgstore.projections.archiving import archive_runs, plan_archive

        self.last_try = self.clock()
        before = (now or datetime.now(UTC)) - self.after
        outcome: dict[str, Any] = {"location": self.location, "ended_before": before.isoformat()}
        try:
            plan = plan_archive(store, ended_before=before)
            if self.dry_run:
                return {"action": "would archive", **outcome, "runs": list(plan.runs)}
            if plan.runs:
                probe_location(open_location(self.location))
            result = archive_runs(store, self.location, plan, batch_runs=self.batch_runs)
        except (WgstoreError, CliError, OSError, ValueError) as error:
            return {"action": "archive failed", **outcome, "error": str(error)}
        return {
            "action": "archived",
            **outcome,
            "runs": result.runs,
            "events": result.events,
            "batches": len(result.batches),
        }

    def run_at(self, url: str) -> dict[str, Any]:
        """:meth:`run` on a store of its own at ``url`` (a store that cannot be opened is an
        error like any other)."""
        try:
            with opened(url, read_only=self.dry_run) as store:
                return self.run(store)
        except (WgstoreError, CliError, OSError) as error:
            self.last_try = self.clock()
            return {"action": "archive failed", "location": self.location, "error": str(error)}


def show_archive_outcome(outcome: dict[str, Any], *, as_json: bool) -> None:
    """Print what one supervise pass's archive did (a failure on stderr)."""
    if as_json:
        typer.echo(json_line(outcome))
        return
    if outcome["action"] == "archive failed":
        err_console().print(
            f"archive  to {outcome['location']} failed (tried again after --archive-every): "
            f"{outcome['error']}",
            markup=False,
            style="yellow",
        )
    elif outcome["action"] == "would archive":
        out_console().print(
            f"archive  would move {len(outcome['runs'])} run(s) to {outcome['location']}",
            markup=False,
        )
    elif outcome["runs"]:
        out_console().print(
            f"archive  moved {len(outcome['runs'])} run(s), {outcome['events']:,} event(s), "
            f"to {outcome['location']}",
            markup=False,
        )


def supervise_archive(
    to: str | None, after: str | None, every: str | None, *, dry_run: bool
) -> PeriodicArchive | None:
    """The archive schedule of ``supervise --archive-to TO --archive-after AFTER
    --archive-every EVERY`` (None without ``--archive-to``), checked before supervise starts.

    Raises:
        UsageProblem: a bad duration, a blank or unusable location, or an --archive-* option
            without --archive-to.
    """
    if to is None:
        for option, value in (("--archive-after", after), ("--archive-every", every)):
            if value is not None:
                raise UsageProblem(f"{option} needs --archive-to LOCATION (where the runs go)")
        return None
    open_location(to, "--archive-to")
    durations = []
    for option, value, default in (
        ("--archive-after", after, "30d"),
        ("--archive-every", every, "1h"),
    ):
        try:
            durations.append(parse_duration(value if value is not None else default))
        except UsageProblem as problem:
            raise UsageProblem(f"{option}: {problem}") from None
    return PeriodicArchive(to, durations[0], durations[1], dry_run=dry_run)


def archive_while_supervising(
    url: str,
    schedule: PeriodicArchive,
    interval_s: float,
    stop: threading.Event | None,
    as_json: bool,
) -> None:
    """Each ``interval_s`` (a supervise pass) until ``stop`` is set, archive when the schedule
    is due and print what it did; ``stop`` None: once, now."""
    while True:
        if schedule.due():
            show_archive_outcome(schedule.run_at(url), as_json=as_json)
        if stop is None or stop.wait(interval_s):
            return
