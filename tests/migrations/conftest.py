"""The migrations' tests start from an empty database, not the suite's migrated copies."""

from __future__ import annotations

import pytest


@pytest.fixture
def store_url(empty_store_url: str) -> str:
    """An empty database, once per backend: these tests run the migrations themselves."""
    return empty_store_url
