"""A shut-down group's workers are not running, whatever the last poll before the shutdown said.

The last recorded poll of a group shut down while training (an abort, ``shutdown()`` before
the train function returned) still says its workers run: that is what it saw, and the read
model ``wg_worker_groups.running_workers`` keeps it (docs/sql.md). ``wgstore groups`` and
``wgstore state`` show what is true now: no worker runs, each shows how it ended.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from wgstore.events import EventStore
from wgstore.events.schema import wg_worker_groups
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import (
    ErrorInfo,
    WorkerEnding,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerShutdown,
    WorkerStatusChange,
)
from wgstore.projections import worker_group_state
from wgstore.projections.projector import catch_up_read_models
from wgstore.projections.views import worker_rows

GROUP = "5d0wn0000000aa11"


@pytest.fixture
def shut_down_while_running(store_url: str, history: Any) -> str:
    """Four workers; rank 1 errored, rank 2 finished; 0 and 3 ran until the shutdown killed 3."""
    with EventStore.open(store_url) as store:
        history.record_started_group(store, GROUP, "r1")
        stream = group_stream(GROUP)
        store.append(
            stream,
            [
                WorkerGroupPolled(
                    poll_seq=1,
                    polled_at=datetime.now(UTC),
                    changes=(
                        WorkerStatusChange(
                            world_rank=1, running=False, error=ErrorInfo(type="E", message="x")
                        ),
                        WorkerStatusChange(world_rank=2, running=False),
                    ),
                ),
                WorkerGroupShutdownRequested(reason="aborted by the user"),
                WorkerGroupShutDown(
                    duration_s=0.5,
                    workers=(
                        WorkerShutdown(world_rank=0, ending=WorkerEnding.STOPPED),
                        WorkerShutdown(world_rank=3, ending=WorkerEnding.KILLED),
                    ),
                ),
            ],
        )
    return store_url


def test_the_last_poll_says_two_run_and_the_read_model_keeps_it(
    shut_down_while_running: str,
) -> None:
    with EventStore.open(shut_down_while_running) as store:
        state = worker_group_state(store, GROUP)
        assert state.poll_status is not None and state.poll_status.num_running == 2
        catch_up_read_models(store)
        with store.engine.connect() as connection:
            kept = connection.execute(
                sa.select(wg_worker_groups.c.running_workers).where(
                    wg_worker_groups.c.group_id == GROUP
                )
            ).scalar_one()
    assert kept == 2


@pytest.mark.parametrize("from_log", [True, False], ids=["from-log", "read-models"])
def test_groups_shows_no_running_worker_in_a_shut_down_group(
    shut_down_while_running: str, cli: Callable[..., Any], from_log: bool
) -> None:
    with EventStore.open(shut_down_while_running) as store:
        catch_up_read_models(store)
    extra = ["--from-log"] if from_log else []
    listed = cli("groups", "--json", *extra, "--url", shut_down_while_running)
    (summary,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (summary["status"], summary["running_workers"]) == ("SHUT_DOWN", 0)
    table = cli("groups", *extra, "--url", shut_down_while_running, env={"COLUMNS": "200"})
    assert "0/4 running" in table.stdout
    assert "2/4 running" not in table.stdout


def test_state_shows_how_each_worker_ended_not_running(
    shut_down_while_running: str, cli: Callable[..., Any]
) -> None:
    with EventStore.open(shut_down_while_running, read_only=True) as store:
        rows = worker_rows(worker_group_state(store, GROUP))
    assert [row.status for row in rows] == ["stopped", "error", "finished", "killed"]
    shown = cli("state", GROUP[:6], "--url", shut_down_while_running, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "running" not in shown.stdout.split("latest metrics", 1)[1]


def test_while_shutting_down_the_workers_still_run(store_url: str, history: Any) -> None:
    """Before ``WorkerGroupShutDown`` the workers may still run: the poll is shown as it is."""
    with EventStore.open(store_url) as store:
        history.record_started_group(store, GROUP, "r1")
        store.append(group_stream(GROUP), [WorkerGroupShutdownRequested(reason="done")])
        rows = worker_rows(worker_group_state(store, GROUP))
    assert {row.status for row in rows} == {"started"}
