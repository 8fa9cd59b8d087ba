"""A `wgstore run` whose process was SIGKILLed is resumed at once, on real Ray (issues 21, 22).

The run's controller holds a 60 s lease; it is SIGKILLed mid-training. Its pid is gone on this
host, so `wgstore resume` takes the run at once (not after the lease time), re-attaches to the
workers by name (they are detached actors of the cluster, which outlives the driver) and drives
the run to its end: one attempt, no failure charged. The workers (``run_fns.chatty_fn``) report
step 1 and then wait for a file the test writes only once the resume's controller is recorded:
the resume re-attaches to workers that are still training, however slow the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.orchestration.conftest import REPO, assert_nothing_left
from tests.waiting import wait_until
from wgstore.events import EventStore
from wgstore.events.leases import lease_of
from wgstore.orchestration.run.controller import read_run

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def cluster_env(ray_session: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The session's Ray for subprocesses; the repository root as the working folder."""
    import ray

    monkeypatch.chdir(REPO)
    yield {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}


def _reports(store: EventStore, run_id: str) -> int:
    run = read_run(store, run_id)
    if not run.groups:
        return 0
    from wgstore.events.streams import group_stream

    return sum(
        1 for r in store.read_stream(group_stream(run.groups[0])) if r.type == "WorkerReported"
    )


def test_a_killed_wgstore_run_is_resumed_at_once_and_reattaches(
    store_url: str, cluster_env: dict[str, str], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    config = json.dumps({"release": str(release)})
    driver = subprocess.Popen(
        [sys.executable, "-m", "wgstore.cli", "run", "tests.cli.run_fns:chatty_fn", "--workers",
         "2", "--cpus-per-worker", "0.25", "--poll-interval", "0.2", "--config", config,
         "--run-id", "killed", "--url", store_url],
        cwd=REPO, env=cluster_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    store = EventStore.open(store_url)
    resume: subprocess.Popen[str] | None = None
    try:
        wait_until(
            lambda: (
                driver.poll() is not None
                or (store.stream_version("run-killed") > 0 and _reports(store, "killed") >= 2)
            ),
            timeout_s=240,
            what="both ranks reporting step 1 (then they wait for the release file)",
        )
        assert driver.poll() is None, "the run ended before it was killed"
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        lease = lease_of(store, "killed")
        assert lease is not None and lease.expires_at > datetime.now(UTC)  # not lapsed
        output = tmp_path / "resume.out"
        with output.open("w") as out_file:  # a file: a pipe nobody reads yet could fill up
            resume = subprocess.Popen(
                [sys.executable, "-m", "wgstore.cli", "resume", "kil", "--url", store_url],
                cwd=REPO, env=cluster_env, stdout=out_file, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        wait_until(
            lambda: resume.poll() is not None or len(read_run(store, "killed").controllers) == 2,
            timeout_s=240,
            what="the resume's controller to take the run",
        )
        # while it trains, wgstore run's progress lines (stdout is a file: lines, not a table)
        wait_until(
            lambda: (
                resume.poll() is not None
                or "run killed attempt 1: RUNNING | rank 0 " in output.read_text()
            ),
            timeout_s=120,
            what="a progress line of the resumed run",
        )
        release.touch()  # the workers, still training, finish under the resume's controller
        resume.wait(timeout=240)
        out = output.read_text()
        assert resume.returncode == 0, out
        resumed_at = read_run(store, "killed").controllers[-1].at
        assert resumed_at < lease.expires_at  # taken over before the lease would have lapsed
        run = read_run(store, "killed")
    finally:
        for process in (driver, resume):
            if process is not None and process.poll() is None:
                process.kill()
        store.close()
    assert "run killed: FINISHED" in out
    assert "resuming run killed from" in out
    final_table = out.split("run killed attempt 1", 1)[1]
    assert f"worker group {run.groups[0]}" in final_table
    assert run.status.value == "FINISHED"
    assert len(run.groups) == 1 and not run.decisions  # re-attached: no failure, no new attempt
    assert [c.resumed for c in run.controllers] == [False, True]
    assert [r.by for r in run.resumes] == ["wgstore resume"]
    assert_nothing_left(run.groups[0], within_s=30)
