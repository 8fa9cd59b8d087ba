"""What a :class:`~wgstore.orchestration.ray_train.RecordingCallback` becomes on the workers.

Ray Train hands every worker the run's ``TrainRunContext``, whose ``RunConfig`` holds the
callbacks; the workers never call a controller callback's hooks. Unpickling the real callback
there imported wgstore's event catalog and read models in each worker (about 0.2 s of CPU per
worker, while the workers start: measured in bench/ray_train_overhead.py). Pickled on from its
controller, the callback is this stand-in instead: it imports nothing of wgstore and does
nothing; it names the run it stands for.
"""

from __future__ import annotations

from ray.train.v2.api.callback import RayTrainCallback

__all__ = ["RecordingStandIn"]


class RecordingStandIn(RayTrainCallback):
    """An inert placeholder for a live ``RecordingCallback`` in a copy of the run config."""

    def __init__(self, run_id: str = "") -> None:
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RecordingStandIn(run_id={self.run_id!r})"
