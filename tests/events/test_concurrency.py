"""Several processes writing one log: optimistic concurrency and safe tailing, on both backends."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wgstore.events import EventStore

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.slow


def spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS / script), *map(str, args)], stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen[str], timeout: float) -> None:
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr


def test_racing_writers_get_every_version_exactly_once_and_losers_get_concurrency_errors(
    store: EventStore, store_url: str, tmp_path: Path
) -> None:
    writers, per_writer = 8, 15
    start_at = time.time() + 3.0
    outputs = [tmp_path / f"writer-{i}.jsonl" for i in range(writers)]
    processes = [
        spawn("race_writer.py", store_url, "shared", per_writer, out, start_at) for out in outputs
    ]
    for process in processes:
        finish(process, timeout=120)
    acknowledged: dict[str, int] = {}
    losses = 0
    for out in outputs:
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        losses += lines[-1]["losses"]
        acknowledged.update({line["id"]: line["version"] for line in lines[:-1]})

    stored = list(store.read_stream("shared"))
    assert [r.version for r in stored] == list(range(1, writers * per_writer + 1))
    assert {
        str(r.event_id): r.version for r in stored
    } == acknowledged  # nothing acknowledged is lost
    assert losses > 0  # they really raced
    assert store.verify().ok


def test_a_tailing_reader_sees_every_event_once_in_order_while_four_processes_append(
    store: EventStore, store_url: str, tmp_path: Path
) -> None:
    per_writer = 300
    outputs = [tmp_path / f"stream-{i}.txt" for i in range(4)]
    processes = [
        spawn("stream_writer.py", store_url, f"stream-{i}", per_writer, out)
        for i, out in enumerate(outputs)
    ]
    seen: list[tuple[int, str]] = []
    checkpoint = 0
    deadline = time.monotonic() + 120
    while len(seen) < 4 * per_writer and time.monotonic() < deadline:
        for event in store.read_all(after=checkpoint, limit=100):
            seen.append((event.position, str(event.event_id)))
            checkpoint = event.position
    for process in processes:
        finish(process, timeout=60)

    positions = [position for position, _ in seen]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    acknowledged = {line for out in outputs for line in out.read_text().split()}
    assert len(acknowledged) == 4 * per_writer
    assert {event_id for _, event_id in seen} == acknowledged
    # The reader's view equals the final log: nothing was skipped and filled in later.
    assert [(e.position, str(e.event_id)) for e in store.read_all()] == seen
