"""Runs recorded into a real store by hand: run streams and their worker groups, no Ray.

Each scenario appends a ``run-<id>`` stream as the controller writes it (or as the Ray Train
recorder does) and the worker-group streams of its attempts, with ``EventStore.append``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.projections.projection_builders import Stream, append_stream, error, stopped
from wgstore.events.leases import acquire_lease
from wgstore.events.run import (
    ControllerStarted,
    ControllerStateChanged,
    FailureConfig,
    FailureDecisionMade,
    RankError,
    RunAborted,
    RunCreated,
    RunErrored,
    RunFinished,
    ScalingConfig,
    TrainerRecorded,
)
from wgstore.events.streams import run_stream
from wgstore.events.worker_group import WorkerGroupContext

TRAIN_FN = "examples.train:train_fn"
RAY_FIELDS = {"job_id": "02000000", "controller_actor_id": "abc123", "run_name": "ray-run"}


class Run:
    """Appends a run's events to a real store, tracking the controller state."""

    def __init__(self, store: Any, run_id: str, **created: Any) -> None:
        self.store = store
        self.run_id = run_id
        self.state = "INITIALIZING"
        self.attempt = 0
        self.groups: list[str] = []
        self.add(RunCreated(run_id=run_id, **created))

    def add(self, *events: Any) -> Run:
        self.store.append(run_stream(self.run_id), list(events))
        return self

    def controller(self, controller_id: str = "c1", resumed: bool = False) -> Run:
        return self.add(
            ControllerStarted(controller_id=controller_id, host="h", pid=7, resumed=resumed)
        )

    def to(self, state: str, group_id: str | None = None, reason: str = "") -> Run:
        self.add(
            ControllerStateChanged(
                from_state=self.state, to_state=state, reason=reason, group_id=group_id
            )
        )
        self.state = state
        return self

    def group(
        self,
        group_id: str,
        *,
        checkpoint: str | None = None,
        fail: bool = False,
        rank0_alone: str | None = None,
    ) -> Stream:
        """An attempt that starts, reports (with ``checkpoint``), and finishes or loses rank 1;
        with ``rank0_alone``, rank 0 reports that checkpoint once more before rank 1 fails."""
        self.attempt += 1
        self.groups.append(group_id)
        stream = Stream(
            group_id,
            num_workers=2,
            run_id=self.run_id,
            attempt=self.attempt,
            start=datetime.now(UTC),
            step=timedelta(milliseconds=5),
        )
        stream.running().reported(0, checkpoint, loss=1.0 / self.attempt)
        stream.reported(1, checkpoint, loss=1.0 / self.attempt).polled()  # both: committed
        if rank0_alone is not None:
            stream.reported(0, rank0_alone, loss=0.5 / self.attempt)
        if fail:
            stream.polled(stopped(1, error(f"rank 1 died in {group_id}")), unchanged=2)
        else:
            stream.polled(stopped(0), stopped(1), unchanged=2)
        stream.shutdown_requested("failure" if fail else "done").shut_down()
        append_stream(self.store, stream, one_by_one=True)  # each event its own time
        return stream

    def decided(self, decision: str, group_id: str, failures: int, limit: int) -> Run:
        return self.add(
            FailureDecisionMade(
                decision=decision,
                group_id=group_id,
                reason=f"rank 1 died in {group_id}",
                failures_so_far=failures,
                limit=limit,
                errors=(RankError(world_rank=1, error=error(f"rank 1 died in {group_id}")),),
            )
        )


def _wgstore_run(store: Any, run_id: str, max_failures: int = 2, lease_s: float = 60.0) -> Run:
    return Run(
        store,
        run_id,
        name=f"{run_id}-name",
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        failure_config=FailureConfig(max_failures=max_failures),
        context=WorkerGroupContext(
            num_workers=2, resources_per_worker={"CPU": 0.5}, train_fn=TRAIN_FN
        ),
        lease_s=lease_s,
    ).controller()


def finished_after_a_retry(store: Any, run_id: str = "fin") -> Run:
    """Attempt 1 fails (RETRY, 1 of 2), attempt 2 resumes and finishes."""
    run = _wgstore_run(store, run_id).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    run.group(f"{run_id}-g1", checkpoint="/ckpt/fin/1", fail=True)
    run.decided("RETRY", f"{run_id}-g1", 1, 2).to("RESTARTING", reason="worker died")
    run.to("SCHEDULING").to("RUNNING", f"{run_id}-g2")
    run.group(f"{run_id}-g2", checkpoint="/ckpt/fin/2")
    run.to("SHUTTING_DOWN").to("FINISHED").add(RunFinished(group_id=f"{run_id}-g2"))
    return run


def errored_budget_exhausted(store: Any, run_id: str = "err") -> Run:
    """max_failures=1: attempt 1 fails (RETRY), attempt 2 fails (RAISE); RunErrored."""
    run = _wgstore_run(store, run_id, max_failures=1).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    run.group(f"{run_id}-g1", checkpoint="/ckpt/err/1", fail=True)
    run.decided("RETRY", f"{run_id}-g1", 1, 1).to("RESTARTING").to("SCHEDULING")
    run.to("RUNNING", f"{run_id}-g2")
    run.group(f"{run_id}-g2", fail=True)
    run.decided("RAISE", f"{run_id}-g2", 2, 1).to("ERRORED")
    run.add(
        RunErrored(
            error=error(f"rank 1 died in {run_id}-g2"),
            group_id=f"{run_id}-g2",
            errors=(RankError(world_rank=1, error=error(f"rank 1 died in {run_id}-g2")),),
        )
    )
    return run


def aborted(store: Any, run_id: str = "abt") -> Run:
    """Aborted by a person while its first attempt ran."""
    run = _wgstore_run(store, run_id).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    run.group(f"{run_id}-g1")
    return run.to("ABORTED").add(RunAborted(reason="SIGINT"))


def running(store: Any, run_id: str = "live", *, lease_expired: bool = False) -> Run:
    """Running its first attempt; its controller's lease is live, or expired (orphaned)."""
    run = _wgstore_run(store, run_id).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    stream = Stream(
        f"{run_id}-g1",
        num_workers=2,
        run_id=run_id,
        start=datetime.now(UTC),
        step=timedelta(milliseconds=5),
    )
    stream.running().reported(0, f"/ckpt/{run_id}/1", loss=0.5)
    append_stream(store, stream.reported(1, f"/ckpt/{run_id}/1", loss=0.5).polled())
    run.groups.append(stream.group_id)
    run.attempt = 1
    taken = datetime.now(UTC) - (timedelta(hours=1) if lease_expired else timedelta(0))
    assert acquire_lease(store, run_id, "c1", 60.0, now=taken)
    return run


def from_ray_train_unpicklable(store: Any, run_id: str = "rayx") -> Run:
    """Recorded from Ray Train with a train loop that could not be pickled (not in ALL)."""
    run = Run(store, run_id, name="ray-run", scaling_config=ScalingConfig(num_workers=2))
    run.add(
        TrainerRecorded(
            trainer="ray.train.v2.api.data_parallel_trainer:DataParallelTrainer",
            train_loop="__main__:train",
            resumable=False,
            not_resumable_reason="the train loop __main__:train cannot be pickled (TypeError)",
        )
    )
    return run.to("SCHEDULING").to("RUNNING", f"{run_id}-g1")


def from_ray_train(store: Any, run_id: str = "ray") -> Run:
    """Recorded from Ray Train: no context, Ray's fields; one attempt that finished."""
    run = Run(
        store,
        run_id,
        name="ray-run",
        scaling_config=ScalingConfig(num_workers=2),
        failure_config=FailureConfig(max_failures=0),
        context=None,
        ray=RAY_FIELDS,
    )
    run.to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    run.group(f"{run_id}-g1", checkpoint="/ckpt/ray/1")
    return run.to("FINISHED").add(RunFinished(group_id=f"{run_id}-g1"))


def retried_from_the_committed_step(store: Any, run_id: str = "part") -> Run:
    """Attempt 1: both ranks report step 1, rank 0 alone step 2, rank 1 dies; attempt 2 runs
    from step 1 (not in :data:`ALL`)."""
    run = _wgstore_run(store, run_id).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    run.group(f"{run_id}-g1", checkpoint="/ckpt/step1", rank0_alone="/ckpt/step2", fail=True)
    run.decided("RETRY", f"{run_id}-g1", 1, 2).to("RESTARTING", reason="worker died")
    run.to("SCHEDULING").to("RUNNING", f"{run_id}-g2")
    return run


ALL = (finished_after_a_retry, errored_budget_exhausted, aborted, running, from_ray_train)


def elastic_resized(store: Any, run_id: str = "ela") -> Run:
    """An elastic run of 2..4 workers: attempt 1 started at 2, a node joined, it was stopped
    for a resize (no failure) and attempt 2 runs with 4."""
    from wgstore.events.run import ScalingDecisionMade
    from wgstore.events.worker_group import WorkerGroupShutdownRequested

    run = Run(
        store,
        run_id,
        name="elastic",
        scaling_config=ScalingConfig(num_workers=4, min_workers=2),
        context=WorkerGroupContext(num_workers=4, train_fn=TRAIN_FN),
    ).controller()
    first, second = f"{run_id}-g1", f"{run_id}-g2"
    run.to("SCHEDULING", first).add(
        ScalingDecisionMade(num_workers=2, cause="initial", reason="start: 2 fit", group_id=first)
    )
    now = datetime.now(UTC)
    stream = Stream(first, num_workers=2, run_id=run_id, start=now, step=timedelta(milliseconds=5))
    stream.running().reported(0, "/ckpt/ela/1", loss=1.0).reported(1, "/ckpt/ela/1", loss=1.0)
    stream.add(WorkerGroupShutdownRequested(reason="resized: 4 fit", resized_to=4))
    append_stream(store, stream.shut_down())
    run.to("RUNNING", first).to("RESIZING", first).to("SCHEDULING", second)
    run.add(
        ScalingDecisionMade(
            num_workers=4,
            previous_workers=2,
            cause="grew",
            reason="more resources available: 4 workers fit (range 2..4); was 2",
            group_id=second,
        )
    )
    later = Stream(
        second, num_workers=4, run_id=run_id, attempt=2, start=now + timedelta(seconds=1)
    )
    append_stream(store, later.running())
    return run.to("RUNNING", second)
