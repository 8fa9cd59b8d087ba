"""Run leases: which controller holds a run, until when (table ``wg_run_leases``).

A controller takes a run's lease before it acts and renews it while it works; another controller
(or ``wgstore gc``) may take the run only once the lease has expired. Times come from the
caller's clock (``now``, default the wall clock): controllers on different machines need clocks
that agree to well within a lease (NTP does). The log records each controller that took the run
(``ControllerStarted``).

A lease fences: each grant carries an ``epoch`` that grows by one whenever the lease changes
hands (a renewal keeps it), and a holder's appends carry ``Lease.fence``; the database refuses
them once the row names another holder or epoch (migration ``0009_fencing``). Expiry decides who
may *take* a lease; the epoch decides whose writes count, so a holder that paused past its
lease cannot write after someone else took over, whatever its clock says.

On PostgreSQL every statement here commits on its own (autocommit): none leaves a transaction
open that waits for this process, so a process paused between two of them holds no lease row
(a renewal that did would keep every fenced append of its runs, and their takeover, waiting
for as long as it is paused). SQLite runs them in one ``BEGIN IMMEDIATE`` transaction, which
holds the database's write lock like an append's.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from wgstore.events._translate import translate_errors
from wgstore.events.records import Fence
from wgstore.events.schema import wg_run_leases
from wgstore.events.store import EventStore

__all__ = [
    "HolderProcess",
    "Lease",
    "acquire_lease",
    "lease_of",
    "leases",
    "release_lease",
    "renew_held",
    "renew_lease",
    "renew_leases",
    "take_lease",
    "this_process",
]


@dataclass(frozen=True, slots=True)
class HolderProcess:
    """The process that holds a lease: its host, pid and start (boot id and start time in clock
    ticks, from ``/proc``; empty where there is no ``/proc``), so a reused pid is not taken for
    the holder."""

    host: str
    pid: int
    start: str = ""

    def gone(self) -> bool:
        """True when this is a process of this host (and this boot) that no longer runs.

        False whenever that cannot be known (another host, no ``/proc``): such a holder is
        waited out instead.
        """
        if self.host != socket.gethostname() or not self.start:
            return False
        here = _process_start(self.pid)
        if here is None:  # no such process now
            return _boot_id() == self.start.split("/", 1)[0]
        return here != self.start


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str | None:
    """``<boot id>/<start time>`` of process ``pid``, None if it does not exist, "" if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    boot = _boot_id()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return f"{boot}/{fields[19]}" if boot else ""  # field 22 of stat: starttime


def this_process() -> HolderProcess:
    """This process, as a lease holder."""
    pid = os.getpid()
    return HolderProcess(socket.gethostname(), pid, _process_start(pid) or "")


@dataclass(frozen=True, slots=True)
class Lease:
    """One row of ``wg_run_leases``."""

    run_id: str
    holder: str
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime
    epoch: int = 1
    process: HolderProcess | None = None
    """The holder's process, when it said (None for rows written before 0009_fencing)."""

    @property
    def fence(self) -> Fence:
        """This grant as a fencing token for appends (``store.append(..., fence=...)``)."""
        return Fence(lease=self.run_id, holder=self.holder, epoch=self.epoch)

    def expired(self, now: datetime | None = None) -> bool:
        """True once ``now`` (default: the wall clock) is past ``expires_at``."""
        return (now or _now()) >= self.expires_at


def _now() -> datetime:
    return datetime.now(UTC)


def _writing(store: EventStore) -> AbstractContextManager[sa.Connection]:
    """A connection for this module's writes: on PostgreSQL each statement commits by itself
    (see the module docstring); on SQLite one transaction, committed at the end."""
    if store.engine.dialect.name == "postgresql":
        return store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    return store.engine.begin()


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _check(lease_s: float) -> None:
    if not lease_s > 0:
        raise ValueError(f"lease_s must be > 0 seconds, got {lease_s!r}")


def acquire_lease(
    store: EventStore,
    run_id: str,
    holder: str,
    lease_s: float,
    now: datetime | None = None,
    *,
    process: HolderProcess | None = None,
    take_from: Fence | None = None,
) -> Lease | None:
    """Take run ``run_id`` for ``holder`` for ``lease_s`` seconds; None if another holds it.

    Succeeds when nobody holds the run, when ``holder`` already does (a renewal: same epoch), or
    when the lease of another holder has expired at ``now`` (a takeover: the epoch grows by one,
    which fences the previous holder's appends). Atomic on both backends.

    Args:
        process: the process that will hold it (default: this one), recorded in the row.
        take_from: take the lease from this grant (``Lease.fence``) even though it has not
            expired, provided the row is still exactly that grant (holder and epoch): for a
            holder whose process is known to be gone (:meth:`HolderProcess.gone`), or one that
            hands its lease over (a resuming driver to the controller it starts).

    Returns:
        The lease now held (its :attr:`Lease.fence` goes with the holder's appends), or None.
    """
    _check(lease_s)
    now = now or _now()
    expires = now + timedelta(seconds=lease_s)
    process = process or this_process()
    leases_ = wg_run_leases.c
    takeable = sa.or_(leases_.holder == holder, leases_.expires_at <= now)
    if take_from is not None:
        takeable = sa.or_(
            takeable,
            sa.and_(leases_.holder == take_from.holder, leases_.epoch == take_from.epoch),
        )
    owner = {"host": process.host, "pid": process.pid, "process_start": process.start}
    with translate_errors(store.url), _writing(store) as connection:
        row = connection.execute(
            wg_run_leases.update()
            .where(leases_.run_id == run_id, takeable)
            .values(
                epoch=sa.case((leases_.holder == holder, leases_.epoch), else_=leases_.epoch + 1),
                holder=holder,
                acquired_at=sa.case((leases_.holder == holder, leases_.acquired_at), else_=now),
                renewed_at=now,
                expires_at=expires,
                **owner,
            )
            .returning(*wg_run_leases.c)
        ).first()
        if row is not None:
            return _lease(row)
        exists = connection.execute(
            sa.select(leases_.run_id).where(leases_.run_id == run_id)
        ).first()
        if exists is not None:
            return None
        inserted = connection.execute(
            _insert_if_absent(connection)
            .values(
                run_id=run_id,
                holder=holder,
                acquired_at=now,
                renewed_at=now,
                expires_at=expires,
                epoch=1,
                **owner,
            )
            .returning(*wg_run_leases.c)
        ).first()
        return _lease(inserted) if inserted is not None else None


def take_lease(
    store: EventStore,
    run_id: str,
    holder: str,
    lease_s: float,
    *,
    take_from: Fence | None = None,
) -> tuple[Lease | None, Lease | None]:
    """:func:`acquire_lease`, and at once from a holder on this host whose process is gone.

    Returns:
        ``(lease, None)`` when ``holder`` now holds it; ``(None, held)`` when another live
        holder does (``held`` is its lease, to name it or wait for it), or ``(None, None)``
        when the row went away meanwhile (try again).
    """
    lease = acquire_lease(store, run_id, holder, lease_s, take_from=take_from)
    if lease is not None:
        return lease, None
    held = lease_of(store, run_id)
    if held is not None and held.process is not None and held.process.gone():
        lease = acquire_lease(store, run_id, holder, lease_s, take_from=held.fence)
        if lease is not None:
            return lease, None
    return None, held


def _insert_if_absent(connection: sa.Connection) -> sa.Insert:
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    insert: Any = dialect.insert
    return insert(wg_run_leases).on_conflict_do_nothing(index_elements=["run_id"])  # type: ignore[no-any-return]


def renew_lease(
    store: EventStore, run_id: str, holder: str, lease_s: float, now: datetime | None = None
) -> bool:
    """Extend ``holder``'s lease of ``run_id`` by ``lease_s`` from ``now``; False if it lost it."""
    return bool(renew_held(store, [(run_id, holder)], lease_s, now))


def renew_leases(
    store: EventStore,
    run_ids: Iterable[str],
    holder: str,
    lease_s: float,
    now: datetime | None = None,
) -> set[str]:
    """Extend every lease of ``run_ids`` that ``holder`` still holds, in one statement; returns
    the ids renewed (the others were lost)."""
    renewed = renew_held(store, [(run_id, holder) for run_id in run_ids], lease_s, now)
    return {run_id for run_id, _ in renewed}


def renew_held(
    store: EventStore,
    held: Iterable[tuple[str, str]],
    lease_s: float,
    now: datetime | None = None,
) -> set[tuple[str, str]]:
    """Extend every lease of ``held`` (``(run_id, holder)`` pairs, holders may differ) that its
    holder still holds, in one statement; returns the pairs renewed (the others were lost).

    What a process's lease keepers share (:mod:`wgstore.orchestration.leases.keeper`): one
    transaction renews the leases of all its controllers instead of one each.
    """
    _check(lease_s)
    wanted = list(dict.fromkeys(held))
    if not wanted:
        return set()
    now = now or _now()
    postgres = store.engine.dialect.name == "postgresql"
    pairs: dict[str, Any] = (
        {"runs": [run for run, _ in wanted], "holders": [holder for _, holder in wanted]}
        if postgres
        else {"pairs": json.dumps(wanted)}
    )
    with translate_errors(store.url), _writing(store) as connection:
        rows = connection.execute(
            _RENEW_POSTGRES if postgres else _RENEW_SQLITE,
            {"now": now, "expires_at": now + timedelta(seconds=lease_s), **pairs},
        ).all()
    return {(row.run_id, row.holder) for row in rows}


def _renewal_times() -> tuple[sa.BindParameter[Any], ...]:
    """The times renew_held sets, bound as their columns' type (SQLite stores them as text)."""
    return (
        sa.bindparam("now", type_=wg_run_leases.c.renewed_at.type),
        sa.bindparam("expires_at", type_=wg_run_leases.c.expires_at.type),
    )


# renew_held's statement: the pairs as one parameter (arrays; JSON on SQLite), not an IN list
# of two bound values a pair, which SQLAlchemy renders anew each time (5-6x the client's CPU
# for 500 leases).
# The rows are locked in the order a group of fenced appends takes them (code points, as Python
# sorts; the recorder checks the fences in that order), by the sub-select's ORDER BY ... FOR
# UPDATE: the UPDATE alone locks them in the order it finds them, and a renewal and a group that
# each held a row the other waits for would wait in a circle until Postgres's deadlock check (a
# second) failed one.
_RENEW_POSTGRES = sa.text(
    "UPDATE wg_run_leases AS l SET renewed_at = :now, expires_at = :expires_at "
    "FROM unnest(CAST(:runs AS text[]), CAST(:holders AS text[])) AS w(run_id, holder) "
    "WHERE l.run_id = w.run_id AND l.holder = w.holder AND l.run_id IN ("
    "SELECT run_id FROM wg_run_leases WHERE run_id = ANY(CAST(:runs AS text[])) "
    'ORDER BY run_id COLLATE "C" FOR UPDATE) '
    "RETURNING l.run_id, l.holder"
).bindparams(*_renewal_times())
_RENEW_SQLITE = sa.text(
    "UPDATE wg_run_leases SET renewed_at = :now, expires_at = :expires_at "
    "WHERE (run_id, holder) IN "
    "(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs)) "
    "RETURNING run_id, holder"
).bindparams(*_renewal_times())


def release_lease(store: EventStore, run_id: str, holder: str) -> bool:
    """Give up ``holder``'s lease of ``run_id`` (e.g. the run ended); False if it held none."""
    with translate_errors(store.url), _writing(store) as connection:
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
        epoch=row.epoch,
        process=HolderProcess(row.host, row.pid, row.process_start or "")
        if row.host is not None and row.pid is not None
        else None,
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
