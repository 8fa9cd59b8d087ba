"""Append to one shared stream with read-then-expect, counting lost races.

Usage: race_writer.py URL STREAM COUNT OUT_FILE START_AT
Writes one JSON line per acknowledged event (event id, version) and a final summary line.
"""

from __future__ import annotations

import json
import sys
import time

from wgstore.events import ConcurrencyError, EventStore
from wgstore.events.worker_group import WorkerGroupShutdownRequested


def main() -> None:
    url, stream, count, out_path, start_at = sys.argv[1:6]
    store = EventStore.open(url, migrate=False)
    while time.time() < float(start_at):  # start together, to race
        time.sleep(0.001)
    losses = 0
    with open(out_path, "w") as out:
        written = 0
        while written < int(count):
            version = store.stream_version(stream)
            try:
                [record] = store.append(
                    stream, [WorkerGroupShutdownRequested(reason="race")], expected_version=version
                )
            except ConcurrencyError as error:
                assert error.actual > version or error.actual != version
                losses += 1
                continue
            out.write(json.dumps({"id": str(record.event_id), "version": record.version}) + "\n")
            out.flush()
            written += 1
        out.write(json.dumps({"losses": losses}) + "\n")
    store.close()


if __name__ == "__main__":
    main()
