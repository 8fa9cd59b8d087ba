"""An elastic Ray Train run recorded on a cluster that grows and shrinks under it (issue 40).

``elastic_ray_train_driver.py`` (a subprocess: it needs a Ray of its own) runs one
``DataParallelTrainer`` with ``ScalingConfig(num_workers=(1, 3))`` on a
``ray.cluster_utils.Cluster``, recorded by two callbacks at once, one into SQLite and one into
PostgreSQL; a node joins mid-run (Ray grows the group from 2 to 3 workers) and one is removed
(a worker failure; Ray restarts at what fits). Both logs must equal Ray's state actor for the
same run, field for field (times apart: the hooks' clocks), and tell the size over time with the
reason for every change.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests import templates
from tests.conftest import PG_URL, _drop_schema, make_pg_schema_url, require_postgres
from tests.orchestration.conftest import run_cluster_driver
from wgstore.events import EventStore
from wgstore.events.run import ResizeCause
from wgstore.events.streams import group_stream
from wgstore.projections.ray_train import ray_train_run, ray_train_run_attempts
from wgstore.projections.run_state import RunState, project_run
from wgstore.projections.state import TrainingOutcome, project_worker_group

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    # the module's one driver (a 3-node cluster, an elastic Ray Train run resized twice) takes
    # ~90 s quiet and went past the default 300 s beside `stress --cpu 2`
    pytest.mark.timeout(900),
]

pytest.importorskip("ray.train.v2")


@dataclass(frozen=True)
class Recorded:
    urls: dict[str, str]
    ray_runs: dict[str, Any]
    ray_attempts: dict[str, Any]
    fit_error: str
    nodes: dict[str, str]
    timings: dict[str, float]


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory, fast_ray_train_polls: None
) -> Iterator[Recorded]:
    require_postgres()
    work = tmp_path_factory.mktemp("elastic")
    schema = f"wgtest_{uuid.uuid4().hex[:12]}"
    templates.restore_postgres(PG_URL, schema)
    urls = {"sqlite": f"sqlite:///{work / 'runs.db'}", "postgres": make_pg_schema_url(schema)}
    out = work / "out.json"
    try:
        proc = run_cluster_driver(
            "tests.orchestration.elastic_ray_train_driver",
            urls["sqlite"],
            urls["postgres"],
            str(out),
            str(work),
            timeout_s=840,
        )
        assert proc.returncode == 0 and out.exists(), proc.stdout[-4000:] + proc.stderr[-8000:]
        yield Recorded(urls=urls, **json.loads(out.read_text()))
    finally:
        _drop_schema(schema)


def _read(url: str) -> tuple[RunState, list[Any], dict[str, list[Any]]]:
    with EventStore.open(url) as store:
        ((stream, _),) = store.streams("run-")
        records = list(store.read_stream(stream))
        run = project_run(records)
        groups = {g: list(store.read_stream(group_stream(g))) for g in run.groups}
    return run, records, groups


def _untimed(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if not k.endswith("_time_ns")}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_log_of_an_elastic_run_equals_rays_own_state(recorded: Recorded, backend: str) -> None:
    assert recorded.fit_error == ""
    run, records, groups = _read(recorded.urls[backend])
    ray_run = recorded.ray_runs[run.run_id]
    assert _untimed(ray_train_run(records)) == _untimed(ray_run)
    ours = ray_train_run_attempts(groups[g] for g in run.groups)
    theirs = recorded.ray_attempts[run.run_id]
    assert list(ours) == list(theirs)  # the attempts, in Ray's order
    for attempt_id, attempt in theirs.items():
        assert _untimed(ours[attempt_id]) == _untimed(attempt), attempt_id
        for mine, ray_worker in zip(ours[attempt_id]["workers"], attempt["workers"], strict=True):
            assert (mine["node_id"], mine["pid"], mine["actor_id"]) == (
                ray_worker["node_id"],
                ray_worker["pid"],
                ray_worker["actor_id"],
            )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_size_over_time_and_why_each_change(recorded: Recorded, backend: str) -> None:
    run, _, groups = _read(recorded.urls[backend])
    assert run.status.value == "FINISHED"
    assert run.scaling_config is not None and run.scaling_config.describe() == "1..3"
    sizes = [project_worker_group(groups[g]).context.num_workers for g in run.groups]
    decisions = run.scaling_decisions
    assert [d.group_id for d in decisions] == list(run.groups)  # one per group, before it
    assert [d.num_workers for d in decisions] == sizes
    assert (sizes[0], sizes[1], sizes[-1]) == (2, 3, 2)
    assert decisions[0].cause == ResizeCause.INITIAL
    assert (decisions[1].cause, decisions[1].previous_workers) == (ResizeCause.GREW, 2)
    assert decisions[2].cause == ResizeCause.FAILURE and "node lost" in decisions[2].reason
    assert decisions[-1].cause in (ResizeCause.FAILURE, ResizeCause.START_RETRY)
    # the grow charged nothing; the lost node was one worker-group failure, as Ray counts it
    first = project_worker_group(groups[run.groups[0]])
    assert first.outcome is TrainingOutcome.RESIZED and first.resized_to == 3
    kinds = [d.failure_kind for d in run.decisions]
    assert kinds.count("worker_group") == 1 and set(kinds) <= {"worker_group", "start"}
    moves = [(t.from_state, t.to_state) for t in run.transitions]
    assert ("RUNNING", "RESIZING") in moves and ("RESIZING", "SCHEDULING") in moves
    assert ("RUNNING", "RESTARTING") in moves
    assert run.recording_errors == ()
