"""A lease holder's fenced appends, for tests that pause this process (SIGSTOP) as they run.

Usage: paused_writer.py URL LEASE HOLDER EPOCH KEYED MODE ARG [IDLE_S]

- MODE ``once``: stop this process (SIGSTOP) at the append failpoint
  (``pooled_recorder.before_append_commit``: just before the append's COMMIT, holding what its
  transaction holds, or just before an append the server commits by itself is sent), then make
  one fenced append to stream ARG and print ``WROTE`` or ``ERROR <type>: <message>``.
- MODE ``loop``: fenced appends to stream ``run-<LEASE>``, one event each, until the file ARG
  exists; each acknowledged event's id is written to ARG + ``.ids`` as a line, each error as
  ``ERROR <type>: <message>``.

KEYED ``1`` opens the store with an HMAC key (appends then build their rows in this process);
IDLE_S sets the Postgres writer's idle bound (``PostgresRecorder.writer_idle_s``).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from wgstore.events import EventStore, Fence, pooled_recorder
from wgstore.events.postgres_recorder import PostgresRecorder
from wgstore.events.worker_group import WorkerGroupShutdownRequested

KEY = b"paused writer key, 32 bytes long"


def _stop_once() -> None:
    pooled_recorder.before_append_commit = None
    os.kill(os.getpid(), signal.SIGSTOP)


def main() -> None:
    url, lease, holder, epoch, keyed, mode, arg = sys.argv[1:8]
    if len(sys.argv) > 8:
        PostgresRecorder.writer_idle_s = float(sys.argv[8])
    fence = Fence(lease, holder, int(epoch))
    with EventStore.open(url, hmac_key=KEY if keyed == "1" else None, migrate=False) as store:
        if mode == "once":
            pooled_recorder.before_append_commit = _stop_once
            try:
                store.append(arg, [WorkerGroupShutdownRequested(reason="paused")], fence=fence)
                print("WROTE", flush=True)
            except Exception as error:  # noqa: BLE001 - the test reads what it was
                print(f"ERROR {type(error).__name__}: {error}", flush=True)
            return
        until = Path(arg)
        with open(f"{arg}.ids", "w") as out:
            while not until.exists():
                try:
                    [record] = store.append(
                        f"run-{lease}", [WorkerGroupShutdownRequested(reason="loop")], fence=fence
                    )
                    out.write(f"{record.event_id}\n")
                except Exception as error:  # noqa: BLE001 - the test reads what it was
                    out.write(f"ERROR {type(error).__name__}: {error}\n")
                out.flush()


if __name__ == "__main__":
    main()
