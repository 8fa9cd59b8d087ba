"""Runs recorded by hand for the serve tests (no Ray): a live run that goes on reporting, a run
whose worker fails, and attempts that start while a page is open, as wgstore's controller and as
the Ray Train recorder append them; built with the projection tests' event builders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from projection_builders import Stream, append_stream, error, stopped
from run_scenarios import RAY_FIELDS, TRAIN_FN, Run

from wgstore.events.run import FailureConfig, ScalingConfig
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerGroupContext, WorkerReported

__all__ = [
    "attempt",
    "errored_run",
    "live_run",
    "new_run",
    "next_attempt",
    "ray_train_run",
    "report",
    "restarting",
    "resumed_run",
    "wgstore_run",
]


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


def attempt(store: Any, run_id: str, group_id: str, number: int) -> None:
    """Attempt ``number`` of run ``run_id`` on the stream of ``group_id``, each event its own
    append as a recorder makes them: requested (naming the run), every builder step, polled,
    and one report of ``loss`` per rank."""
    stream = Stream(
        group_id,
        num_workers=2,
        run_id=run_id,
        attempt=number,
        start=datetime.now(UTC),
        step=timedelta(milliseconds=5),
    )
    stream.running().polled().reported(0, loss=1.0 / number).reported(1, loss=1.1 / number)
    append_stream(store, stream, one_by_one=True)


def wgstore_run(store: Any, run_id: str, *, name: str = "retried") -> Run:
    """A run as wgstore's controller appends it: SCHEDULING names attempt 1's group, whose
    stream then starts; RUNNING once it launched."""
    run = new_run(store, run_id, name).to("SCHEDULING", f"{run_id}-g1")
    attempt(store, run_id, f"{run_id}-g1", 1)
    return run.to("RUNNING", f"{run_id}-g1")


def ray_train_run(store: Any, run_id: str, *, name: str = "recorded") -> Run:
    """A run as the Ray Train recorder appends it (no context, Ray's fields): the controller
    moves to SCHEDULING naming no group, attempt 1's stream starts (its
    ``WorkerGroupStartRequested`` names the run), and only once it started does the run's
    stream name it (RUNNING)."""
    run = Run(
        store,
        run_id,
        name=name,
        scaling_config=ScalingConfig(num_workers=2),
        failure_config=FailureConfig(max_failures=2),
        context=None,
        ray=RAY_FIELDS,
    ).controller()
    run.to("SCHEDULING")
    attempt(store, run_id, f"{run_id}-g1", 1)
    return run.to("RUNNING", f"{run_id}-g1")


def restarting(run: Run, source: str) -> str:
    """The run-stream events of ``run``'s restart into attempt 2 (attempt 1 running, group
    ``<run>-g1``) as ``source`` appends them; returns attempt 2's group id (its stream is
    :func:`attempt`'s).

    ``wgstore``: RESTARTING, then the controller's RESCHEDULING names the new group.
    ``ray_train``: the recorder's RESTARTING and SCHEDULING still name attempt 1's group; no
    event of the run's stream names the new one until it runs."""
    first, group_id = f"{run.run_id}-g1", f"{run.run_id}-g2"
    run.to("RESTARTING", first)
    if source == "wgstore":
        run.to("RESCHEDULING", group_id)
    else:
        run.to("SCHEDULING", first)
    return group_id


def next_attempt(store: Any, run: Run, source: str) -> str:
    """Attempt 2 of ``run``, as ``source`` appends it (:func:`restarting`, then the new group's
    stream, reporting); returns its group id."""
    group_id = restarting(run, source)
    attempt(store, run.run_id, group_id, 2)
    return group_id


def resumed_run(store: Any, run_id: str, *, with_step: bool) -> tuple[list[int], list[int]]:
    """A run resumed from the checkpoint of step 2: attempt 1 reports steps 1-4, attempt 2
    steps 3-6, each from report index 0 (as Ray Train and wgstore number reports), rank 0
    alone, ``loss`` (and ``step`` when ``with_step``). Returns each attempt's steps."""
    run = new_run(store, run_id, "resumed").to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    steps = ([1, 2, 3, 4], [3, 4, 5, 6])
    for number, reported in enumerate(steps, start=1):
        group_id = f"{run_id}-g{number}"
        if number > 1:
            run.to("RESTARTING", f"{run_id}-g1").to("RESCHEDULING", group_id).to(
                "RUNNING", group_id
            )
        stream = Stream(
            group_id, num_workers=1, run_id=run_id, attempt=number, start=datetime.now(UTC)
        )
        stream.running()
        for index, step in enumerate(reported):
            metrics = {"loss": 1.0 / step} | ({"step": step} if with_step else {})
            stream.add(WorkerReported(world_rank=0, index=index, metrics=metrics))
        append_stream(store, stream)
    return list(steps[0]), list(steps[1])
