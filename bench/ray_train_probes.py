"""The two callbacks the Ray Train benches put beside ``RecordingCallback``.

bench/ray_train_overhead.py and bench/mlflow_compare.py both use them. Each class is made
inside a function, so cloudpickle sends it by value and Ray's controller needs no bench module.
"""

from __future__ import annotations

import json
import time
from typing import Any


def shutdown_probe_class() -> type:
    """A callback that writes ``time.monotonic()`` (one clock for the whole machine) to a file
    when the controller starts shutting the worker group down."""
    from ray.train.v2._internal.execution.callback import WorkerGroupCallback

    class ShutdownProbe(WorkerGroupCallback):
        def __init__(self, path: str) -> None:
            self.path = path

        def before_worker_group_shutdown(self, worker_group: Any) -> None:
            with open(self.path, "w") as out:
                out.write(repr(time.monotonic()))

    return ShutdownProbe


def timed_recorder_class() -> type:
    """``RecordingCallback`` with every hook timed (``perf_counter`` and the controller thread's
    CPU time around the hook, its guard included), written as JSON to ``timings_path`` at the end
    of ``after_controller_finish``."""
    import functools

    from ray.train.v2._internal.execution.callback import (
        ControllerCallback,
        ReportCallback,
        WorkerGroupCallback,
    )

    from wgstore.orchestration.ray_train import RecordingCallback

    bases = (ControllerCallback, WorkerGroupCallback, ReportCallback)
    hooks = sorted(
        name
        for name, value in vars(RecordingCallback).items()
        if not name.startswith("_")
        and callable(value)
        and any(hasattr(base, name) for base in bases)
    )

    class TimedRecordingCallback(RecordingCallback):
        def __init__(self, url: str, timings_path: str) -> None:
            self.timings_path = timings_path
            super().__init__(url)

        def __getstate__(self) -> dict[str, Any]:
            return {**super().__getstate__(), "timings_path": self.timings_path}

        def _reset(self) -> None:
            super()._reset()
            self.hook_times: dict[str, tuple[int, float, float]] = {}

        def _write_timings(self) -> None:
            times = self.hook_times
            with open(self.timings_path, "w") as out:
                json.dump(
                    {
                        "hook_s": round(sum(s for _, s, _ in times.values()), 6),
                        "hook_calls": sum(calls for calls, _, _ in times.values()),
                        "hooks": {
                            name: {"calls": calls, "s": round(s, 6), "cpu_s": round(cpu, 6)}
                            for name, (calls, s, cpu) in sorted(times.items())
                        },
                    },
                    out,
                )

    def timed(name: str, hook: Any) -> Any:
        @functools.wraps(hook)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            started, cpu_started = time.perf_counter(), time.thread_time()
            try:
                return hook(self, *args, **kwargs)
            finally:
                calls, seconds, cpu = self.hook_times.get(name, (0, 0.0, 0.0))
                self.hook_times[name] = (
                    calls + 1,
                    seconds + time.perf_counter() - started,
                    cpu + time.thread_time() - cpu_started,
                )
                if name == "after_controller_finish":
                    self._write_timings()

        return run

    # The end of the run's flush (the writer's last batches, the read models' last catch-up,
    # the store's close), timed on its own: it runs inside a hook (the state update to a final
    # state), once per run, however many reports the run made.
    for name in (*hooks, "_close"):
        setattr(TimedRecordingCallback, name, timed(name, getattr(RecordingCallback, name)))
    return TimedRecordingCallback
