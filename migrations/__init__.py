"""Alembic environment and revisions for every wgstore table, index, view, trigger and function.

Use it through ``wgstore db upgrade`` / ``EventStore.open(url)`` or with the plain ``alembic``
command from the repository root (``WGSTORE_URL=... alembic upgrade head``).
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
