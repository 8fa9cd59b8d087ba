"""A restartable executor: SIGKILL it mid-run or mid-start, and a new one finishes the job.

The first executor runs in a subprocess (a Ray driver of its own, connected to the session's
Ray), so SIGKILL is real. Placement groups and actors are detached and named, so they outlive it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.orchestration.conftest import REPO, assert_nothing_left, make_context
from wgstore.events import NO_STREAM
from wgstore.events.worker_group import (
    StartStage,
    WorkerGroupStartRequested,
    stream_id_for_group,
)
from wgstore.orchestration import RayExecutor, WorkerGroup
from wgstore.orchestration.executor.commands import command_id_for
from wgstore.orchestration.runtimes.ray_resources import list_group_resources
from wgstore.orchestration.worker_group import follow_group
from wgstore.projections import WorkerGroupStatus

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LIFECYCLE = [
    "WorkerGroupStartRequested",
    "PlacementGroupReserved",
    "SyncActorStarted",
    "WorkersStarted",
    "WorkerGroupStarted",
    "TrainingLaunched",
    "WorkerGroupShutdownRequested",
    "WorkerGroupShutDown",
]

_EXECUTOR_SCRIPT = """
import json, sys, threading
from wgstore.orchestration.executor.ray_executor import run_executor
from wgstore.orchestration.runtimes.ray_runtime import RayRuntime
url, address, failpoints = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
print("executor up", flush=True)
run_executor(url, threading.Event(), runtime=RayRuntime(address=address, failpoints=failpoints))
"""


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Return once ``condition()`` holds; fail the test if it does not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class ExecutorProcess:
    """A standalone executor in a subprocess, connected to the session's Ray."""

    def __init__(self, url: str, log_path: Path, failpoints: dict[str, Any] | None = None) -> None:
        import ray

        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _EXECUTOR_SCRIPT,
                url,
                ray.get_runtime_context().gcs_address,
                json.dumps(failpoints or {}),
            ],
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text()


@pytest.fixture
def executor_process(store_url: str, tmp_path: Path, ray_up: None) -> Iterator[Any]:
    started: list[ExecutorProcess] = []

    def start(failpoints: dict[str, Any] | None = None) -> ExecutorProcess:
        process = ExecutorProcess(store_url, tmp_path / f"executor{len(started)}.log", failpoints)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def test_an_executor_killed_mid_run_is_replaced_without_repeating_a_command_or_leaking(
    store: Any, executor_process: Any
) -> None:
    first = executor_process()
    context = make_context(2, config={"steps": 40, "step_sleep_s": 0.15})
    group = WorkerGroup.create(store, context, executor="external", timeout_s=120)
    follow_group(store, None, group.group_id, lambda s: s.reports_total >= 4, timeout_s=60)
    first.kill()  # SIGKILL, mid-run
    assert group.state.status is WorkerGroupStatus.RUNNING

    second = RayExecutor(store, release_orphans=True, extra_sys_path=[str(REPO)]).start()
    try:
        status = group.wait(timeout_s=120)
        assert status.finished and status.errors == {}, first.output()
        state = group.shutdown(reason="done")
    finally:
        second.stop()
    assert second.errors == []

    events = list(store.read_stream(stream_id_for_group(group.group_id)))
    counts = Counter(e.type for e in events)
    assert [counts[t] for t in LIFECYCLE] == [1] * len(LIFECYCLE)  # no command done twice
    executors = [e.metadata.get("executor_id") for e in events[1:6]]
    assert len(set(executors)) == 1 and executors[0] != second.executor_id
    assert events[-1].metadata["executor_id"] == second.executor_id
    polls_by = {e.metadata["executor_id"] for e in events if e.type == "WorkerGroupPolled"}
    assert second.executor_id in polls_by

    for rank in range(2):  # every report stored exactly once, across the two executors
        indices = [
            e.event.index
            for e in events
            if e.type == "WorkerReported" and e.event.world_rank == rank
        ]
        assert indices == list(range(40))
    assert state.status is WorkerGroupStatus.SHUT_DOWN and state.reports_total == 80
    assert_nothing_left(group.group_id)

    third = RayExecutor(store, extra_sys_path=[str(REPO)]).start()  # re-derives, repeats nothing
    try:
        # idle: every command it derived from the log has run (and appended what it appends)
        assert third.wait_idle(30)
    finally:
        third.stop()
    assert store.stream_version(stream_id_for_group(group.group_id)) == len(events)
    assert third.errors == []


def test_a_start_left_half_done_by_a_killed_executor_is_released_by_the_next_one(
    store: Any, executor_process: Any
) -> None:
    first = executor_process({"worker_init_sleep_s": 120})
    group_id = uuid.uuid4().hex[:16]
    store.append(
        stream_id_for_group(group_id),
        [WorkerGroupStartRequested(group_id=group_id, run_id=group_id, context=make_context(2))],
        expected_version=NO_STREAM,
    )
    follow_group(store, None, group_id, lambda s: s.sync_actor is not None, timeout_s=60)
    wait_until(  # the workers are being created (their constructors sleep)
        lambda: f"actor:wgstore-{group_id}-0" in list_group_resources().get(group_id, []),
        timeout_s=60,
        what="the first worker actor to be created",
    )
    first.kill()

    second = RayExecutor(store, extra_sys_path=[str(REPO)]).start()
    try:
        state = follow_group(store, None, group_id, lambda s: s.status.is_terminal, timeout_s=60)
    finally:
        second.stop()
    assert second.errors == []
    assert state.status is WorkerGroupStatus.START_FAILED
    failure = state.start_failure
    assert failure is not None
    assert failure.stage is StartStage.WORKERS
    assert failure.error.type == "ExecutorLostError"
    assert f"placement_group:wgstore-{group_id}" in failure.released
    assert f"actor:wgstore-{group_id}-sync" in failure.released
    events = list(store.read_stream(stream_id_for_group(group_id)))
    assert events[-1].metadata["causation_id"] == str(
        command_id_for("ReleaseResources", events[2].event_id)
    )
    assert_nothing_left(group_id)


def test_a_new_executor_releases_wgstore_resources_that_no_live_group_owns(
    store: Any, ray_up: None
) -> None:
    import ray
    from ray.util.placement_group import placement_group

    orphan = f"orphan{uuid.uuid4().hex[:8]}"
    pg = placement_group([{"CPU": 0.01}], name=f"wgstore-{orphan}", lifetime="detached")
    assert pg.wait(timeout_seconds=10)
    executor = RayExecutor(store, release_orphans=True).start()
    try:
        assert executor.wait_caught_up(30)
    finally:
        executor.stop()
    assert_nothing_left(orphan)
    assert ray.util.placement_group_table(pg)["state"] == "REMOVED"


_CREATE_SCRIPT = """
import sys
import ray
from wgstore.events import EventStore
from wgstore.orchestration import WorkerGroup, WorkerGroupContext
url, address = sys.argv[1], sys.argv[2]
ray.init(address=address, log_to_driver=False)
context = WorkerGroupContext(num_workers=2, resources_per_worker={"CPU": 0.25},
                             train_fn="tests.orchestration.slow_launch_fns:sleepy_fn",
                             train_fn_config={"seconds": 300})
with EventStore.open(url) as store:
    try:
        WorkerGroup.create(store, context)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
"""


def test_ctrl_c_during_create_shuts_the_half_started_group_down_and_releases_it(
    sqlite_url: str, ray_up: None, tmp_path: Path
) -> None:
    import ray

    from wgstore.events import EventStore

    log = (tmp_path / "create.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", _CREATE_SCRIPT, sqlite_url, ray.get_runtime_context().gcs_address],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        db = Path(sqlite_url.removeprefix("sqlite:///"))
        wait_until(db.exists, timeout_s=90, what=f"{db} to be created")
        with EventStore.open(sqlite_url) as store:
            wait_until(
                lambda: any(e.type == "SyncActorStarted" for e in store.read_all()),
                timeout_s=90,
                what="SyncActorStarted in the log",
            )
            proc.send_signal(signal.SIGINT)  # Ctrl-C while the workers are being started
            assert proc.wait(timeout=90) == 130, (tmp_path / "create.log").read_text()
            events = list(store.read_all())
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    types = [e.type for e in events]
    assert types[-2:] == ["WorkerGroupShutdownRequested", "WorkerGroupShutDown"]
    assert events[-2].event.reason == "interrupted while starting"
    group_id = events[0].event.group_id
    assert f"placement_group:wgstore-{group_id}" in events[-1].event.released
    assert_nothing_left(group_id)
