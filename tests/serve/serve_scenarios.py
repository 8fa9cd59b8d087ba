"""Runs recorded by hand for the serve tests (no Ray): a live run that goes on reporting, and a
run whose worker fails; built with the projection tests' event builders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projection_builders import Stream, append_stream, error, stopped
from run_scenarios import TRAIN_FN, Run

from wgstore.events.run import FailureConfig, ScalingConfig
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerGroupContext, WorkerReported

__all__ = ["errored_run", "live_run", "new_run", "report"]


def new_run(store: Any, run_id: str, name: str) -> Run:
    """A wgstore run, created and with its controller started, named ``name``."""
    return Run(
        store,
        run_id,
        name=name,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        failure_config=FailureConfig(max_failures=2),
        context=WorkerGroupContext(
            num_workers=2, resources_per_worker={"CPU": 0.5}, train_fn=TRAIN_FN
        ),
        lease_s=60.0,
    ).controller()


def live_run(store: Any, run_id: str, *, name: str = "live", reports: int = 2) -> str:
    """A RUNNING run whose attempt 1 (2 workers) has reported ``reports`` steps of ``loss``
    and ``acc`` per rank; returns its group id."""
    group_id = f"{run_id}-g1"
    new_run(store, run_id, name).to("SCHEDULING").to("RUNNING", group_id)
    stream = Stream(
        group_id,
        num_workers=2,
        run_id=run_id,
        attempt=1,
        start=datetime.now(UTC),
        step=timedelta(milliseconds=5),
    )
    stream.running().polled()
    append_stream(store, stream)
    for step in range(1, reports + 1):
        for rank in (0, 1):
            report(store, group_id, rank, step, loss=1.0 / step + rank / 10, acc=step / 10)
    return group_id


def report(store: Any, group_id: str, rank: int, step: int, **metrics: Any) -> None:
    """Append one ``WorkerReported`` of ``rank`` at ``step``."""
    store.append(
        group_stream(group_id), [WorkerReported(world_rank=rank, index=step, metrics=metrics)]
    )


ERROR_MESSAGE = "loss is <b>NaN</b> on rank 1"


def errored_run(store: Any, run_id: str, name: str = "errored") -> str:
    """A run whose only attempt loses rank 1 to an error (with a traceback); returns the group."""
    group_id = f"{run_id}-g1"
    new_run(store, run_id, name).to("SCHEDULING").to("RUNNING", group_id)
    stream = Stream(group_id, num_workers=2, run_id=run_id, start=datetime.now(UTC))
    stream.running().reported(0, loss=0.5).polled()
    stream.polled(stopped(1, error(ERROR_MESSAGE)), unchanged=1)
    append_stream(store, stream)
    return group_id
