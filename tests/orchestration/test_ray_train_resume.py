"""A recorded Ray Train run outlives its driver (issue 22), on real Ray, both backends.

A driver process fits a recorded 2-worker ``DataParallelTrainer`` (a checkpoint every step) and
is SIGKILLed mid-training (its first attempt waits at the committed checkpoint of step
``resume_fns.PAUSE_AT`` for that), as a closed laptop or a lost SSH session would. Ray ends the
controller with it; the recorder's lease lapses and the run is orphaned. ``wgstore supervise``
takes it and starts ``wgstore resume``, which rebuilds the trainer from the log alone (no
script): the run goes on from its latest committed checkpoint as a second attempt of the same
run, and finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.orchestration import resume_fns
from tests.waiting import wait_until
from wgstore.events import EventStore
from wgstore.events.streams import group_stream
from wgstore.orchestration.orphans.gc import orphaned_runs
from wgstore.orchestration.orphans.supervise import start_resume, supervise
from wgstore.orchestration.run.controller import read_run
from wgstore.projections.state import project_worker_group

# Two drivers, each starting a Ray Train controller and its workers, in processes of their own:
# ~40 s quiet, but a Ray Train start alone took 40-65 s at load 40 on 2 cores (the work is
# already minimal: 8 steps of 0.05 s). The session's 300 s is too short there, not too long.
pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    # polls every 0.5 s, not 2 s: the drivers and resumes started here inherit it
    pytest.mark.usefixtures("fast_ray_train_polls"),
]

REPO = Path(__file__).resolve().parents[2]


def _committed_step(store: EventStore) -> int:
    """The step of the run's latest committed checkpoint (every rank reported it), or -1."""
    runs = store.streams("run-")
    if not runs:
        return -1
    run = read_run(store, runs[0][0].removeprefix("run-"))
    if not run.groups:
        return -1
    group = project_worker_group(store.read_stream(group_stream(run.groups[-1])))
    # The first attempt reports once per step from step 0: a report's index is its step.
    return -1 if group.checkpoint_index is None else group.checkpoint_index


def test_a_run_whose_driver_was_killed_is_resumed_by_the_supervisor_from_its_checkpoint(
    ray_session: None,
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """On SQLite only: what the backend does here (leases taken, handed over, fenced appends) is
    the same code on both and is tested on both in tests/events/test_leases.py and
    tests/orchestration/test_resume_cluster_lost.py; a Postgres run of this test added ~100 s
    of real Ray and nothing it could catch."""
    import ray

    store_url = sqlite_url

    address = ray.get_runtime_context().gcs_address
    steps_file = tmp_path / "steps.txt"
    storage = tmp_path / "storage"
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.orchestration.resume_fns", address, store_url,
         str(storage), str(steps_file)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    store = EventStore.open(store_url)
    try:
        wait_until(
            lambda: driver.poll() is not None or _committed_step(store) >= resume_fns.PAUSE_AT,
            timeout_s=240,
            what="the checkpoint of the step the first attempt waits at",
        )
        assert driver.poll() is None, driver.communicate()[0]
        driver.send_signal(signal.SIGKILL)  # the driver is lost; Ray ends its controller
        driver.communicate(timeout=60)
        killed_at = _committed_step(store)

        capfd.readouterr()  # from here: what the supervisor and the resume it starts print
        wait_until(lambda: bool(orphaned_runs(store)), timeout_s=120, what="the run orphaned")
        ((orphan, _),) = orphaned_runs(store)

        # The supervisor's resume is a `wgstore resume` process connected to the same cluster.
        monkeypatch.setenv("RAY_ADDRESS", address)
        monkeypatch.chdir(REPO)
        drivers: list[subprocess.Popen[bytes]] = []

        def spawn(url: str, run_id: str, holder: str, epoch: int) -> None:
            drivers.append(start_resume(url, run_id, holder, epoch))  # inherits RAY_ADDRESS

        stop = threading.Event()
        decisions: list[Any] = []
        watcher = threading.Thread(
            target=supervise,
            kwargs={"store": store, "stop": stop, "interval_s": 0.5, "spawn": spawn,
                    "on_decision": decisions.append},
        )  # fmt: skip
        watcher.start()
        try:
            wait_until(lambda: bool(drivers), timeout_s=60, what="the supervisor to resume it")
            assert drivers[0].wait(timeout=240) == 0
        finally:
            stop.set()
            watcher.join(30)
            for resume in drivers:  # a failed test leaves no resume running on
                if resume.poll() is None:
                    resume.kill()
        run = read_run(store, orphan.run_id)
        shown = "".join(capfd.readouterr())  # stdout, then stderr (the start line)
    finally:
        if driver.poll() is None:
            driver.kill()
        store.close()

    # The resume shows what wgstore run shows (issue 41, item 16): what the train loop prints
    # (attempt 2 starts after the committed step), and the attempt's table once it ended.
    assert f"the train loop runs step {resume_fns.PAUSE_AT + 1} on rank" in shown
    assert f"resuming run {orphan.run_id} from" in shown
    assert f"worker group {run.groups[1]}  SHUT_DOWN (finished)  attempt 2" in shown
    assert f"run {orphan.run_id}: FINISHED" in shown

    assert next(d.action for d in decisions if d.run_id == orphan.run_id) == "resumed"
    assert len(drivers) == 1  # resumed once, not again while the resume was running
    assert run.status.value == "FINISHED"
    assert len(run.groups) == 2  # one run, two attempts
    assert [c.resumed for c in run.controllers] == [False, True]
    (resumed,) = run.resumes
    assert resumed.by.startswith("supervisor") and resumed.attempt == 2
    ran = Counter(tuple(map(int, line.split())) for line in steps_file.read_text().splitlines())
    for rank in (0, 1):
        steps = {step for r, step in ran if r == rank}
        assert steps == set(range(resume_fns.STEPS))  # every step ran
        # No step up to the committed checkpoint ran twice: the second attempt began after it.
        assert killed_at == resume_fns.PAUSE_AT
        assert all(ran[(rank, step)] == 1 for step in range(killed_at + 1))


def test_a_run_whose_whole_cluster_died_with_its_driver_is_resumed_on_another_cluster(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver started its own local Ray (as a script does) and was SIGKILLed: its cluster
    went with it, controller, workers and placement group. Ray alone could only start over by
    running the script again; `wgstore resume` rebuilds the trainer from the log and continues
    the run, from its committed checkpoint, on another cluster (the test session's)."""
    import ray

    store_url = f"sqlite:///{tmp_path / 'wgstore.db'}"
    steps_file = tmp_path / "steps.txt"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.orchestration.resume_fns", "local", store_url,
         str(tmp_path / "storage"), str(steps_file)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    store = EventStore.open(store_url)
    try:
        wait_until(
            lambda: driver.poll() is not None or _committed_step(store) >= resume_fns.PAUSE_AT,
            timeout_s=240,
            what="the checkpoint the first attempt waits at, on the driver's own cluster",
        )
        assert driver.poll() is None, driver.communicate()[0]
        driver.kill()  # SIGKILL: the driver and, with it, the cluster it started
        driver.communicate(timeout=60)
        killed_at = _committed_step(store)
        wait_until(lambda: bool(orphaned_runs(store)), timeout_s=120, what="the run orphaned")
        ((orphan, _),) = orphaned_runs(store)
        monkeypatch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
        resumed = subprocess.run(
            [sys.executable, "-m", "wgstore.cli", "resume", orphan.run_id, "--url", store_url],
            cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        run = read_run(store, orphan.run_id)
    finally:
        if driver.poll() is None:
            driver.kill()
        store.close()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert run.status.value == "FINISHED" and len(run.groups) == 2
    ran = Counter(tuple(map(int, line.split())) for line in steps_file.read_text().splitlines())
    for rank in (0, 1):
        assert {step for r, step in ran if r == rank} == set(range(resume_fns.STEPS))
        assert all(ran[(rank, step)] == 1 for step in range(killed_at + 1))
