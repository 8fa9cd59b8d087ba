"""Every Ray Train run on a cluster, recorded with no code change: Ray's own export events.

With ``RAY_enable_export_api_write=1`` and ``RAY_TRAIN_ENABLE_STATE_TRACKING=1`` every node
writes JSON lines to ``<session>/logs/export_events/``. ``wgstore ingest ray-export`` reads them
(:class:`~wgstore.orchestration.ray_export.ingester.Ingester`) into the same run, attempt and
group events the recording callback writes (:mod:`.mapping`), each line exactly once. No Ray is
imported: the files are plain JSON.
"""

from __future__ import annotations

from wgstore.orchestration.ray_export.ingester import Ingester, IngestStats, ingest
from wgstore.orchestration.ray_export.mapping import RAY_EXPORT_SOURCE, ExportMapper

__all__ = ["RAY_EXPORT_SOURCE", "ExportMapper", "IngestStats", "Ingester", "ingest"]
