"""A ``RayExecutor`` whose shutdowns pause before their last poll: a window to die in.

Tests of real crashes during a shutdown (a worker SIGKILLed with the group ``SHUTTING_DOWN``, a
controller killed while it restarts a group) need the shutdown to last long enough for the
fault to land before the last poll. The executor has no such pause; this test wrapper adds it
where the shutdown handler takes its last poll (``final_poll_events``), so the group is
``SHUTTING_DOWN`` for the whole pause. Faults of the actors themselves are
``RayRuntime(failpoints=...)``'s.

Imported by tests and by the scripts they run in subprocesses (with the repository on
``sys.path``).
"""

from __future__ import annotations

import time
from typing import Any

from wgstore.events import NewEvent
from wgstore.orchestration import RayExecutor
from wgstore.orchestration.executor.commands import Command
from wgstore.projections.state import WorkerGroupState


class PausingExecutor(RayExecutor):
    """``RayExecutor`` whose every shutdown waits ``shutdown_pause_s`` before its last poll."""

    def __init__(self, *args: Any, shutdown_pause_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shutdown_pause_s = shutdown_pause_s

    def final_poll_events(self, state: WorkerGroupState, command: Command) -> list[NewEvent]:
        # a fault window, not a wait for a condition: the test's fault lands in it
        time.sleep(self.shutdown_pause_s)
        return super().final_poll_events(state, command)
