"""Fixtures for the ``wgstore`` command: stores filled with real event sequences, and a runner.

The events are appended through ``EventStore.append`` exactly as the executor appends them: a
group that ran to the end with one rank failing, a group whose start failed, and a run stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from wgstore.cli import app
from wgstore.events import EventStore, NewEvent
from wgstore.events.run import RunCreated, RunErrored, stream_id_for_run
from wgstore.events.worker_group import (
    ErrorInfo,
    PlacementGroupReserved,
    StartStage,
    SyncActorStarted,
    TrainingLaunched,
    WorkerGroupContext,
    WorkerGroupPolled,
    WorkerGroupShutDown,
    WorkerGroupShutdownRequested,
    WorkerGroupStarted,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
    WorkerInfo,
    WorkerReported,
    WorkersStarted,
    WorkerStatusChange,
    stream_id_for_group,
)

GROUP_ERRORED = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
GROUP_FAILED = "f00dfeed00112233445566778899aabb"
RUN_ID = "run-7c1e"
NUM_WORKERS = 4
STEPS = 3


@dataclass(frozen=True)
class Recorded:
    """A store URL and what was recorded into it."""

    url: str
    errored_group: str
    failed_group: str
    run_id: str


def _context() -> WorkerGroupContext:
    return WorkerGroupContext(
        num_workers=NUM_WORKERS,
        resources_per_worker={"CPU": 0.5},
        train_fn="examples.train:train_fn",
        train_fn_config={"steps": STEPS},
    )


def _workers(group_id: str) -> tuple[WorkerInfo, ...]:
    return tuple(
        WorkerInfo(
            world_rank=rank,
            local_rank=rank,
            node_rank=0,
            local_world_size=NUM_WORKERS,
            world_size=NUM_WORKERS,
            node_id="node-0",
            node_ip="10.0.0.1",
            pid=4000 + rank,
            actor_id=f"actor-{rank}",
            actor_name=f"wgstore-{group_id}-{rank}",
        )
        for rank in range(NUM_WORKERS)
    )


def record_started_group(store: EventStore, group_id: str, run_id: str = RUN_ID) -> datetime:
    """The start of a group: every builder step up to ``TrainingLaunched``; returns the start time."""
    now = datetime.now(UTC)
    store.append(
        stream_id_for_group(group_id),
        [
            WorkerGroupStartRequested(group_id=group_id, run_id=run_id, context=_context()),
            PlacementGroupReserved(
                placement_group_id="pg-1",
                name=f"wgstore-{group_id}",
                bundles=tuple({"CPU": 0.5} for _ in range(NUM_WORKERS)),
                strategy="PACK",
                wait_s=0.05,
            ),
            SyncActorStarted(actor_id="sync-1", name=f"wgstore-{group_id}-sync"),
            WorkersStarted(workers=_workers(group_id)),
            WorkerGroupStarted(start_time=now, startup_s=0.42),
            TrainingLaunched(train_fn="examples.train:train_fn"),
        ],
    )
    return now


def record_errored_group(
    store: EventStore, group_id: str = GROUP_ERRORED, run_id: str = RUN_ID
) -> None:
    """A group that starts, trains, loses rank 1 to an error, finishes the rest, and shuts down."""
    stream = stream_id_for_group(group_id)
    now = record_started_group(store, group_id, run_id)
    store.append(stream, [WorkerGroupPolled(poll_seq=1, polled_at=now)])
    for step in range(STEPS):
        store.append(
            stream,
            [
                WorkerReported(
                    world_rank=rank,
                    index=step,
                    metrics={"loss": round(1.0 / (step + 1) + rank / 100, 4), "step": step},
                    checkpoint=f"/ckpt/{step}" if rank == 0 and step == STEPS - 1 else None,
                )
                for rank in range(NUM_WORKERS)
            ],
        )
    error = ErrorInfo(
        type="ValueError",
        message="loss is NaN on rank 1",
        traceback='Traceback (most recent call last):\n  File "train.py", line 9\nValueError: loss is NaN on rank 1\n',
    )
    store.append(
        stream,
        [
            WorkerGroupPolled(
                poll_seq=5,
                polled_at=now + timedelta(seconds=4),
                changes=(WorkerStatusChange(world_rank=1, running=False, error=error),),
                unchanged_polls=3,
                unchanged_since=now + timedelta(seconds=1),
            )
        ],
    )
    store.append(
        stream,
        [
            WorkerGroupPolled(
                poll_seq=7,
                polled_at=now + timedelta(seconds=6),
                changes=tuple(
                    WorkerStatusChange(world_rank=rank, running=False) for rank in (0, 2, 3)
                ),
                unchanged_polls=1,
                unchanged_since=now + timedelta(seconds=5),
            )
        ],
    )
    store.append(
        stream,
        [
            NewEvent(
                WorkerGroupShutdownRequested(reason="training errored on rank 1"),
                metadata={"command_id": "cmd-shutdown"},
            ),
            WorkerGroupShutDown(duration_s=0.2, released=("pg-1", "sync-1")),
        ],
    )


def record_failed_group(
    store: EventStore, group_id: str = GROUP_FAILED, run_id: str = RUN_ID
) -> None:
    """A group whose start fails at the workers stage, after its placement group was reserved."""
    store.append(
        stream_id_for_group(group_id),
        [
            WorkerGroupStartRequested(
                group_id=group_id, run_id=run_id, attempt=2, context=_context()
            ),
            PlacementGroupReserved(
                placement_group_id="pg-2",
                name=f"wgstore-{group_id}",
                bundles=tuple({"CPU": 0.5} for _ in range(NUM_WORKERS)),
                strategy="PACK",
            ),
            WorkerGroupStartFailed(
                stage=StartStage.WORKERS,
                error=ErrorInfo(type="ImportError", message="No module named 'examples.nope'"),
                released=("pg-2",),
            ),
        ],
    )


def record_run(store: EventStore, run_id: str = RUN_ID) -> None:
    """The run stream of the controller that started both groups."""
    store.append(
        stream_id_for_run(run_id),
        [
            RunCreated(run_id=run_id, name="demo"),
            RunErrored(
                error=ErrorInfo(type="ValueError", message="loss is NaN on rank 1"),
                group_id=GROUP_ERRORED,
            ),
        ],
    )


def fill(url: str) -> Recorded:
    """Record the groups and the run into the (migrated) store at ``url``."""
    with EventStore.open(url) as store:
        record_errored_group(store)
        record_failed_group(store)
        record_run(store)
    return Recorded(url=url, errored_group=GROUP_ERRORED, failed_group=GROUP_FAILED, run_id=RUN_ID)


def make_reader(url: str) -> None:
    """On PostgreSQL, make the store's reader role as `wgstore db reader` does: `wgstore sql`
    and `wgstore serve` read as it and never make it themselves. SQLite needs none."""
    if not url.startswith("sqlite"):
        from wgstore.events.reader_role import prepare_reader

        prepare_reader(url)


@pytest.fixture
def history() -> Any:
    """The recording helpers of this module, for tests that record more than ``recorded``."""
    import types

    return types.SimpleNamespace(
        record_started_group=record_started_group,
        record_errored_group=record_errored_group,
        record_failed_group=record_failed_group,
        record_run=record_run,
        fill=fill,
        make_reader=make_reader,
    )


@pytest.fixture
def recorded(store_url: str) -> Recorded:
    """A store on each backend holding two worker groups and a run."""
    return fill(store_url)


@pytest.fixture
def recorded_sqlite(sqlite_url: str) -> Recorded:
    """The same history, on SQLite only (for tests about the command line, not the backend)."""
    return fill(sqlite_url)


@pytest.fixture
def cli() -> Callable[..., Any]:
    """Run ``wgstore`` in-process with ``CliRunner``; returns the result (exit code, stdout, stderr)."""
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
        return runner.invoke(app, list(args), env=env, catch_exceptions=False, **kwargs)

    return invoke


@pytest.fixture
def in_tmp_folder(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Run the test with the current folder set to a fresh temporary one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WGSTORE_URL", raising=False)
    yield tmp_path
