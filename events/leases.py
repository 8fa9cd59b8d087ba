"""Run leases: which controller holds a run, until when (table ``wg_run_leases``).

A controller takes a run's lease before it acts and renews it while it works; another controller
(or ``wgstore gc``) may take the run only once the lease has expired. Times come from the
caller's clock (``now``, default the wall clock): controllers on different machines need clocks
that agree to well within a lease (NTP does). The lease is coordination only; the log records
each controller that took the run (``ControllerStarted``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from wgstore.events._translate import translate_errors
from wgstore.events.schema import wg_run_leases
from wgstore.events.store import EventStore

__all__ = ["Lease", "acquire_lease", "lease_of", "leases", "release_lease", "renew_lease"]


@dataclass(frozen=True, slots=True)
class Lease:
    """One row of ``wg_run_leases``."""

    run_id: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime

    def expired(self, now: datetime | None = None) -> bool:
        """True once ``now`` (default: the wall clock) is past ``expires_at``."""
        return (now or _now()) >= self.expires_at


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _check(lease_s: float) -> None:
    if not lease_s > 0:
        raise ValueError(f"lease_s must be > 0 seconds, got {lease_s!r}")


def acquire_lease(
    store: EventStore, run_id: str, holder: str, lease_s: float, now: datetime | None = None
) -> bool:
    """Take run ``run_id`` for ``holder`` for ``lease_s`` seconds; False if another holds it.

    Succeeds when nobody holds the run, when ``holder`` already does (a renewal), or when the
    lease of another holder has expired at ``now``. Atomic on both backends.
    """
    _check(lease_s)
    now = now or _now()
    expires = now + timedelta(seconds=lease_s)
    with translate_errors(store.url), store.engine.begin() as connection:
        taken = connection.execute(
            wg_run_leases.update()
            .where(
                wg_run_leases.c.run_id == run_id,
                sa.or_(wg_run_leases.c.holder == holder, wg_run_leases.c.expires_at <= now),
            )
            .values(holder=holder, acquired_at=now, renewed_at=now, expires_at=expires)
        ).rowcount
        if taken:
            return True
        exists = connection.execute(
            sa.select(wg_run_leases.c.run_id).where(wg_run_leases.c.run_id == run_id)
        ).first()
        if exists is not None:
            return False
        inserted = connection.execute(
            _insert_if_absent(connection)
            .values(
                run_id=run_id, holder=holder, acquired_at=now, renewed_at=now, expires_at=expires
            )
            .returning(wg_run_leases.c.run_id)
        ).first()
        return inserted is not None


def _insert_if_absent(connection: sa.Connection) -> sa.Insert:
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    insert: Any = dialect.insert
    return insert(wg_run_leases).on_conflict_do_nothing(index_elements=["run_id"])  # type: ignore[no-any-return]


def renew_lease(
    store: EventStore, run_id: str, holder: str, lease_s: float, now: datetime | None = None
) -> bool:
    """Extend ``holder``'s lease of ``run_id`` by ``lease_s`` from ``now``; False if it lost it."""
    _check(lease_s)
    now = now or _now()
    with translate_errors(store.url), store.engine.begin() as connection:
        renewed = connection.execute(
            wg_run_leases.update()
            .where(wg_run_leases.c.run_id == run_id, wg_run_leases.c.holder == holder)
            .values(renewed_at=now, expires_at=now + timedelta(seconds=lease_s))
        ).rowcount
    return bool(renewed)


def release_lease(store: EventStore, run_id: str, holder: str) -> bool:
    """Give up ``holder``'s lease of ``run_id`` (e.g. the run ended); False if it held none."""
    with translate_errors(store.url), store.engine.begin() as connection:
        deleted = connection.execute(
            wg_run_leases.delete().where(
                wg_run_leases.c.run_id == run_id, wg_run_leases.c.holder == holder
            )
        ).rowcount
    return bool(deleted)


def _lease(row: sa.Row[Any]) -> Lease:
    return Lease(
        run_id=row.run_id,
        holder=row.holder,
        acquired_at=_aware(row.acquired_at),
        renewed_at=_aware(row.renewed_at),
        expires_at=_aware(row.expires_at),
    )


def lease_of(store: EventStore, run_id: str) -> Lease | None:
    """The lease of ``run_id``, or None when no controller holds (or held and released) it."""
    with translate_errors(store.url), store.engine.connect() as connection:
        row = connection.execute(
            sa.select(wg_run_leases).where(wg_run_leases.c.run_id == run_id)
        ).first()
    return _lease(row) if row is not None else None


def leases(store: EventStore) -> dict[str, Lease]:
    """Every lease row, by run id (for listings: a run not ended with none live is orphaned)."""
    with translate_errors(store.url), store.engine.connect() as connection:
        rows = connection.execute(sa.select(wg_run_leases)).all()
    return {row.run_id: _lease(row) for row in rows}
