"""Append one huge batch to stream 'victim' and print 'done' if it ever finishes.

Usage: big_batch_writer.py URL COUNT
"""

from __future__ import annotations

import sys

from wgstore.events import EventStore
from wgstore.events.worker_group import WorkerGroupShutdownRequested


def main() -> None:
    url, count = sys.argv[1:3]
    store = EventStore.open(url, migrate=False)
    batch = [WorkerGroupShutdownRequested(reason="x" * 200 + str(i)) for i in range(int(count))]
    print("encoding done", flush=True)
    store.append("victim", batch)
    print("done", flush=True)
    store.close()


if __name__ == "__main__":
    main()
