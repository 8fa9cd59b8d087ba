"""Keep Ray's own noise off the driver's terminal (used by ``wgstore run`` and ``executor``).

Here rather than in the CLI because only orchestration imports Ray (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["quiet_ray"]


def quiet_ray() -> None:
    """Keep Ray's own noise off the terminal: wgstore records and shows every error itself.

    When a worker dies Ray prints errors of results nobody fetched ("Unhandled error ...
    RAY_IGNORE_UNHANDLED_ERRORS") and the raylet's multi-line "(raylet) A worker died or was
    killed ..." to the driver's terminal; the log has the failure, with its traceback
    (``wgstore state G --errors``). The raylet's messages go to the ``wgstore.ray`` logger at
    DEBUG instead (Ray has no switch for them: its error-listener thread calls
    ``ray._private.worker.print_to_stdstream``, which is wrapped here, for this process only).
    """
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    try:
        import ray._private.worker as ray_worker
    except ImportError:  # pragma: no cover - Ray is a dependency of run/executor
        return
    original = ray_worker.print_to_stdstream
    if getattr(original, "_wgstore_quiet", False):
        return

    def quiet(data: Any, ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            logging.getLogger("wgstore.ray").debug("%s", "\n".join(data.get("lines", [])))
            return
        original(data, ignore_prefix)

    quiet._wgstore_quiet = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = quiet
