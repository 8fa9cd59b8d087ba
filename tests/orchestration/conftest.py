"""Fixtures for orchestration tests: the repo root on sys.path, Ray's own tables, contexts.

Ray tests use the session's local Ray (``ray_session``, 4 CPUs): small groups, 0.25 CPU per
worker, short poll intervals. Leaks are checked against Ray's own GCS tables (the actor table
and the placement-group table), not through wgstore's code.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # so `examples.train` imports here and in Ray workers
    sys.path.insert(0, str(REPO))

# A test on real Ray whose Ray side is the same on both backends runs on one of them, the
# scenarios of a module taking turns (the backends' own paths, appends, fences and the workers'
# report writes, are tested apart in tests/events). What is about the store itself (a run's exact
# event sequence, the workers' keyed appends, fencing) stays on both.
ON_SQLITE = pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
ON_POSTGRES = pytest.mark.parametrize("store_url", ["postgres"], indirect=True)


# Ray Train's controller polls its workers every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by
# default), and every step of a run (running, finished, a failure seen, a restart) waits for a
# poll: the Ray Train tests set it shorter in their own environment, which Ray Train passes on
# to the controller it starts (the variable is in Ray's ENV_VARS_TO_PROPAGATE) and which their
# driver subprocesses inherit. A poll that outlasts it on a loaded machine is not an error (it is
# awaited at the next one; only RAY_TRAIN_WORKER_HEALTH_CHECK_TIMEOUT_S, 10 min, fails a worker).
FAST_RAY_TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}


@pytest.fixture(scope="module")
def fast_ray_train_polls() -> Iterator[None]:
    """:data:`FAST_RAY_TRAIN_ENV` in this process's environment for the module's tests (and
    its module fixtures that depend on this one), restored afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAST_RAY_TRAIN_ENV.items():
            patch.setenv(name, value)
        yield


def live_ray_resources(group_id: str) -> list[str]:
    """What Ray's own tables still hold for ``group_id``: actors not DEAD, PGs not REMOVED."""
    import ray
    from ray._private import state as ray_state

    prefix = f"wgstore-{group_id}"
    left = [
        f"actor {info['Name']} {info['State']}"
        for info in ray_state.actors().values()
        if (info.get("Name") or "").startswith(prefix) and info.get("State") != "DEAD"
    ]
    left += [
        f"placement group {info['name']} {info['state']}"
        for info in ray.util.placement_group_table().values()
        if info.get("name") == prefix and info.get("state") != "REMOVED"
    ]
    return left


def assert_nothing_left(group_id: str, within_s: float = 60.0) -> None:
    """Ray's tables show no actor and no placement group of the group (allowing GCS lag)."""
    deadline = time.monotonic() + within_s
    left = live_ray_resources(group_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = live_ray_resources(group_id)
    assert left == [], f"group {group_id} left {left} in Ray"


def make_context(
    num_workers: int = 2, train_fn: str = "examples.train:train_fn", **overrides: Any
) -> Any:
    """A small, fast context: 0.25 CPU per worker, polls every 0.2 s."""
    from wgstore.orchestration import WorkerGroupContext

    config = overrides.pop("config", {})
    options: dict[str, Any] = {
        "num_workers": num_workers,
        "resources_per_worker": {"CPU": 0.25},
        "train_fn": train_fn,
        "train_fn_config": {"step_sleep_s": 0.02, **config},
        "poll_interval_s": 0.2,
        "placement_timeout_s": 20.0,
    }
    options.update(overrides)
    return WorkerGroupContext(**options)


@pytest.fixture
def ray_up(ray_session: None) -> Iterator[None]:
    """Ray is up; after the test, whatever wgstore resources a failing test left are released."""
    yield
    from wgstore.orchestration.runtimes import ray_resources

    for group_id in ray_resources.list_group_resources():
        ray_resources.release_group(group_id)


@pytest.fixture
def executor(store: Any, ray_up: None) -> Iterator[Any]:
    """A running in-process executor on the test's store; it must end without handler errors."""
    from wgstore.orchestration import RayExecutor

    ex = RayExecutor(store, extra_sys_path=[str(REPO)]).start()
    yield ex
    ex.stop()
    assert ex.errors == []


def run_cluster_driver(module: str, *args: str, timeout_s: float = 600) -> Any:
    """Run ``python -m module args...`` from the repo root with a Ray temp folder of its own (a
    ``ray.cluster_utils.Cluster`` needs a Ray of its own: a process has one, and this session's
    is the local one of ``ray_session``; its own ``RAY_TMPDIR`` keeps the cluster's address file
    from making another process's ``ray.init()`` join it). Returns the finished process."""
    import os
    import shutil
    import subprocess
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="wgcd", dir="/tmp")  # short: Ray's socket paths
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    env.pop("RAY_ADDRESS", None)
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
