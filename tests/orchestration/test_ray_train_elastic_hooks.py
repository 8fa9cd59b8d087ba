"""The recorder's hooks, called as Ray Train 2.60's controller calls them for an elastic run.

Ray's own objects where a test can make them (its ``ScalingConfig((1, 3))``, ``RunConfig``,
controller states, ``ResizeDecision``, ``PreemptionInfo``, ``PreemptionError``, worker-group
contexts), handed to the hooks in the order Ray's controller calls them (read from
``controller.py``: INITIALIZING -> SCHEDULING -> RUNNING -> RESIZING -> SCHEDULING -> RUNNING ->
PREEMPTING -> RESTARTING -> SCHEDULING, a start that times out -> RESCHEDULING -> SCHEDULING
under the same attempt id -> RUNNING -> SHUTTING_DOWN -> FINISHED), into a real store on both
backends. Only the worker groups are stand-ins (``_Group``: a poll status, no actors), since a
group of real workers cannot be made without starting them; the real runs of
test_ray_train_elastic.py and test_ray_train_preemption.py start them.

The last tests feed the hooks shapes no Ray release hands them (a scaling config wgstore does
not know, hooks out of order): the run stays readable, with what could be recorded and a
``RecordingFailed`` naming what could not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = [pytest.mark.ray]

pytest.importorskip("ray.train.v2")

from ray.train import RunConfig, ScalingConfig  # noqa: E402
from ray.train.v2._internal.execution.context import TrainRunContext  # noqa: E402
from ray.train.v2._internal.execution.controller.state import (  # noqa: E402
    FinishedState,
    InitializingState,
    PreemptingState,
    ReschedulingState,
    ResizingState,
    RestartingState,
    RunningState,
    SchedulingState,
    ShuttingDownState,
)
from ray.train.v2._internal.execution.failure_handling import FailureDecision  # noqa: E402
from ray.train.v2._internal.execution.scaling_policy import ResizeDecision  # noqa: E402
from ray.train.v2._internal.execution.worker_group.state import (  # noqa: E402
    WorkerGroupContext,
)
from ray.train.v2.api.exceptions import ControllerError, PreemptionError  # noqa: E402
from ray.train.v2.api.preemption import PreemptionInfo  # noqa: E402

from wgstore.events import EventStore  # noqa: E402
from wgstore.events.run import ResizeCause  # noqa: E402
from wgstore.events.streams import group_stream  # noqa: E402
from wgstore.orchestration.ray_train import RecordingCallback  # noqa: E402
from wgstore.projections.ray_train import ray_train_run, ray_train_run_attempts  # noqa: E402
from wgstore.projections.run_state import RunState, project_run  # noqa: E402
from wgstore.projections.state import TrainingOutcome, project_worker_group  # noqa: E402


def _train_fn() -> None:
    """What the worker-group contexts name as the train function (never run here)."""


@dataclass
class _Ref:
    """Ray's ``ObjectRefWrapper`` of the train function: ``get()`` returns it."""

    fn: Any

    def get(self) -> Any:
        return self.fn


@dataclass
class _Group:
    """A stand-in for Ray's ``WorkerGroup``: its latest poll, and once started, what Ray's
    ``WorkerGroupState`` holds (placement group, sync actor, workers)."""

    poll: Any = None
    num_workers: int = 0

    def get_latest_poll_status(self) -> Any:
        return self.poll

    def get_worker_group_context(self) -> Any:
        return SimpleNamespace(placement_strategy="PACK")

    def get_worker_group_state(self) -> Any:
        def actor(n: int) -> Any:
            return SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: f"{n:032x}"))

        workers = [
            SimpleNamespace(
                distributed_context=SimpleNamespace(
                    world_rank=rank,
                    local_rank=rank,
                    node_rank=0,
                    local_world_size=self.num_workers,
                    world_size=self.num_workers,
                ),
                metadata=SimpleNamespace(
                    node_id="n1", node_ip="10.0.0.1", pid=100 + rank, gpu_ids=[]
                ),
                actor=actor(rank + 1),
                log_file_path=f"/tmp/worker-{rank}.log",
                resources={"CPU": 1},
            )
            for rank in range(self.num_workers)
        ]
        pg = SimpleNamespace(id=SimpleNamespace(hex=lambda: "ab" * 14), bundle_specs=[{"CPU": 1}])
        return SimpleNamespace(
            placement_group_handle=SimpleNamespace(placement_group=pg),
            sync_actor=actor(99),
            workers=workers,
            start_time=time.monotonic(),
        )


def _context(tmp_path: Any, num_workers: Any = (1, 3)) -> TrainRunContext:
    from ray.train.backend import BackendConfig
    from ray.train.v2.api.data_parallel_trainer import DataConfig

    return TrainRunContext(
        run_config=RunConfig(name="elastic", storage_path=str(tmp_path / "storage")),
        train_loop_config={"steps": 3},
        scaling_config=ScalingConfig(
            num_workers=num_workers,
            resources_per_worker={"CPU": 1},
            elastic_resize_monitor_interval_s=2,
        ),
        backend_config=BackendConfig(),
        dataset_config=DataConfig(),
    )


def _group_context(attempt: str, num_workers: int) -> WorkerGroupContext:
    return WorkerGroupContext(
        run_attempt_id=attempt,
        train_fn_ref=_Ref(_train_fn),  # type: ignore[arg-type]
        num_workers=num_workers,
        resources_per_worker={"CPU": 1},
    )


def _resize(n: int) -> ResizeDecision:
    return ResizeDecision(num_workers=n, resources_per_worker={"CPU": 1})


class _Controller:
    """Calls the recorder's hooks as Ray's controller does, keeping Ray's current state."""

    def __init__(self, callback: RecordingCallback, context: TrainRunContext) -> None:
        self.callback = callback
        self.state: Any = InitializingState()
        callback.after_controller_start(context)

    def move(self, state: Any) -> None:
        previous, self.state = self.state, state
        self.callback.after_controller_state_update(previous, state)

    def schedule(self, n: int, attempt: str, *, old: bool = True, starts: bool = True) -> None:
        """SCHEDULING(n), then ``_execute_resize_decision``: the hook, the old group's
        shutdown, the new group's start (``starts``: its workers start and train)."""
        decision = _resize(n)
        self.move(SchedulingState(decision))
        self.callback.before_controller_execute_resize_decision(decision)
        if old:
            self.callback.before_worker_group_shutdown(_Group())
            self.callback.after_worker_group_shutdown(None)
        self.callback.before_worker_group_start(_group_context(attempt, n))
        if starts:
            group = _Group(num_workers=n)
            self.callback.after_worker_group_start(group)
            self.callback.after_worker_group_training_start(group)

    def fail(self, error: Any, retry_state: Any) -> None:
        self.callback.before_controller_execute_failure_decision(FailureDecision.RETRY)
        self.move(retry_state)


def _record_elastic_run(url: str, tmp_path: Any) -> None:
    callback = RecordingCallback(url, hold_s=0, read_models_interval_s=None)
    ray = _Controller(callback, _context(tmp_path))
    ray.schedule(2, "a1", old=False)  # 2 of 1..3 fit
    ray.move(RunningState())
    ray.move(ResizingState(_resize(3)))  # a node joined: 3 fit
    ray.schedule(3, "a2")
    ray.move(RunningState())
    info = PreemptionInfo(deadline_ms=1_800_000_000_000, preempted_node_to_ranks={"n2": [2, 1]})
    ray.move(PreemptingState(preemption_info=info, detected_at_s=1_799_999_990.0))
    error = PreemptionError(preemption_info=info, drain_timed_out=True)
    ray.fail(error, RestartingState(training_failed_error=error))
    ray.schedule(2, "a3", starts=False)  # restart without the preempted node: it times out
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

    timeout = ControllerError(WorkerGroupStartupTimeoutError(2))
    ray.fail(timeout, ReschedulingState(training_failed_error=timeout))
    ray.schedule(1, "a3", old=False)  # Ray starts again under the same attempt id
    ray.move(RunningState())
    ray.move(ShuttingDownState(next_state=FinishedState()))
    callback.before_worker_group_shutdown(_Group(SimpleNamespace(errors={}, finished=True)))
    callback.after_worker_group_shutdown(None)
    ray.move(FinishedState())


def _read(url: str) -> tuple[RunState, list[Any], dict[str, list[Any]]]:
    with EventStore.open(url) as store:
        ((stream, _),) = store.streams("run-")
        records = list(store.read_stream(stream))
        run = project_run(records)
        groups = {g: list(store.read_stream(group_stream(g))) for g in run.groups}
    return run, records, groups


def test_an_elastic_run_records_its_range_every_size_and_why(
    ray_session: None, store_url: str, tmp_path: Any
) -> None:
    _record_elastic_run(store_url, tmp_path)
    run, records, groups = _read(store_url)
    assert run.status.value == "FINISHED"
    scaling = run.scaling_config
    assert scaling is not None and scaling.elastic
    assert (scaling.min_workers, scaling.num_workers, scaling.describe()) == (1, 3, "1..3")
    assert scaling.elastic_resize_monitor_interval_s == 2
    # every group at the size Ray started it, each start its own stream
    assert run.groups == ("a1", "a2", "a3", "a3-2")
    sizes = [project_worker_group(groups[g]).context.num_workers for g in run.groups]
    assert sizes == [2, 3, 2, 1]
    decisions = [
        (d.group_id, d.previous_workers, d.num_workers, d.cause) for d in run.scaling_decisions
    ]
    assert decisions == [
        ("a1", None, 2, ResizeCause.INITIAL),
        ("a2", 2, 3, ResizeCause.GREW),
        ("a3", 3, 2, ResizeCause.PREEMPTION),
        ("a3-2", 2, 1, ResizeCause.START_RETRY),
    ]
    assert (
        run.scaling_decisions[1].reason
    ) == "more resources available: 3 workers fit (range 1..3); was 2"
    assert run.decision_for("a3") is run.scaling_decisions[2]
    # each decision is recorded before the group it starts, at the time of Ray's hook
    versions = {r.event.group_id: r.version for r in records if r.type == "ScalingDecisionMade"}
    assert list(versions) == list(run.groups)
    # the resize stopped a1 without a failure; the preemption was charged to its own budget
    assert project_worker_group(groups["a1"]).outcome is TrainingOutcome.RESIZED
    assert [(d.failure_kind, d.failures_so_far) for d in run.decisions] == [
        ("preemption", 1),
        ("start", 1),
    ]
    (preemption,) = run.preemptions
    assert (preemption.group_id, dict(preemption.nodes), preemption.ranks) == (
        "a2",
        {"n2": (1, 2)},
        (1, 2),
    )
    assert preemption.deadline is not None and preemption.deadline.timestamp() == 1_800_000_000
    moves = [(t.from_state, t.to_state) for t in run.transitions]
    assert ("RUNNING", "RESIZING") in moves and ("RUNNING", "PREEMPTING") in moves
    assert ("PREEMPTING", "RESTARTING") in moves and ("RESCHEDULING", "SCHEDULING") in moves
    assert run.recording_errors == ()
    # Ray's state actor keeps one attempt per attempt id: the last start of a3 stands
    ray_attempts = ray_train_run_attempts(groups[g] for g in run.groups)
    assert list(ray_attempts) == ["a1", "a2", "a3"]
    assert len(ray_attempts["a3"]["resources"]) == 1
    assert ray_train_run(records)["status"] == "FINISHED"


def test_an_unknown_scaling_config_leaves_the_run_readable_and_says_what_failed(
    ray_session: None, store_url: str, tmp_path: Any
) -> None:
    """A Ray release with a shape wgstore does not foresee (here a scaling config whose
    ``num_workers`` is neither an int nor a range, which today's Ray refuses itself, so the
    config is a stand-in): the run is recorded without it, and says why."""
    context = _context(tmp_path)
    strange = SimpleNamespace(
        num_workers="auto",
        elasticity_enabled=False,
        _resources_per_worker_not_none={"CPU": 1},
        placement_strategy="PACK",
    )
    context = SimpleNamespace(**{**vars(context), "scaling_config": strange})
    callback = RecordingCallback(store_url, hold_s=0, read_models_interval_s=None)
    ray = _Controller(callback, context)  # type: ignore[arg-type]
    ray.schedule(2, "b1", old=False)
    ray.move(RunningState())
    ray.move(ShuttingDownState(next_state=FinishedState()))
    callback.before_worker_group_shutdown(_Group(SimpleNamespace(errors={}, finished=True)))
    callback.after_worker_group_shutdown(None)
    ray.move(FinishedState())
    run, _, groups = _read(store_url)
    assert run.status.value == "FINISHED" and run.name == "elastic"
    assert run.scaling_config is None
    hooks = [failure.hook for failure in run.recording_errors]
    assert any("scaling config" in hook for hook in hooks), hooks
    assert project_worker_group(groups["b1"]).context.num_workers == 2


def test_an_event_out_of_order_is_not_written_and_the_streams_stay_readable(
    ray_session: None, store_url: str, tmp_path: Any
) -> None:
    """A hook in an order no fold takes (a group's shutdown done before it was asked for):
    what the readers would refuse is left out and named."""
    callback = RecordingCallback(store_url, hold_s=0, read_models_interval_s=None)
    ray = _Controller(callback, _context(tmp_path))
    ray.schedule(2, "c1", old=False)
    callback.after_worker_group_shutdown(None)  # WorkerGroupShutDown with no shutdown asked
    ray.move(RunningState())
    ray.move(ShuttingDownState(next_state=FinishedState()))
    ray.move(FinishedState())
    run, _, groups = _read(store_url)
    assert run.status.value == "FINISHED"
    group = project_worker_group(groups["c1"])
    assert group.status.value == "RUNNING"  # the stray shutdown was not written
    refused = [f for f in run.recording_errors if f.hook == "after_worker_group_shutdown"]
    assert refused and "WorkerGroupShutDown" in refused[0].error.message
