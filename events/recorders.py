"""``recorder_for``: the :class:`~wgstore.events.recorder.Recorder` of a database's backend.

Its own module, above the interface and both backends, so ``recorder`` (the interface) imports
neither backend and each backend imports the interface: dependencies one way.
"""

from __future__ import annotations

import sqlalchemy as sa

from wgstore.events.postgres_recorder import PostgresRecorder
from wgstore.events.recorder import Recorder
from wgstore.events.sqlite_recorder import SqliteRecorder

__all__ = ["recorder_for"]


def recorder_for(engine: sa.Engine, hmac_key: bytes | None = None) -> Recorder:
    """The recorder of ``engine``'s database (``sqlite`` or ``postgresql``).

    With ``hmac_key``, every row it appends carries its MAC
    (:func:`~wgstore.events.hashing.event_mac`), computed under the write lock.
    """
    backend = engine.dialect.name
    if backend == "postgresql":
        return PostgresRecorder(engine, hmac_key)
    if backend == "sqlite":
        return SqliteRecorder(engine, hmac_key)
    raise ValueError(
        f"no recorder for database {backend!r}; wgstore stores to sqlite or postgresql"
    )
