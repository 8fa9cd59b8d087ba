"""``LeaseKeeper``: renews a lease in the background while its holder lives.

Used by the run controller, the Ray Train recorder and a resuming driver. Nothing the holder
blocks on (Ray connecting, a long read, training) lets the lease lapse while the process lives; a
holder that dies (or is paused: SIGSTOP, a VM pause) stops renewing, the lease expires, and
another may take it. What keeps a paused holder from writing after that is the fence its appends
carry, not this module.

The keepers of one store share one renewal thread: each lease is renewed every ``lease_s / 3``,
and a renewal takes along every other lease of the store that is due within ``lease_s / 6``, in
one statement per lease length (:func:`~wgstore.events.leases.renew_held`). A process serving
many runs (a platform's controllers) renews them all in one transaction every few seconds, not
one transaction and one thread per run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections import defaultdict

from wgstore.events import EventStore
from wgstore.events.leases import Lease, release_lease, renew_held
from wgstore.events.per_store import PerStore

__all__ = ["LeaseKeeper"]

log = logging.getLogger("wgstore.lease")

_STOP_WAIT_S = 10.0  # how long stop() waits for a renewal in flight (a store that hangs)


class LeaseKeeper:
    """Keeps ``lease`` renewed every ``lease_s / 3`` until :meth:`stop`.

    ``lost`` turns True once a renewal finds the lease held by another (the keeper then stops);
    ``valid_until`` (a ``time.monotonic()`` reading) is how long the last renewal keeps it. A
    renewal that fails (the store unreachable) is logged and tried again ``lease_s / 3`` later.
    """

    def __init__(self, store: EventStore, lease: Lease, lease_s: float) -> None:
        self.store = store
        self.lease = lease
        self.lease_s = lease_s
        self.lost = False
        self.valid_until = time.monotonic() + lease_s
        self.due = time.monotonic() + lease_s / 3
        """When the next renewal is due (``time.monotonic()``); the renewal thread's."""
        self._renewer = _renewer_of(store)
        self._renewer.add(self)

    def stop(self, *, release: bool = False) -> None:
        """Stop renewing; with ``release``, give the lease up (if it is still the holder's).

        Once it returns no renewal of this lease runs any more (one in flight is waited for, at
        most 10 s).
        """
        self._renewer.remove(self)
        if release and not self.lost:
            with contextlib.suppress(Exception):
                release_lease(self.store, self.lease.run_id, self.lease.holder)


class _Renewer:
    """The renewal thread of one store's keepers (started with the first, ended with the last)."""

    def __init__(self, store: EventStore) -> None:
        self._store = weakref.ref(store)  # the keepers hold the store; this must not
        self._keepers: set[LeaseKeeper] = set()
        self._changed = threading.Condition()
        self._in_flight = threading.Lock()  # held while a renewal statement runs
        self._thread: threading.Thread | None = None

    def add(self, keeper: LeaseKeeper) -> None:
        with self._changed:
            self._keepers.add(keeper)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wgstore-lease-renewals", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def remove(self, keeper: LeaseKeeper) -> None:
        with self._changed:
            self._keepers.discard(keeper)
            self._changed.notify()
        if threading.current_thread() is not self._thread and self._in_flight.acquire(
            timeout=_STOP_WAIT_S
        ):
            self._in_flight.release()

    def _run(self) -> None:
        while True:
            with self._changed:
                batch = self._next_batch()
                if batch is None:
                    self._thread = None
                    return
                self._in_flight.acquire()  # under the condition: remove() then waits for it
            try:
                self._renew(batch)
            finally:
                self._in_flight.release()

    def _next_batch(self) -> list[LeaseKeeper] | None:
        """Wait (holding the condition) until a renewal is due; the keepers it takes along, or
        None once there is nothing left to keep."""
        while True:
            store = self._store()
            if not self._keepers or store is None or store.closed:
                self._keepers.clear()
                return None
            now = time.monotonic()
            due_at = min(keeper.due for keeper in self._keepers)
            if due_at <= now:
                return [k for k in self._keepers if k.due - k.lease_s / 6 <= now]
            self._changed.wait(due_at - now)

    def _renew(self, batch: list[LeaseKeeper]) -> None:
        store = self._store()
        if store is None:
            return
        by_length: dict[float, list[LeaseKeeper]] = defaultdict(list)
        for keeper in batch:
            by_length[keeper.lease_s].append(keeper)
        for lease_s, keepers in by_length.items():
            started = time.monotonic()
            for keeper in keepers:
                keeper.due = started + lease_s / 3  # also when this renewal fails: tried again
            try:
                renewed = renew_held(
                    store, [(k.lease.run_id, k.lease.holder) for k in keepers], lease_s
                )
            except Exception as error:  # noqa: BLE001 - a store hiccup: retried, within the lease
                runs = ", ".join(sorted(k.lease.run_id for k in keepers))
                log.warning("could not renew the lease of run(s) %s: %s", runs, error)
                continue
            for keeper in keepers:
                if (keeper.lease.run_id, keeper.lease.holder) in renewed:
                    keeper.valid_until = started + lease_s
                else:
                    keeper.lost = True
                    with self._changed:
                        self._keepers.discard(keeper)


_renewer_of = PerStore(_Renewer)
"""The renewer of a store object's leases in this process."""
