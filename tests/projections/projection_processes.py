"""Processes for the SIGKILL test: a writer that keeps appending lifecycles, and a projector.

Run as ``python projection_processes.py writer URL STOP_FILE SEED`` or
``python projection_processes.py projector URL``.
"""

from __future__ import annotations

import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from projection_builders import Stream, error, stopped

from wgstore.events import EventStore
from wgstore.projections import catch_up_read_models


def _lifecycle(rng: random.Random, group_id: str) -> tuple[Stream, list[object]]:
    n = rng.randint(1, 4)
    stream = Stream(
        group_id, num_workers=n, start=datetime.now(UTC), step=timedelta(milliseconds=1)
    ).running()
    for _ in range(rng.randint(0, 12)):
        if rng.random() < 0.5:
            stream.reported(rng.randrange(n), loss=rng.random())
        else:
            stream.polled(unchanged=rng.randint(0, 20))
    changes = [stopped(r, error() if rng.random() < 0.2 else None) for r in range(n)]
    stream.polled(*changes).shutdown_requested().shut_down()
    return stream, [e.event for e in stream.events]


def writer(url: str, stop_file: str, seed: int) -> None:
    """Append lifecycles of 8 groups at a time, interleaved, a few events per append, until
    ``stop_file`` exists; then finish the groups under way."""
    rng = random.Random(seed)
    store = EventStore.open(url)
    count = 0
    pending: list[tuple[Stream, list[object]]] = []
    while True:
        stopping = Path(stop_file).exists()
        while not stopping and len(pending) < 8:
            count += 1
            pending.append(_lifecycle(rng, f"k{seed}-{count}"))
        if not pending:
            break
        index = rng.randrange(len(pending))
        stream, events = pending[index]
        size = rng.randint(1, 4)
        store.append(stream.stream_id, events[:size])
        del events[:size]
        if not events:
            pending.pop(index)
        time.sleep(rng.random() * 0.01)
    store.close()


def projector(url: str) -> None:
    """Catch up in small batches, forever (until killed)."""
    store = EventStore.open(url)
    print("ready", flush=True)
    while True:
        catch_up_read_models(store, batch_size=5)
        time.sleep(0.002)


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        writer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        projector(sys.argv[2])
