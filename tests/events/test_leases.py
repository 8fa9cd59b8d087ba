"""Run leases on both backends: one holder at a time, taken over only once expired."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from wgstore.events.leases import acquire_lease, lease_of, leases, release_lease, renew_lease

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_first_holder_takes_the_run_and_a_second_is_refused(store):
    assert lease_of(store, "r1") is None
    assert acquire_lease(store, "r1", "a", 60, now=T0)
    assert not acquire_lease(store, "r1", "b", 60, now=T0 + timedelta(seconds=59))
    lease = lease_of(store, "r1")
    assert lease is not None
    assert (lease.holder, lease.expires_at) == ("a", T0 + timedelta(seconds=60))
    assert not lease.expired(T0 + timedelta(seconds=59))
    assert lease.expired(T0 + timedelta(seconds=60))


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_renew(store):
    assert acquire_lease(store, "r1", "a", 10, now=T0)
    assert acquire_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=10))
    assert not renew_lease(store, "r1", "a", 10, now=T0 + timedelta(seconds=11))
    assert renew_lease(store, "r1", "b", 10, now=T0 + timedelta(seconds=11))
    lease = lease_of(store, "r1")
    assert lease is not None and lease.holder == "b"
    assert lease.expires_at == T0 + timedelta(seconds=21)
    assert lease.acquired_at == T0 + timedelta(seconds=10)


def test_the_holder_reacquires_its_own_lease(store):
    assert acquire_lease(store, "r1", "a", 10, now=T0)
    assert acquire_lease(store, "r1", "a", 10, now=T0 + timedelta(seconds=5))
    lease = lease_of(store, "r1")
    assert lease is not None and lease.expires_at == T0 + timedelta(seconds=15)


def test_release_frees_the_run_only_for_its_holder(store):
    assert acquire_lease(store, "r1", "a", 60, now=T0)
    assert acquire_lease(store, "r2", "c", 60, now=T0)
    assert not release_lease(store, "r1", "b")
    assert set(leases(store)) == {"r1", "r2"}
    assert release_lease(store, "r1", "a")
    assert set(leases(store)) == {"r2"}
    assert acquire_lease(store, "r1", "b", 60, now=T0)


def test_racing_acquirers_get_one_winner(store_url):
    from wgstore.events import EventStore

    winners: list[str] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(4)

    def take(holder: str) -> None:
        try:
            with EventStore.open(store_url) as own:
                barrier.wait(30)
                if acquire_lease(own, "race", holder, 60):
                    winners.append(holder)
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            failures.append(error)
            barrier.abort()

    threads = [threading.Thread(target=take, args=(f"h{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert len(winners) == 1


@pytest.mark.parametrize("lease_s", [0, -1.0])
def test_a_lease_must_last(store, lease_s):
    with pytest.raises(ValueError, match="lease_s must be > 0"):
        acquire_lease(store, "r1", "a", lease_s)


def test_a_holder_process_is_gone_only_when_this_host_can_tell():
    import dataclasses
    import subprocess
    import sys

    from wgstore.events.leases import HolderProcess, this_process

    me = this_process()
    assert me.start and not me.gone()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = HolderProcess(me.host, child.pid, "")
    child.wait()
    assert not dead.gone()  # no start recorded: cannot tell a reused pid, so never "gone"
    ended = dataclasses.replace(me, pid=child.pid)
    assert ended.gone()  # that pid runs nothing now (or something that started later)
    assert dataclasses.replace(me, start=me.start + "0").gone()  # same pid, another process
    assert not dataclasses.replace(ended, host="elsewhere").gone()  # remote: waited out


def test_a_lease_whose_holder_process_is_gone_is_taken_at_once(store):
    import subprocess
    import sys

    from wgstore.events.leases import HolderProcess, this_process

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    me = this_process()
    dead = HolderProcess(me.host, child.pid, me.start)
    held = acquire_lease(store, "r1", "a", 600, process=dead)
    assert held is not None and held.process == dead
    assert acquire_lease(store, "r1", "b", 60) is None  # not expired
    stale = acquire_lease(store, "r1", "b", 60, take_from=held.fence)
    assert stale is not None and (stale.holder, stale.epoch) == ("b", 2)
    assert stale.process == me
    # take_from names one grant: once the lease moved on, it takes nothing.
    assert acquire_lease(store, "r1", "c", 60, take_from=held.fence) is None
