"""The archive is plain Parquet: the README's fleet-wide question, answered with ``ray.data``
over a real archive on the session's local Ray (SQLite; the files are the same on Postgres)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from archived_runs import fleet, plan_everything
from run_scenarios import errored_budget_exhausted

from wgstore.events import EventStore
from wgstore.projections.archiving import archive_runs

pytestmark = pytest.mark.usefixtures("ray_session")


def ends_per_day(archive: str) -> list[dict[str, Any]]:
    """How runs ended, per day, over the whole archive (the README's example)."""
    import ray
    from ray.data.expressions import col

    events = ray.data.read_parquet(f"{archive}/events")
    ends = events.filter(expr=col("event_type").is_in(["RunFinished", "RunErrored", "RunAborted"]))
    per_day = ends.map(
        lambda row: {"day": row["recorded_at"].date().isoformat(), "end": row["event_type"]}
    )
    return sorted(per_day.groupby(["day", "end"]).count().take_all(), key=lambda r: r["end"])


def test_ray_data_reads_the_archive_as_it_is(tmp_path: Path) -> None:
    with EventStore.open(f"sqlite:///{tmp_path / 'wgstore.db'}") as store:
        fleet(store)
        errored_budget_exhausted(store, "err-a")
        archive = str(tmp_path / "archive")
        archive_runs(store, archive, plan_everything(store))
    rows = ends_per_day(archive)
    assert [(r["end"], r["count()"]) for r in rows] == [
        ("RunAborted", 1),
        ("RunErrored", 1),
        ("RunFinished", 2),
    ]
