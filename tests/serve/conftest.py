"""Fixtures of the ``wgstore serve`` tests: stores with runs recorded by hand, the app in
Starlette's TestClient (helpers: serve_support.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "projections"))

pytest.importorskip("starlette", reason="wgstore serve needs the serve extra")


@pytest.fixture
def writer(store_url: str) -> Iterator[Any]:
    """A writable store on each backend (what the tests append with; the server reads)."""
    from wgstore.events import EventStore

    store = EventStore.open(store_url)
    try:
        yield store
    finally:
        store.close()
