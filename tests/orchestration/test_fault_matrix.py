"""The fault matrix (issue 8): workers die by SIGKILL, ``os._exit`` or an exception at each point
of a group's life, with and without a checkpoint in the last report, the backends taking turns.

One group of three workers covers the three kinds at once (rank 0 is SIGKILLed, rank 1 calls
``os._exit``, rank 2 raises), since each rank's ending is recorded apart. For every cell: the
ending the log records, the rank named, every report whose ``report()`` returned is in the log
(the train function writes each returned index to a file), the checkpoint of the last report is
the group's, ``verify()`` is clean, and Ray holds no actor or placement group of the group.
Before the start the kinds are ``RayRuntime``'s failpoints (the actor's constructor SIGKILLs
itself or exits, or launching raises): the start fails there, with nothing left behind. During
shutdown the workers die in the pause ``PausingExecutor`` (a test wrapper) makes before the
shutdown's last poll.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.orchestration.conftest import REPO, assert_nothing_left, make_context
from tests.orchestration.fault_fns import checkpoint_path
from tests.orchestration.pausing_executor import PausingExecutor
from wgstore.events.worker_group import (
    StartStage,
    WorkerGroupShutdownRequested,
    stream_id_for_group,
)
from wgstore.orchestration import RayExecutor, WorkerGroup, WorkerGroupStartError
from wgstore.orchestration.runtimes.ray_runtime import RayRuntime
from wgstore.orchestration.worker_group import follow_group
from wgstore.projections import TrainingOutcome, WorkerGroupStatus

pytestmark = [pytest.mark.ray, pytest.mark.slow]

KINDS = {"0": "sigkill", "1": "exit", "2": "raise"}
DEATH_ERROR = {0: "WorkerHealthCheckFailedError", 1: "WorkerHealthCheckFailedError"}
RAISED = {2: "RuntimeError"}


def _returned(out_dir: Path, rank: int) -> list[int]:
    path = out_dir / f"rank{rank}.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _stored(store: Any, group_id: str, rank: int) -> list[Any]:
    return [
        r.event
        for r in store.read_stream(stream_id_for_group(group_id))
        if r.type == "WorkerReported" and r.event.world_rank == rank
    ]


def _all_stopped(state: Any) -> bool:
    status = state.poll_status
    return state.status.is_terminal or (
        status is not None and all(not s.running for s in status.worker_statuses.values())
    )


# Each cell runs once, on one backend, the backends taking turns so that each meets every
# moment and both checkpoint cases: the cell's Ray side is the same on both, and the backends'
# own paths (appends, fences, the workers' report writes) are tested apart. Twelve runs on
# real Ray were 95 s of the suite's 11 minutes.
@pytest.mark.parametrize(
    "when,reports,checkpoint,store_url",
    [
        ("right-after-launch", 1, False, "sqlite"),
        ("right-after-launch", 1, True, "postgres"),
        ("mid-training", 5, False, "postgres"),
        ("mid-training", 5, True, "sqlite"),
        ("during-shutdown", 3, False, "sqlite"),
        ("during-shutdown", 3, True, "postgres"),
    ],
    ids=lambda value: (
        ({False: "no-checkpoint", True: "checkpoint"}[value])
        if isinstance(value, bool)
        else str(value)
    ),
    indirect=["store_url"],
)
def test_a_worker_death_once_training_runs_is_a_worker_failure_and_loses_no_returned_report(
    store: Any, ray_up: None, tmp_path: Path, when: str, reports: int, checkpoint: bool
) -> None:
    config: dict[str, Any] = {
        "out_dir": str(tmp_path),
        "reports": reports,
        "kinds": KINDS,
        "checkpoint": checkpoint,
    }
    during_shutdown = when == "during-shutdown"
    if during_shutdown:
        config["wait_for"] = "shutdown-asked"
    pause_s = 3.0 if during_shutdown else 0.0
    executor = PausingExecutor(store, shutdown_pause_s=pause_s, extra_sys_path=[str(REPO)]).start()
    try:
        context = make_context(3, train_fn="tests.orchestration.fault_fns:faulty_fn", config=config)
        group = WorkerGroup.create(store, context, executor=executor, timeout_s=90)
        group_id = group.group_id
        if during_shutdown:  # every report returned, then shutdown; the workers die in it
            follow_group(
                store,
                None,
                group_id,
                lambda s: all(len(_returned(tmp_path, r)) == reports for r in range(3)),
                timeout_s=60,
            )
            store.append(
                stream_id_for_group(group_id), [WorkerGroupShutdownRequested(reason="test")]
            )
            (tmp_path / "shutdown-asked").touch()
        else:
            follow_group(store, None, group_id, _all_stopped, timeout_s=60)
        state = group.shutdown(reason="test", timeout_s=60)
    finally:
        executor.stop()

    # the ending: started, launched, shut down; never a start failure
    types = [r.type for r in store.read_stream(stream_id_for_group(group_id))]
    assert "WorkerGroupStarted" in types and "TrainingLaunched" in types
    assert "WorkerGroupStartFailed" not in types
    assert state.status is WorkerGroupStatus.SHUT_DOWN
    (shut_down,) = [
        r.event
        for r in store.read_stream(stream_id_for_group(group_id))
        if r.type == "WorkerGroupShutDown"
    ]
    assert shut_down.duration_s >= pause_s  # during shutdown: the window was there
    assert state.start_failure is None
    assert state.outcome is TrainingOutcome.ERRORED
    # each rank named with what happened to it
    statuses = state.poll_status.worker_statuses
    for rank in range(3):
        assert not statuses[rank].running, f"rank {rank} still running"
        error = statuses[rank].error
        assert error is not None, f"rank {rank}: no error recorded"
        assert error.type == {**DEATH_ERROR, **RAISED}[rank], (rank, error)
    assert "raised after" in statuses[2].error.message
    # every returned report is in the log, once, in order
    for rank in range(3):
        returned = _returned(tmp_path, rank)
        assert returned == list(range(reports)), f"rank {rank} returned {returned}"
        stored = _stored(store, group_id, rank)
        assert [e.index for e in stored] == returned
        if checkpoint:
            assert stored[-1].checkpoint == checkpoint_path(group_id, rank, reports - 1)
    if checkpoint:
        assert state.latest_checkpoint in {
            checkpoint_path(group_id, rank, reports - 1) for rank in range(3)
        }
    else:
        assert state.latest_checkpoint is None
    assert store.verify().ok
    assert_nothing_left(group_id)
    assert executor.errors == []


BEFORE_START = {
    "sigkill": ({"worker_sigkill_on_init": 1}, StartStage.WORKERS, "ActorDiedError"),
    "exit": ({"worker_exit_on_init": 1}, StartStage.WORKERS, "ActorDiedError"),
    "raise": ({"launch_raise": True}, StartStage.LAUNCH, "FailpointError"),
}


@pytest.mark.parametrize(
    "kind,store_url",
    [("sigkill", "postgres"), ("exit", "sqlite"), ("raise", "postgres")],
    indirect=["store_url"],
)
def test_a_worker_death_before_training_runs_fails_the_start_and_leaves_nothing(
    store: Any, ray_up: None, tmp_path: Path, kind: str
) -> None:
    failpoints, stage, error_type = BEFORE_START[kind]
    runtime = RayRuntime(failpoints=failpoints)
    executor = RayExecutor(store, runtime=runtime, extra_sys_path=[str(REPO)]).start()
    try:
        context = make_context(
            2,
            train_fn="tests.orchestration.fault_fns:faulty_fn",
            config={"out_dir": str(tmp_path), "reports": 2},
        )
        with pytest.raises(WorkerGroupStartError) as caught:
            WorkerGroup.create(store, context, executor=executor, timeout_s=90)
    finally:
        executor.stop()
    error = caught.value
    assert error.stage is stage and error.cause.type == error_type
    if stage is StartStage.WORKERS:
        assert f"wgstore-{error.group_id}-1" in error.cause.message + error.cause.traceback
    types = [r.type for r in store.read_stream(stream_id_for_group(error.group_id))]
    assert types[-1] == "WorkerGroupStartFailed"
    assert "TrainingLaunched" not in types and "WorkerReported" not in types
    assert not list(tmp_path.glob("rank*.txt"))  # no user code ran
    assert store.verify().ok
    assert_nothing_left(error.group_id)
    assert executor.errors == []
