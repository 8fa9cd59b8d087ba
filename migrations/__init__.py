"""Bringing a store's schema to head: an empty database in one step, an existing one by Alembic.

``fresh`` builds an empty database from the running code's definitions and stamps it at head;
``versions/`` holds the Alembic revisions, history that upgrades existing stores (each keeps its
own SQL and imports nothing from wgstore); ``runner`` picks one under the migration lock. Use it
through ``wgstore db upgrade`` / ``EventStore.open(url)`` or with the plain ``alembic`` command
from the repository root (``WGSTORE_URL=... alembic upgrade head``, which runs every revision).
"""

from wgstore.migrations.runner import (
    HEAD_REVISION,
    alembic_config,
    current_revision,
    ensure_schema,
    head_revision,
    upgrade,
)

__all__ = [
    "HEAD_REVISION",
    "alembic_config",
    "current_revision",
    "ensure_schema",
    "head_revision",
    "upgrade",
]
