"""The migrations' tests start from an empty database, not the suite's migrated copies."""

from __future__ import annotations

import pytest

from wgstore.migrations.runner import MIGRATION_LOCK_CLASS

WAITING_FOR_THE_MIGRATION_LOCK = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
    f"AND classid = {MIGRATION_LOCK_CLASS}"
)
"""A row while some session waits for a store's migration lock (Postgres)."""


@pytest.fixture
def store_url(empty_store_url: str) -> str:
    """An empty database, once per backend: these tests run the migrations themselves."""
    return empty_store_url
