"""``LeaseKeeper``: renews a lease from its own thread while its holder lives.

Used by the run controller and by the Ray Train recorder. Nothing the holder blocks on (Ray
connecting, a long read, training) lets the lease lapse while the process lives; a holder that
dies (or is paused: SIGSTOP, a VM pause) stops renewing, the lease expires, and another may take
it. What keeps a paused holder from writing after that is the fence its appends carry, not this
thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from wgstore.events import EventStore
from wgstore.events.leases import Lease, release_lease, renew_lease

__all__ = ["LeaseKeeper"]

log = logging.getLogger("wgstore.lease")


class LeaseKeeper:
    """Renews ``lease`` every ``lease_s / 3`` from a daemon thread until :meth:`stop`.

    ``lost`` turns True once a renewal finds the lease held by another; ``valid_until`` (a
    ``time.monotonic()`` reading) is how long the last renewal keeps it.
    """

    def __init__(self, store: EventStore, lease: Lease, lease_s: float) -> None:
        self.store = store
        self.lease = lease
        self.lease_s = lease_s
        self.lost = False
        self.valid_until = time.monotonic() + lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"wgstore-lease-{lease.run_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            if self.store.closed:
                return
            started = time.monotonic()
            try:
                renewed = renew_lease(
                    self.store, self.lease.run_id, self.lease.holder, self.lease_s
                )
            except Exception as error:  # noqa: BLE001 - a store hiccup: retried, within the lease
                log.warning("could not renew the lease of run %s: %s", self.lease.run_id, error)
                continue
            if not renewed:
                self.lost = True
                return
            self.valid_until = started + self.lease_s

    def stop(self, *, release: bool = False) -> None:
        """Stop renewing; with ``release``, give the lease up (if it is still the holder's)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if release and not self.lost:
            with contextlib.suppress(Exception):
                release_lease(self.store, self.lease.run_id, self.lease.holder)
