"""wgstore's own elastic run on a real multi-node Ray cluster (issue 40 §2).

``elastic_own_driver.py`` (a subprocess: a Ray of its own) runs ``start_run`` with 1..3
workers on a ``ray.cluster_utils.Cluster`` while the cluster changes: a node joins (the run
grows from its committed checkpoint, no failure charged), a node announces its preemption (a
GCS drain with a deadline: PREEMPTING, a restart without it, the preemption budget charged), a
node is removed (a worker failure as Ray counts it, or a shrink when the resize monitor sees
it first, and a restart at the size that fits now instead of a wait for the lost node); then a second run asks for more than fits and errors
after its wait, naming the shortfall. One cluster start for all of it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.orchestration.conftest import run_cluster_driver
from wgstore.events import EventStore
from wgstore.events.streams import group_stream
from wgstore.orchestration.run.controller import read_run
from wgstore.projections.run_state import RunState
from wgstore.projections.state import TrainingOutcome, WorkerGroupState, project_worker_group

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(900),  # the module's driver: ~40 s quiet, minutes beside `stress --cpu 2`
]


@dataclass(frozen=True)
class Cluster:
    url: str
    result: dict[str, Any]

    def read(self, run_id: str) -> tuple[RunState, list[WorkerGroupState]]:
        with EventStore.open(self.url) as store:
            run = read_run(store, run_id)
            groups = [
                project_worker_group(store.read_stream(group_stream(g)))
                for g in run.groups
                if store.stream_version(group_stream(g))
            ]
        return run, groups


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("elastic-own")
    url = f"sqlite:///{work / 'runs.db'}"
    out = work / "out.json"
    proc = run_cluster_driver(
        "tests.orchestration.elastic_own_driver", url, str(out), str(work), timeout_s=840
    )
    assert proc.returncode == 0 and out.exists(), proc.stdout[-4000:] + proc.stderr[-8000:]
    result = json.loads(out.read_text())
    assert "driver_error" not in result and "error" not in result, (result, proc.stderr[-6000:])
    yield Cluster(url, result)


def test_a_node_joining_grows_the_run_from_its_checkpoint_charging_nothing(
    cluster: Cluster,
) -> None:
    run, groups = cluster.read("elastic")
    first, second = groups[0], groups[1]
    assert (first.context.num_workers, second.context.num_workers) == (2, 3)
    assert first.outcome is TrainingOutcome.RESIZED and first.resized_to == 3
    grew = run.decision_for(second.group_id)
    assert grew is not None and (grew.cause, grew.previous_workers) == ("grew", 2)
    assert second.context.resume_checkpoint == first.latest_checkpoint  # the committed one
    assert cluster.result["nodes"]["n3"] in {w.node_id for w in second.workers}
    assert not [d for d in run.decisions if d.group_id == first.group_id]  # no failure


def test_a_preempted_node_is_waited_out_and_the_run_restarts_without_it(cluster: Cluster) -> None:
    run, groups = cluster.read("elastic")
    n3 = cluster.result["nodes"]["n3"]
    (notice,) = run.preemptions
    assert n3 in notice.nodes and notice.deadline is not None
    assert notice.group_id == groups[1].group_id
    moves = [(t.from_state, t.to_state) for t in run.transitions]
    assert ("RUNNING", "PREEMPTING") in moves and ("PREEMPTING", "RESTARTING") in moves
    preemption = [d for d in run.decisions if d.failure_kind == "preemption"]
    assert [(d.decision, d.failures_so_far, d.limit) for d in preemption] == [("RETRY", 1, 1)]
    # the train function saw the notice during its grace window and checkpointed with it
    seen = [m for m in groups[1].latest_metrics.values() if m.get("preemption_seen")]
    assert seen, groups[1].latest_metrics
    after = groups[2]
    assert n3 not in {w.node_id for w in after.workers}
    sized = run.decision_for(after.group_id)
    assert sized is not None and (sized.cause, sized.num_workers) == ("preemption", 2)


def test_a_node_lost_restarts_the_run_at_the_size_that_fits_now(cluster: Cluster) -> None:
    run, groups = cluster.read("elastic")
    assert run.status.value == "FINISHED"
    last = groups[-1]
    assert last.context.num_workers == 1
    assert {w.node_id for w in last.workers} == {cluster.result["nodes"]["head"]}
    # Who sees the lost node first is a race, as in Ray 2.60: the poll finds the worker on it
    # dead (a worker failure, retried at the size that fits now) or the resize monitor finds
    # fewer workers fit (a shrink, no failure charged). Under load the monitor won once.
    lost = [d for d in run.decisions if d.failure_kind == "worker_group"]
    sized = run.decision_for(last.group_id)
    assert sized is not None
    if lost:
        assert len(lost) == 1 and lost[0].decision == "RETRY"
        assert sized.cause in ("failure", "start_retry")
    else:
        assert sized.cause == "shrank"
    # every attempt started from the committed checkpoint of the one before: no step of a
    # committed checkpoint was run twice
    for before, after in itertools.pairwise(groups):
        if before.latest_checkpoint is not None:
            assert after.context.resume_checkpoint == before.latest_checkpoint
    assert cluster.result["left_in_ray"] == []


def test_fewer_than_min_waits_then_errors_naming_the_shortfall(cluster: Cluster) -> None:
    run, groups = cluster.read("short")
    assert run.status.value == "ERRORED" and groups == []
    # the head's CPU, perhaps not yet free of the run before; n3 is draining: none counts
    assert run.deferred is not None and run.deferred.num_workers_fit in (0, 1)
    assert run.error is not None and run.error.type == "InsufficientClusterResourcesError"
    assert "of the run's 3..4 workers fit (CPU=1 each); min_workers is 3" in run.error.message
    short_error = cluster.result["short_error"]
    assert short_error.startswith("InsufficientClusterResourcesError(")
    assert "run short never started: waited 3 s" in short_error
