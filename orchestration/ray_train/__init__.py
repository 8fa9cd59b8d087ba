"""Record real Ray Train v2 runs in wgstore: ``RunConfig(callbacks=[RecordingCallback(url)])``.

``RecordingCallback`` (needs ``ray[train]``: ``pip install 'wgstore[ray-train]'``) appends the
run stream and one worker-group stream per attempt from the controller's hooks, through a
``BackgroundWriter`` (no Ray) that never makes a hook wait for the database.
Names load on first use, so ``writer`` imports without Ray Train.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgstore._lazy import lazy_getattr

if TYPE_CHECKING:
    from wgstore.orchestration.ray_train.callback import RecordingCallback
    from wgstore.orchestration.ray_train.writer import BackgroundWriter, RecordingError

__all__ = ["BackgroundWriter", "RecordingCallback", "RecordingError"]

_LAZY = {
    "RecordingCallback": "wgstore.orchestration.ray_train.callback",
    "BackgroundWriter": "wgstore.orchestration.ray_train.writer",
    "RecordingError": "wgstore.orchestration.ray_train.writer",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
