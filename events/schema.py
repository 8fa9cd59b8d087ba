"""Table metadata of the log. Alembic migrations are written against this; a test checks drift.

Every table carries the prefix ``wg_`` so the store can share a database with other software.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

__all__ = [
    "ALEMBIC_VERSION_TABLE",
    "NOTIFY_CHANNEL",
    "metadata",
    "wg_events",
    "wg_snapshots",
    "wg_subscriptions",
]

ALEMBIC_VERSION_TABLE = "wg_alembic_version"
NOTIFY_CHANNEL = "wg_events"

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

_Position = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_Json = sa.Text().with_variant(postgresql.JSONB(), "postgresql")
_EventId = sa.String(36).with_variant(postgresql.UUID(as_uuid=True), "postgresql")

wg_events = sa.Table(
    "wg_events",
    metadata,
    sa.Column(
        "position",
        _Position,
        sa.Identity(always=False),
        primary_key=True,
        comment="global order; rises in the order events become visible",
    ),
    sa.Column("event_id", _EventId, nullable=False, comment="idempotency key"),
    sa.Column("stream_id", sa.Text(), nullable=False),
    sa.Column("stream_version", sa.Integer(), nullable=False, comment="1, 2, 3... per stream"),
    sa.Column("event_type", sa.Text(), nullable=False),
    sa.Column("schema_version", sa.SmallInteger(), nullable=False),
    sa.Column("data", _Json, nullable=False),
    sa.Column("metadata", _Json, nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, comment="UTC"),
    sa.Column(
        "hash",
        sa.String(64),
        nullable=False,
        comment="SHA-256 over the stream's previous hash and this event",
    ),
    sa.Column(
        "log_hash",
        sa.String(64),
        nullable=False,
        comment="SHA-256 over the log_hash of the row before (position order), position, hash, mac",
    ),
    sa.Column(
        "mac",
        sa.String(64),
        nullable=True,
        comment="HMAC-SHA-256 of the event's content with the writer's key; NULL without a key",
    ),
    sa.UniqueConstraint("event_id"),
    sa.UniqueConstraint("stream_id", "stream_version"),
    sqlite_autoincrement=True,
)
sa.Index("ix_wg_events_event_type_position", wg_events.c.event_type, wg_events.c.position)

wg_subscriptions = sa.Table(
    "wg_subscriptions",
    metadata,
    sa.Column("name", sa.Text(), primary_key=True),
    sa.Column(
        "checkpoint",
        sa.BigInteger(),
        nullable=False,
        server_default="0",
        comment="position of the last event handled",
    ),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

wg_snapshots = sa.Table(
    "wg_snapshots",
    metadata,
    sa.Column("name", sa.Text(), primary_key=True, comment="which projection"),
    sa.Column("stream_id", sa.Text(), primary_key=True),
    sa.Column("stream_version", sa.Integer(), nullable=False, comment="last event folded in"),
    sa.Column(
        "schema",
        sa.Text(),
        nullable=False,
        comment="fingerprint of the state's schema; a mismatch discards the snapshot",
    ),
    sa.Column("state", _Json, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)
