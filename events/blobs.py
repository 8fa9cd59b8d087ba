"""Content-addressed bytes (``wg_blobs``): stored once, named by their SHA-256.

An event that would carry large bytes (a recorded Ray Train run's pickled train loop or
datasets) names them by hash instead (:class:`~wgstore.events.run.Pickled`); the bytes are put
here first, so an event never names bytes the store lacks. Putting the same bytes again is a
no-op; reading checks the bytes against their name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

from wgstore.events._translate import translate_errors
from wgstore.events.engine import mask_url
from wgstore.events.errors import InvalidArgumentError
from wgstore.events.schema import wg_blobs

__all__ = ["BlobNotFoundError", "get_blob", "put_blobs", "sha256_of"]


class BlobNotFoundError(InvalidArgumentError):
    """No bytes of that SHA-256 are stored (or the stored ones no longer hash to it)."""


def sha256_of(data: bytes) -> str:
    """The hex SHA-256 of ``data``: its name in ``wg_blobs``."""
    return hashlib.sha256(data).hexdigest()


def put_blobs(store: Any, blobs: Iterable[bytes]) -> list[str]:
    """Store each of ``blobs`` once (already stored ones are left as they are); their names."""
    now = datetime.now(UTC)
    rows = {sha256_of(b): {"sha256": sha256_of(b), "size": len(b), "bytes": b} for b in blobs}
    if not rows:
        return []
    with translate_errors(store.url), store.engine.begin() as connection:
        dialect = postgresql if connection.dialect.name == "postgresql" else sqlite_dialect
        insert = dialect.insert(wg_blobs).on_conflict_do_nothing(index_elements=["sha256"])
        connection.execute(insert, [{**row, "created_at": now} for row in rows.values()])
    return list(rows)


def get_blob(store: Any, sha256: str) -> bytes:
    """The bytes stored under ``sha256``.

    Raises:
        BlobNotFoundError: none are, or the stored bytes do not hash to ``sha256``.
    """
    with translate_errors(store.url), store.engine.connect() as connection:
        data = connection.execute(
            sa.select(wg_blobs.c.bytes).where(wg_blobs.c.sha256 == sha256)
        ).scalar_one_or_none()
        connection.rollback()
    if data is None:
        raise BlobNotFoundError(f"no blob {sha256} in wg_blobs of {mask_url(store.url)}")
    data = bytes(data)
    if sha256_of(data) != sha256:
        raise BlobNotFoundError(f"the blob stored as {sha256} hashes to {sha256_of(data)}")
    return data
