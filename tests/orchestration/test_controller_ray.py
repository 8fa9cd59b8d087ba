"""Runs on real Ray (the session's local Ray), on SQLite and Postgres: retries, budgets, a
controller SIGKILLed and resumed, a controller and its executor killed together and gc.

Each scenario runs on one backend, the two backends taking turns, to keep the suite's Ray time
low (~75 s here); the controller loop itself is tested on both in ``test_controller.py``.

The killed controllers run in a subprocess (a Ray driver of its own, connected to the session's
Ray by its GCS address), so SIGKILL is real; groups' placement groups and actors are detached
and named, so they outlive it. Train functions: ``tests/orchestration/controller_fns.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.orchestration.conftest import REPO, assert_nothing_left
from wgstore.events import EventStore
from wgstore.events.leases import lease_of
from wgstore.events.streams import group_stream, run_stream
from wgstore.orchestration import FailureConfig, ScalingConfig, resume_run, start_run
from wgstore.orchestration.orphans.gc import collect_garbage
from wgstore.orchestration.run.controller import read_run
from wgstore.orchestration.run.decide import attempt_group_id
from wgstore.projections.state import project_worker_group

pytestmark = [pytest.mark.ray, pytest.mark.slow]

FN = "tests.orchestration.controller_fns:resumable_fn"
SCALING = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25})
FAST = {"poll_interval_s": 0.2, "placement_timeout_s": 20.0}


@pytest.fixture
def in_repo(ray_up: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers import ``tests.orchestration.controller_fns`` from the repository root."""
    monkeypatch.chdir(REPO)


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Return once ``condition()`` holds; fail if it does not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def _types(store: EventStore, stream_id: str) -> list[str]:
    return [r.type for r in store.read_stream(stream_id)]


def _group(store: EventStore, group_id: str) -> Any:
    return project_worker_group(store.read_stream(group_stream(group_id)))


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_worker_sigkilled_mid_training_is_retried_from_the_latest_checkpoint(
    store: EventStore, in_repo: None, tmp_path: Path
) -> None:
    # rank 1 dies once rank 0 stored step 2 too: under load rank 0 ran a step behind, and
    # the committed checkpoint (every rank's) was step 1
    sync = tmp_path / "sync"
    sync.mkdir()
    result = start_run(
        store,
        FN,
        scaling_config=SCALING,
        failure_config=FailureConfig(max_failures=2),
        train_fn_config={
            "steps": 8,
            "kill_rank": 1,
            "kill_at": 2,
            "step_sleep_s": 0.3,
            "sync": str(sync),
        },
        **FAST,
    )
    run = result.run_state
    assert run is not None
    assert (run.status.value, run.attempts, run.failures) == ("FINISHED", 2, 1)
    (decision,) = run.decisions
    assert (decision.decision, decision.failure_kind, decision.failures_so_far, decision.limit) == (
        "RETRY",
        "worker_group",
        1,
        2,
    )
    assert [e.world_rank for e in decision.errors] == [1]
    assert decision.errors[0].error.type == "WorkerHealthCheckFailedError"
    first, second = (_group(store, gid) for gid in run.groups)
    checkpoint = first.latest_checkpoint
    assert checkpoint is not None and second.context.resume_checkpoint == checkpoint
    resumed_at = int(checkpoint.rsplit("step", 1)[1])
    assert resumed_at == 2  # rank 0 may have gone on after rank 1 died: not committed
    assert second.return_values == {r: {"start": resumed_at, "end": 8} for r in (0, 1)}
    assert {m["resumed_from"] for m in second.latest_metrics.values()} == {checkpoint}
    for group_id in run.groups:
        assert_nothing_left(group_id)


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_retry_starts_from_the_last_step_every_rank_reported_not_one_rank_alone(
    store: EventStore, in_repo: None, tmp_path: Path
) -> None:
    # The user's case (issue 22): a checkpoint every step, rank 1 raises after step 3 while
    # rank 0 has already reported step 4; the retry must start from step 3.
    result = start_run(
        store,
        FN,
        scaling_config=SCALING,
        failure_config=FailureConfig(max_failures=2),
        train_fn_config={
            "steps": 6,
            "raise_rank": 1,
            "raise_after": 3,
            "sync": str(tmp_path),
            "step_sleep_s": 0.05,
        },
        **FAST,
    )
    run = result.run_state
    assert run is not None
    assert (run.status.value, run.attempts, run.failures) == ("FINISHED", 2, 1)
    first, second = (_group(store, gid) for gid in run.groups)
    # Rank 0 reported step 4 (or on), rank 1 stopped at 3. (Not latest_reported_checkpoint,
    # the last report in the log: under load rank 0's step 4 can land before rank 1's step 3.)
    assert first.latest_metrics[0]["step"] >= 4 and first.latest_metrics[1]["step"] == 3
    assert first.last_report_index[1] < first.last_report_index[0]
    assert (first.latest_checkpoint, first.checkpoint_index) == ("memory://ckpt/step3", 2)
    assert second.context.resume_checkpoint == "memory://ckpt/step3"
    assert second.return_values == {r: {"start": 3, "end": 6} for r in (0, 1)}
    for group_id in run.groups:
        assert_nothing_left(group_id)


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_an_exhausted_budget_errors_the_run_naming_every_failed_rank(
    store: EventStore, in_repo: None, tmp_path: Path
) -> None:
    result = start_run(
        store,
        FN,
        scaling_config=SCALING,
        failure_config=FailureConfig(max_failures=1),
        train_fn_config={"steps": 3, "fail": str(tmp_path)},
        **FAST,
    )
    run = result.run_state
    assert run is not None
    assert [(d.decision, d.failures_so_far) for d in run.decisions] == [("RETRY", 1), ("RAISE", 2)]
    assert (run.status.value, run.attempts) == ("ERRORED", 2)
    assert [e.world_rank for e in run.errors] == [0, 1]
    assert all("fails on purpose" in e.error.message for e in run.errors)
    assert _types(store, run_stream(run.run_id))[-1] == "RunErrored"
    for group_id in run.groups:
        assert_nothing_left(group_id)


_CONTROLLER_SCRIPT = """
import json, sys
from wgstore.events import EventStore
from wgstore.orchestration import FailureConfig, ScalingConfig, start_run
from wgstore.orchestration.runtimes.ray_resources import ensure_ray
from tests.orchestration.pausing_executor import PausingExecutor
url, address, run_id, config, pause_s, repo = sys.argv[1:7]
ensure_ray(address)
with EventStore.open(url) as store:
    executor = PausingExecutor(
        store, run_ids={run_id}, shutdown_pause_s=float(pause_s), extra_sys_path=[repo]
    )
    print("controller up", flush=True)
    start_run(
        store,
        "tests.orchestration.controller_fns:resumable_fn",
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25}),
        failure_config=FailureConfig(max_failures=1),
        train_fn_config=json.loads(config),
        run_id=run_id,
        lease_s=2.0,
        executor=executor,
        poll_interval_s=0.2,
        placement_timeout_s=20.0,
    )
"""


class ControllerProcess:
    """``start_run`` with its executor in a subprocess, connected to the session's Ray."""

    def __init__(
        self, url: str, run_id: str, config: dict[str, Any], shutdown_pause_s: float, log: Path
    ) -> None:
        import ray

        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _CONTROLLER_SCRIPT,
                url,
                ray.get_runtime_context().gcs_address,
                run_id,
                json.dumps(config),
                str(shutdown_pause_s),
                str(REPO),
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


@pytest.fixture
def controller_process(store_url: str, tmp_path: Path, in_repo: None) -> Iterator[Any]:
    started: list[ControllerProcess] = []

    def start(run_id: str, config: dict[str, Any], shutdown_pause_s: float = 0.0) -> Any:
        process = ControllerProcess(
            store_url, run_id, config, shutdown_pause_s, tmp_path / f"controller{len(started)}.log"
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def _kill_in(store: EventStore, process: ControllerProcess, run_id: str, state: str) -> None:
    def there() -> bool:
        if process.proc.poll() is not None:
            pytest.fail(f"the controller exited early:\n{process.log_path.read_text()}")
        return bool(store.stream_version(run_stream(run_id))) and (
            read_run(store, run_id).controller_state == state
        )

    wait_until(there, timeout_s=90, what=f"the controller to reach {state}")
    process.kill()
    wait_until(
        lambda: lease_of(store, run_id).expired(),  # type: ignore[union-attr]
        timeout_s=10,
        what="the dead controller's lease to expire",
    )


def _one_of_each_command(store: EventStore, group_id: str) -> None:
    types = _types(store, group_stream(group_id))
    for once in (
        "WorkerGroupStartRequested",
        "WorkerGroupShutdownRequested",
        "WorkerGroupShutDown",
    ):
        assert types.count(once) == 1, types


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_controller_sigkilled_while_running_is_resumed_and_reattaches(
    store: EventStore, controller_process: Any, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    process = controller_process("k_running", {"steps": 3, "wait_for": str(go)})
    _kill_in(store, process, "k_running", "RUNNING")
    group_id = attempt_group_id("k_running", 1)
    assert _group(store, group_id).status.value == "RUNNING"  # the group outlived its driver
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(resume_run(store, "k_running")))
    thread.start()
    wait_until(
        lambda: len(read_run(store, "k_running").controllers) == 2,
        timeout_s=30,
        what="the resumed controller",
    )
    go.touch()  # training ends only now, under the resumed controller
    thread.join(90)
    assert results, "resume_run did not return"
    run = results[0].run_state
    assert (run.status.value, run.groups) == ("FINISHED", (group_id,))
    assert [c.resumed for c in run.controllers] == [False, True]
    assert [t.to_state for t in run.transitions] == [
        "SCHEDULING",
        "RUNNING",
        "SHUTTING_DOWN",
        "FINISHED",
    ]
    _one_of_each_command(store, group_id)
    assert _group(store, group_id).return_values == {r: {"start": 0, "end": 3} for r in (0, 1)}
    assert_nothing_left(group_id)


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_controller_sigkilled_while_restarting_is_resumed_without_a_repeat(
    store: EventStore, controller_process: Any
) -> None:
    process = controller_process(
        "k_restart", {"steps": 3, "kill_rank": 1, "kill_at": 1}, shutdown_pause_s=4.0
    )
    _kill_in(store, process, "k_restart", "RESTARTING")
    result = resume_run(store, "k_restart", timeout_s=120)
    run = result.run_state
    first, second = attempt_group_id("k_restart", 1), attempt_group_id("k_restart", 2)
    assert (run.status.value, run.groups, run.failures) == ("FINISHED", (first, second), 1)
    assert [t.to_state for t in run.transitions].count("RESCHEDULING") == 1
    for group_id in (first, second):
        _one_of_each_command(store, group_id)
        assert_nothing_left(group_id)
    assert _group(store, second).context.resume_checkpoint == _group(store, first).latest_checkpoint


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_gc_releases_a_run_whose_controller_and_executor_were_killed_together(
    store: EventStore, controller_process: Any, tmp_path: Path
) -> None:
    process = controller_process("k_gc", {"steps": 3, "wait_for": str(tmp_path / "never")})
    wait_until(
        lambda: (
            bool(store.stream_version(run_stream("k_gc")))
            and read_run(store, "k_gc").controller_state == "RUNNING"
        ),
        timeout_s=90,
        what="the run to be running",
    )
    assert collect_garbage(store) == []  # a live controller holds the lease: nothing touched
    _kill_in(store, process, "k_gc", "RUNNING")
    group_id = attempt_group_id("k_gc", 1)
    assert [o.action for o in collect_garbage(store, dry_run=True)] == ["would abort"]
    (outcome,) = collect_garbage(store)
    assert (outcome.run_id, outcome.action, outcome.group_id) == ("k_gc", "aborted", group_id)
    run = read_run(store, "k_gc")
    assert (run.status.value, run.abort_reason) == ("ABORTED", "controller lost")
    assert_nothing_left(group_id, within_s=15)
    assert collect_garbage(store) == []
