"""A log of ended and live runs for the archive tests, and what to compare before and after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from run_scenarios import aborted, finished_after_a_retry, running

from wgstore.events import EventStore
from wgstore.projections.archiving import ArchivePlan, plan_archive

ENDED = ("fin-a", "fin-b", "abt-a")
"""The runs of :func:`fleet` that have ended (and are not resumable)."""
LIVE = "live-a"


def fleet(store: EventStore) -> None:
    """Two finished runs, an aborted one and a live one, their events interleaved with each
    other's (each scenario appends its own, one after another; the live one last)."""
    finished_after_a_retry(store, "fin-a")
    aborted(store, "abt-a")
    running(store, LIVE)
    finished_after_a_retry(store, "fin-b")


def plan_everything(store: EventStore) -> ArchivePlan:
    """Every ended run, whenever it ended."""
    return plan_archive(store, ended_before=datetime.now(UTC) + timedelta(days=1))


def log_rows(store: EventStore) -> list[tuple[Any, ...]]:
    """Every live row, as verify reads it."""
    return list(
        store.fetch_rows(
            f"SELECT {store.recorder.columns}, log_hash, mac FROM wg_events ORDER BY position",
            (),
        )
    )
