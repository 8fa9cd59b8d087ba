"""Append COUNT events to its own stream in batches of 1..7, recording acknowledged ids.

Usage: stream_writer.py URL STREAM COUNT OUT_FILE
"""

from __future__ import annotations

import random
import sys

from wgstore.events import EventStore
from wgstore.events.worker_group import WorkerGroupShutdownRequested


def main() -> None:
    url, stream, count, out_path = sys.argv[1:5]
    store = EventStore.open(url, migrate=False)
    rng = random.Random(stream)
    left = int(count)
    with open(out_path, "w") as out:
        while left:
            size = min(left, rng.randint(1, 7))
            batch = [
                WorkerGroupShutdownRequested(reason=f"{stream}:{left - i}") for i in range(size)
            ]
            for record in store.append(stream, batch):
                out.write(f"{record.event_id}\n")
            out.flush()
            left -= size
    store.close()


if __name__ == "__main__":
    main()
