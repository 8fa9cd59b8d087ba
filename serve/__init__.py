"""``wgstore serve``: a live, read-only web view of runs and worker groups, and Prometheus metrics.

An ASGI app (Starlette, served by uvicorn): pages and JSON under ``/api/...`` built from the
read-side views of :mod:`wgstore.projections`, server-sent events fed by one follower of the log
(:mod:`wgstore.serve.follower`), and ``/metrics`` (:mod:`wgstore.serve.metrics`). Needs the
``serve`` extra: ``pip install 'wgstore[serve]'``.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PORT"]

DEFAULT_PORT = 8275
"""``wgstore serve``'s port: beside Ray's dashboard (8265), not on it."""
