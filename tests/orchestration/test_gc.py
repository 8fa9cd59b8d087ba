"""``collect_garbage`` and ``wgstore gc`` on a real store (SQLite and Postgres), without Ray.

Runs whose group never started or already ended need no executor; a live group with nobody to
release it shows that gc records nothing it could not carry out. The release of a live group on
Ray is in ``test_controller_ray.py``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.orchestration.decide_sim import World
from tests.orchestration.test_controller import StoreLog, _create
from tests.waiting import wait_until
from wgstore.cli.app import app
from wgstore.events.leases import acquire_lease, lease_of
from wgstore.events.run import RunCreated
from wgstore.events.streams import group_stream, run_stream
from wgstore.orchestration.orphans.gc import collect_garbage, orphaned_runs
from wgstore.orchestration.run.controller import RunController, read_run
from wgstore.orchestration.run.decide import attempt_group_id, decide
from wgstore.projections.state import project_worker_group


def _after_lease(store: Any, run_id: str) -> datetime:
    """A moment just past the expiry of ``run_id``'s lease as recorded now (no clock read:
    relative to the lease itself, so neither the suite's duration nor a slow machine moves it)."""
    lease = lease_of(store, run_id)
    assert lease is not None
    return lease.expires_at + timedelta(seconds=1)


def _abandoned(
    store: Any, run_id: str, *, group_events: bool, lease_s: float = 30.0
) -> RunController:
    """A run whose controller took it, decided attempt 1 and died (its lease left to expire)."""
    _create(store, run_id, lease_s=lease_s)
    controller = RunController(store, run_id, executor="external").start()
    controller._keeper.stop()  # type: ignore[union-attr]  # it died: nothing renews the lease
    run = read_run(store, run_id)
    decision = decide(run, None, datetime.now(UTC))
    store.append(run.stream_id, list(decision.run_events), expected_version=run.version)
    if group_events:
        store.append(group_stream(decision.group_id), list(decision.group_events))  # type: ignore[arg-type]
    return controller


def test_a_run_whose_controller_holds_its_lease_is_never_touched(store: Any) -> None:
    _abandoned(store, "r1", group_events=False)
    version = store.stream_version(run_stream("r1"))
    assert orphaned_runs(store) == []
    assert collect_garbage(store) == []
    assert store.stream_version(run_stream("r1")) == version


def test_an_orphaned_run_is_aborted_and_its_lease_given_up(store: Any) -> None:
    controller = _abandoned(store, "r1", group_events=False)
    later = _after_lease(store, "r1")
    assert orphaned_runs(store, now=later - timedelta(seconds=2)) == []  # not yet expired
    ((run, expired),) = orphaned_runs(store, now=later)
    assert run.run_id == "r1" and expired is not None and expired < later
    (dry,) = collect_garbage(store, dry_run=True, now=later)
    assert (dry.action, dry.group_id, dry.group_status) == (
        "would abort",
        attempt_group_id("r1", 1),
        None,  # the controller died before requesting the group: nothing on Ray
    )
    assert not read_run(store, "r1").ended
    (outcome,) = collect_garbage(store, now=later)
    assert outcome.action == "aborted"
    run = read_run(store, "r1")
    assert (run.status.value, run.abort_reason, run.controller_state) == (
        "ABORTED",
        "controller lost",
        "ABORTED",
    )
    assert lease_of(store, "r1") is None
    assert orphaned_runs(store, now=later) == []
    assert controller.run_state.run_id == "r1"
    assert read_run(store, "r1").controllers[0].controller_id == controller.controller_id


def test_a_run_another_gc_holds_is_skipped(store: Any) -> None:
    _abandoned(store, "r1", group_events=False)
    later = _after_lease(store, "r1")
    assert acquire_lease(store, "r1", "gc-someone", 60.0, now=later)
    outcomes = collect_garbage(store, now=later + timedelta(seconds=1))
    assert outcomes == []  # held (by gc elsewhere): not orphaned


def test_a_live_group_nobody_releases_is_left_unrecorded(store: Any) -> None:
    _abandoned(store, "r1", group_events=True)
    World(StoreLog(store)).start(  # type: ignore[arg-type]
        project_worker_group(store.read_stream(group_stream(attempt_group_id("r1", 1))))
    )
    later = _after_lease(store, "r1")
    started = time.monotonic()
    (outcome,) = collect_garbage(store, executor="external", now=later, timeout_s=0.5)
    # it gave up after its 0.5 s, not the default 120 s (60 s: room for a loaded machine)
    assert time.monotonic() - started < 60
    assert outcome.action == "not released"
    assert outcome.group_status == "RUNNING"
    assert not read_run(store, "r1").ended  # nothing recorded: gc can run again
    assert lease_of(store, "r1") is None  # gc gave its lease up
    group = project_worker_group(store.read_stream(group_stream(attempt_group_id("r1", 1))))
    assert (group.status.value, group.shutdown_reason) == ("SHUTTING_DOWN", "controller lost")


def test_runs_that_ended_or_came_from_ray_train_are_not_orphaned(store: Any) -> None:
    store.append(run_stream("ray"), [RunCreated(run_id="ray")])
    _create(store, "never")  # no controller ever took it
    assert orphaned_runs(store, now=datetime.now(UTC) + timedelta(days=1)) == []


def test_the_gc_command_lists_with_json_and_aborts(store_url: str, store: Any) -> None:
    """Two dead controllers: one whose lease is still live (45 s, inside the default 60 s
    window of --expiring) and one whose lease lapsed. Neither outcome depends on how fast the
    machine runs the commands: the live lease outlasts them, the other is waited out first."""
    _abandoned(store, "live", group_events=False, lease_s=45.0)
    runner = CliRunner()
    now = runner.invoke(
        app, ["gc", "--url", store_url, "--dry-run", "--expiring", "0"], catch_exceptions=False
    )
    assert (now.exit_code, now.stdout.strip()) == (0, "no orphaned runs, none expiring")
    _abandoned(store, "dead", group_events=False, lease_s=0.5)
    lease = lease_of(store, "dead")
    assert lease is not None
    wait_until(lease.expired, timeout_s=60, what="the dead controller's 0.5 s lease to lapse")
    listed = runner.invoke(
        app, ["gc", "--url", store_url, "--dry-run", "--json"], catch_exceptions=False
    )
    assert listed.exit_code == 0, listed.stdout
    rows = sorted(
        (json.loads(line) for line in listed.stdout.splitlines()), key=lambda r: r["run_id"]
    )
    assert [(row["run_id"], row["action"]) for row in rows] == [
        ("dead", "would abort"),
        ("live", "expiring"),
    ]
    done = runner.invoke(app, ["gc", "--url", store_url], catch_exceptions=False)
    assert done.exit_code == 0, done.stdout
    assert "aborted" in done.stdout
    assert read_run(store, "dead").status.value == "ABORTED"
    assert not read_run(store, "live").ended  # its controller may still come back


def test_a_controller_that_thaws_after_gc_aborted_its_run_writes_nothing(store: Any) -> None:
    """The fencing issue's reproduction: a controller decided, then paused past its lease
    (SIGSTOP, a VM pause) while gc aborted the run; it thaws and appends what it decided, with
    its lease as the fence, as the controller does. The database refuses it: no group is
    requested for the aborted run, and the run is not ended twice."""
    from wgstore.events import AppendRequest, FencedError

    paused = _abandoned(store, "r1", group_events=False)
    run = read_run(store, "r1")
    stale = decide(run, None, datetime.now(UTC))  # decided before the pause
    fence = paused.fence
    (outcome,) = collect_garbage(store, now=datetime.now(UTC) + timedelta(minutes=10))
    assert outcome.action == "aborted"
    log = [(r.stream_id, r.version) for r in store.read_all()]
    requests = [AppendRequest(group_stream(stale.group_id), stale.group_events)]  # type: ignore[arg-type]
    with pytest.raises(FencedError, match="lost the lease"):
        store.append_many(requests, fence=fence)
    assert [(r.stream_id, r.version) for r in store.read_all()] == log
    assert read_run(store, "r1").status.value == "ABORTED"
