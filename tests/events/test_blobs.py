"""``wg_blobs``: bytes stored once by their SHA-256, on both backends."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import sqlalchemy as sa

from wgstore.events.blobs import BlobNotFoundError, get_blob, put_blobs, sha256_of
from wgstore.events.schema import wg_blobs


def test_bytes_are_stored_once_and_read_back_by_their_hash(store: Any) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB, every byte value
    names = put_blobs(store, [big, b"small", big])
    assert names == [hashlib.sha256(big).hexdigest(), sha256_of(b"small")]
    assert put_blobs(store, [big]) == [names[0]]  # again: nothing new
    with store.engine.connect() as connection:
        rows = connection.execute(sa.select(wg_blobs.c.sha256, wg_blobs.c.size)).all()
    assert sorted(rows) == sorted([(names[0], len(big)), (names[1], 5)])
    assert get_blob(store, names[0]) == big and get_blob(store, names[1]) == b"small"


def test_a_missing_or_altered_blob_is_refused(store: Any) -> None:
    with pytest.raises(BlobNotFoundError, match="no blob"):
        get_blob(store, "0" * 64)
    (name,) = put_blobs(store, [b"original"])
    with store.engine.begin() as connection:
        connection.execute(wg_blobs.update().values(bytes=b"altered"))
    with pytest.raises(BlobNotFoundError, match="hashes to"):
        get_blob(store, name)
