"""``GroupClaims``: which executor serves a worker group, as fenced leases.

Several executors may follow one store (a ``wgstore executor`` beside the in-process executor of
each ``wgstore run``, or one per driver on a platform). Each group is served by exactly one:
before an executor acts for a group (a command or a poll) it claims it, a lease keyed by the
group's stream id in ``wg_run_leases`` (``worker-group-<id>``), and every event it appends for the
group carries that claim as its fence. Another executor finds the claim held and leaves the
group alone; once the holder dies its claim expires (or, for a holder on this host whose process
is gone, at once) and the next executor to act takes it over (the epoch grows, fencing the old
holder if it was only paused) and re-attaches to the workers by name. A thread renews every claim of this executor in one statement each ``claim_s / 3``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from wgstore.events import EventStore, Fence
from wgstore.events.leases import Lease, release_lease, renew_leases, take_lease
from wgstore.events.streams import group_stream

__all__ = ["CLAIM_S", "GroupClaims"]

CLAIM_S = 30.0
"""How long a claim lasts unless renewed: how soon another executor takes a dead one's groups."""

log = logging.getLogger("wgstore.executor")


class GroupClaims:
    """The groups one executor holds (see the module docstring).

    Args:
        store: where the claims live.
        holder: the executor's id.
        claim_s: the claim's length.
    """

    def __init__(self, store: EventStore, holder: str, claim_s: float = CLAIM_S) -> None:
        self.store = store
        self.holder = holder
        self.claim_s = claim_s
        self._held: dict[str, Lease] = {}
        self._busy_until: dict[str, float] = {}  # held by another: not asked again before then
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def fence(self, group_id: str) -> Fence | None:
        """This executor's claim of ``group_id`` as a fence, claiming it if nobody holds it;
        None while another executor holds it."""
        with self._lock:
            held = self._held.get(group_id)
            busy_until = self._busy_until.get(group_id, 0.0)
        if held is not None:
            return held.fence
        if time.monotonic() < busy_until:
            return None
        key = group_stream(group_id)
        lease, _held = take_lease(self.store, key, self.holder, self.claim_s)
        if lease is None:
            with self._lock:
                self._busy_until[group_id] = time.monotonic() + self.claim_s / 3
            return None
        with self._lock:
            self._busy_until.pop(group_id, None)
            self._held[group_id] = lease
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew, name=f"wgstore-claims-{self.holder[:8]}", daemon=True
                )
                self._thread.start()
        return lease.fence

    def holds(self, group_id: str) -> bool:
        """True while this executor holds ``group_id`` (as far as it knows)."""
        with self._lock:
            return group_id in self._held

    def lost(self, group_id: str) -> None:
        """Forget ``group_id``: an append found its claim taken over."""
        with self._lock:
            self._held.pop(group_id, None)

    def release(self, group_id: str) -> None:
        """Give up the claim of ``group_id`` (it ended, or this executor stops)."""
        with self._lock:
            held = self._held.pop(group_id, None)
            self._busy_until.pop(group_id, None)
        if held is not None:
            with contextlib.suppress(Exception):
                release_lease(self.store, held.run_id, self.holder)

    def close(self) -> None:
        """Stop renewing and give every claim up, so another executor may take the groups now."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        with self._lock:
            group_ids = list(self._held)
        for group_id in group_ids:
            self.release(group_id)

    def _renew(self) -> None:
        while not self._stop.wait(self.claim_s / 3):
            if self.store.closed:
                return
            with self._lock:
                keys = {lease.run_id: group_id for group_id, lease in self._held.items()}
            try:
                renewed = renew_leases(self.store, keys, self.holder, self.claim_s)
            except Exception as error:  # noqa: BLE001 - a store hiccup: retried, within the claim
                log.warning("could not renew this executor's group claims: %s", error)
                continue
            for key in set(keys) - renewed:
                log.warning(
                    "executor %s lost its claim of group %s: another executor serves it now",
                    self.holder,
                    keys[key],
                )
                self.lost(keys[key])
