"""The per-stream hash chain that makes the log tamper-evident.

Each event's hash is SHA-256 over the previous event's hash in the same stream and the event's
stored fields, joined by newlines. The Postgres function ``wg_append`` computes the very same
bytes (``data`` and ``metadata`` as the database renders them as text), so ``verify`` recomputes
every hash from what is stored and finds a changed, removed or reordered event.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

__all__ = ["chain_hash", "epoch_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def epoch_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (moment - _EPOCH) // _US


def chain_hash(
    previous: str,
    stream_id: str,
    version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    recorded_us: int,
    data: str,
    metadata: str,
) -> str:
    """The hash of one event, chained to ``previous`` (empty for a stream's first event)."""
    text = "\n".join(
        (
            previous,
            stream_id,
            str(version),
            event_id,
            event_type,
            str(schema_version),
            str(recorded_us),
            data,
            metadata,
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()
