"""A process that archives every ended run of a store, one run a batch (killed by a test)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

from wgstore.events import EventStore
from wgstore.projections.archiving import archive_runs, plan_archive


def main(url: str, location: str) -> None:
    store = EventStore.open(url)
    plan = plan_archive(store, ended_before=datetime.now(UTC) + timedelta(days=1))
    archive_runs(store, location, plan, batch_runs=1)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
