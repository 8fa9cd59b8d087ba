"""The Ray Train recorder's appends carry the run's lease as a fence (no Ray cluster needed:
the callback's lease step runs against a real store, as the writer's thread runs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from wgstore.events import EventStore
from wgstore.events.leases import acquire_lease, lease_of
from wgstore.orchestration.ray_train.callback import RecordingCallback
from wgstore.orchestration.ray_train.writer import BackgroundWriter

pytest.importorskip("ray.train.v2")


@pytest.fixture
def recorder(store_url: str) -> Iterator[RecordingCallback]:
    callback = RecordingCallback(store_url, lease_s=30.0)
    callback._run_id = "r1"
    callback._writer = BackgroundWriter(lambda: EventStore.open(store_url), url=store_url)
    yield callback
    callback._writer.close(timeout_s=10)
    if callback._keeper is not None:
        callback._keeper.stop()


def test_the_recorder_fences_its_appends_with_the_lease_it_takes(
    store: EventStore, recorder: RecordingCallback
) -> None:
    recorder._keep_lease(store)
    held = lease_of(store, "r1")
    assert held is not None and recorder._writer is not None
    assert recorder._writer.fence == held.fence


def test_a_recorder_that_finds_the_run_held_by_a_live_process_records_nothing(
    store: EventStore, recorder: RecordingCallback
) -> None:
    # this very process holds it under another name: alive, so it is not taken over
    assert acquire_lease(store, "r1", "resume-b", 30.0) is not None
    recorder._keep_lease(store)
    assert recorder._writer is not None and recorder._writer.fence is None
    assert recorder._keeper is None
    assert any("held by 'resume-b'" in p for p in recorder._writer.stats.problems)
    holder = lease_of(store, "r1")
    assert holder is not None and holder.holder == "resume-b"
