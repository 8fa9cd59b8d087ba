"""A Ray Train run whose node announces its preemption, recorded (issue 40).

As in Ray's own ``test_preemption_fault_tolerance.py``, only the preemption *signal* is made
here: the train function sets its own ``PreemptionContext.preemption_info`` (exactly what
``RayTrainWorker.mark_preempt`` does when Ray's ``PreemptionWatcher`` sees a node drain), with a
deadline already past. The
controller's PREEMPTING state, its wait, the ``PreemptionError`` charged to
``max_preemption_failures`` (not ``max_failures``, which is 0 here) and the resume from the
checkpoint are Ray's own. The log must say which node and ranks were going, by when, and that
the restart was a preemption; and equal Ray's state actor.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.usefixtures("fast_ray_train_polls"),  # polls every 0.5 s, not 2 s
]

pytest.importorskip("ray.train.v2")

from wgstore.events import EventStore  # noqa: E402
from wgstore.events.streams import group_stream  # noqa: E402
from wgstore.projections.ray_train import ray_train_run, ray_train_run_attempts  # noqa: E402
from wgstore.projections.run_state import project_run  # noqa: E402


def train_fn() -> None:
    """Attempt 1: a checkpoint, then a preemption notice whose deadline has passed, and work
    that the controller's teardown interrupts. Attempt 2: from the checkpoint, one more step."""
    import json
    import tempfile
    import time

    import ray.train
    from ray.train.v2._internal.execution.context import get_train_context
    from ray.train.v2._internal.execution.preemption import PreemptionInfo

    def save(step: int) -> None:
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "step.json").write_text(json.dumps({"step": step}))
            checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report({"step": step}, checkpoint=checkpoint)

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        save(0)
        get_train_context().preemption_context.preemption_info = PreemptionInfo(
            deadline_ms=1, preempted_node_to_ranks={"mock-node": [1, 0]}
        )
        time.sleep(120)  # the controller tears the group down at the (past) deadline
    else:
        with checkpoint.as_directory() as folder:
            step = json.loads(Path(folder, "step.json").read_text())["step"]
        save(step + 1)


@pytest.fixture(scope="module")
def by_value(ray_session: None, fast_ray_train_polls: None) -> Iterator[None]:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_preempted_run_records_the_nodes_ranks_deadline_and_its_own_budget(
    by_value: None, sqlite_url: str, tmp_path: Any
) -> None:
    """On SQLite only (a Ray Train run is half a minute): the recorder writes the same events to
    either backend, and test_ray_train_elastic.py records one run into both at once."""
    store_url = sqlite_url
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2._internal.state.state_actor import get_or_create_state_actor
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from wgstore.orchestration.ray_train import RecordingCallback

    os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"] = "1"
    try:
        result = DataParallelTrainer(
            train_fn,
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=RunConfig(
                name="preempted",
                storage_path=str(tmp_path / "storage"),
                failure_config=FailureConfig(max_failures=0, max_preemption_failures=2),
                callbacks=[RecordingCallback(store_url)],
            ),
        ).fit()
    finally:
        del os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"]
    assert result.error is None and result.metrics["step"] == 1
    with EventStore.open(store_url) as store:
        ((stream, _),) = store.streams("run-")
        records = list(store.read_stream(stream))
        run = project_run(records)
        groups = {g: list(store.read_stream(group_stream(g))) for g in run.groups}
    assert run.status.value == "FINISHED" and run.attempts == 2
    (notice,) = run.preemptions
    assert (dict(notice.nodes), notice.ranks, notice.group_id) == (
        {"mock-node": (0, 1)},
        (0, 1),
        run.groups[0],
    )
    assert notice.deadline is not None and notice.deadline.timestamp() == 0.001
    moves = [(t.from_state, t.to_state) for t in run.transitions]
    assert ("RUNNING", "PREEMPTING") in moves and ("PREEMPTING", "RESTARTING") in moves
    (decision,) = run.decisions
    assert (decision.decision, decision.failure_kind, decision.failures_so_far, decision.limit) == (
        "RETRY",
        "preemption",
        1,
        2,
    )
    assert "PreemptionError" in {e.error.type for e in decision.errors}
    # and what Ray's state actor keeps of the run
    actor = get_or_create_state_actor()
    ray_run = ray.get(actor.get_train_runs.remote())[run.run_id].model_dump(mode="json")
    ray_attempts = {
        a: v.model_dump(mode="json")
        for a, v in ray.get(actor.get_train_run_attempts.remote())[run.run_id].items()
    }

    def untimed(value: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in value.items() if not k.endswith("_time_ns")}

    assert untimed(ray_train_run(records)) == untimed(ray_run)
    ours = ray_train_run_attempts(groups[g] for g in run.groups)
    assert {a: untimed(v) for a, v in ours.items()} == {
        a: untimed(v) for a, v in ray_attempts.items()
    }
