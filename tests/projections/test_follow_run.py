"""``follow_run``: a run's current attempt as it changes, read from the log (what ``wgstore
resume`` shows while another process, or a controller in its own, drives the run)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import run_scenarios as scenarios
from projection_builders import Stream, append_stream

from tests.waiting import wait_until
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.projections.follow import follow_run


def test_the_current_attempt_is_yielded_as_it_changes_then_the_next_one(store: Any) -> None:
    run = scenarios.running(store, "live")
    done = threading.Event()
    seen: list[Any] = []

    def follow() -> None:
        seen.extend(follow_run(store, "live", stopped=done.is_set, wait_s=0.05))

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        wait_until(lambda: bool(seen), timeout_s=30, what="the running attempt")
        assert (seen[0].group_id, seen[0].reports_total) == ("live-g1", 2)
        store.append(
            group_stream("live-g1"), [WorkerReported(world_rank=0, index=2, metrics={"loss": 0.4})]
        )
        wait_until(lambda: seen[-1].reports_total == 3, timeout_s=30, what="the new report")
        run.to("RESTARTING").to("RESCHEDULING", "live-g2")  # attempt 2, named by the run
        stream = Stream("live-g2", num_workers=2, run_id="live", attempt=2, start=datetime.now(UTC))
        append_stream(store, stream.running().reported(0, loss=0.3))
    finally:
        done.set()
        follower.join(timeout=30)
    assert not follower.is_alive()
    # the last read began after the stop: it saw attempt 2's events appended before it
    assert (seen[-1].group_id, seen[-1].attempt, seen[-1].reports_total) == ("live-g2", 2, 1)
    assert [s.reports_total for s in seen if s.group_id == "live-g1"][:2] == [2, 3]


def test_a_run_with_no_attempt_yet_yields_nothing(store: Any) -> None:
    scenarios.Run(store, "new", context=None)
    assert list(follow_run(store, "new", stopped=lambda: True)) == []
