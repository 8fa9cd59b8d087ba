"""The projector killed with SIGKILL at random points while events keep arriving."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_until
from wgstore.projections import catch_up_read_models, project_worker_group, rebuild_read_models
from wgstore.projections.projector import READ_MODELS_SUBSCRIPTION, read_model_rows

SCRIPT = Path(__file__).with_name("projection_processes.py")


def _checkpoint(store: Any) -> int:
    return int(store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint())


def _rows(store: Any) -> Any:
    with store.engine.connect() as connection:
        return read_model_rows(connection)


@pytest.mark.slow
def test_read_models_equal_a_rebuild_after_ten_sigkills_while_events_arrive(
    store: Any, store_url: str, tmp_path: Path
) -> None:
    rng = random.Random(7)
    stop_file = tmp_path / "stop-writing"
    writer = subprocess.Popen(
        [sys.executable, str(SCRIPT), "writer", store_url, str(stop_file), "1"]
    )
    checkpoints = []
    kills_while_writing = 0
    try:
        for _ in range(10):
            projector = subprocess.Popen(
                [sys.executable, str(SCRIPT), "projector", store_url],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert projector.stdout is not None
            assert projector.stdout.readline().strip() == "ready"
            # Killed after it has made progress (however slow the machine), at a random point
            # of what it does next: mid-batch, between batches, while it waits for events.
            before = checkpoints[-1] if checkpoints else 0
            wait_until(
                lambda before=before: _checkpoint(store) > before or writer.poll() is not None,
                timeout_s=120,
                what=f"the projector to move the read models past position {before}",
            )
            assert writer.poll() is None, "the writer stopped before the kills were done"
            time.sleep(rng.uniform(0.0, 0.3))  # the random kill point, not a wait
            kills_while_writing += writer.poll() is None
            projector.send_signal(signal.SIGKILL)
            assert projector.wait(timeout=30) == -signal.SIGKILL
            checkpoints.append(_checkpoint(store))
        stop_file.touch()
        assert writer.wait(timeout=240) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert kills_while_writing >= 5, "events must keep arriving while the projector is killed"
    catch_up_read_models(store)
    kept = _rows(store)
    assert store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() == store.head()
    rebuild_read_models(store)
    assert _rows(store) == kept
    groups = kept["wg_worker_groups"]
    assert len(groups) == len(store.streams("worker-group-")) > 8
    assert {row[4] for row in groups} == {"SHUT_DOWN"}  # column 4 is status
    stream_ids = [row[1] for row in groups]
    for stream_id in stream_ids[:5]:
        state = project_worker_group(store.read_stream(stream_id))
        assert state.reports_total == sum(
            1 for row in kept["wg_reports"] if row[0] == state.group_id
        )
