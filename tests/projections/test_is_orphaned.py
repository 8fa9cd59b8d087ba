"""``is_orphaned``: which runs need a controller that nobody holds, decided without a database.

Written for the survivors of ``make mutate`` (issue 15): the read-model tests cover it through
SQLite and Postgres only, which the fast mutation run does not use.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wgstore.events.worker_group import WorkerGroupContext
from wgstore.projections.run_state import ControllerSession, RunState, RunStatus, is_orphaned

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CONTEXT = WorkerGroupContext(num_workers=1, train_fn="examples.train:train_fn")
SESSION = ControllerSession(controller_id="c1", host="h", pid=7, resumed=False, at=T0, version=2)


def _run(**fields: Any) -> RunState:
    base: dict[str, Any] = {
        "stream_id": "run-r1",
        "run_id": "r1",
        "name": "",
        "status": RunStatus.RUNNING,
        "controller_state": "RUNNING",
        "version": 2,
        "position": 2,
        "created_at": T0,
        "updated_at": T0,
        "context": CONTEXT,
        "controllers": (SESSION,),
    }
    return RunState(**{**base, **fields})


def test_a_run_a_controller_took_is_orphaned_without_a_lease_or_once_it_expired() -> None:
    run = _run()
    assert is_orphaned(run, None, T0) is True
    assert is_orphaned(run, T0, T0) is True  # expiring now: expired
    assert is_orphaned(run, T0 - timedelta(seconds=1), T0) is True
    assert is_orphaned(run, T0 + timedelta(seconds=1), T0) is False


@pytest.mark.parametrize(
    "fields",
    [{"ended": True}, {"context": None}, {"controllers": ()}],
    ids=["ended", "recorded-from-ray-train", "never-taken"],
)
def test_ended_ray_train_and_never_taken_runs_are_never_orphaned(fields: dict[str, Any]) -> None:
    run = _run(**fields)
    assert is_orphaned(run, None, T0) is False
    assert is_orphaned(run, T0 - timedelta(hours=1), T0) is False
