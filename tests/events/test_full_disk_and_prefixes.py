"""A full disk is its own error, and id prefixes match the same ids on both backends (issue 21,
item 14).

Disk full: a real one on SQLite (the store on a 2 MB tmpfs; mounting needs root, and the test
says so when it cannot), and PostgreSQL's own error (``53100 disk_full``, raised by psycopg as
``DiskFull``) through the one translation point, since the test cannot fill the server's disk.

Prefixes: case-sensitive on both. Ids are compared exactly everywhere else (a stream is read by
its exact id on both backends), so a prefix that matched ``A1B2`` to ``a1b2...`` would name a
group no exact lookup finds; and SQLite's LIKE folded only ASCII letters anyway.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wgstore.events import EventStore, StoreFullError, StoreUnavailableError, event_type
from wgstore.events._translate import translate_errors
from wgstore.events.worker_group import WorkerGroupShutdownRequested
from wgstore.projections.views import resolve_group_id


@event_type("FullDiskFiller", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class Filler:
    text: str


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 2 MB tmpfs of its own."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {made.stderr}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_is_a_store_full_error_and_keeps_what_was_written(
    tiny_filesystem: Path,
) -> None:
    url = f"sqlite:///{tiny_filesystem / 'wgstore.db'}"
    with EventStore.open(url) as store:
        written = 0
        with pytest.raises(StoreFullError) as raised:
            for _ in range(10_000):  # 2 MB fills long before this
                store.append("filling", [Filler(text=uuid.uuid4().hex * 64)])
                written += 1
        assert not isinstance(raised.value, StoreUnavailableError)
        assert "disk is full" in str(raised.value)
        assert "Free space" in str(raised.value)
        assert written > 0
        # the store still answers: the events before the full disk are all there
        assert len(list(store.read_stream("filling"))) == written


def test_postgres_disk_full_is_a_store_full_error() -> None:
    import psycopg.errors

    error = psycopg.errors.DiskFull(
        'could not extend file "base/16384/16385": No space left on device'
    )
    assert error.sqlstate == "53100"
    with (
        pytest.raises(StoreFullError, match="disk is full") as raised,
        translate_errors("postgresql+psycopg://app:secret@db/wg"),
    ):
        raise error
    assert "secret" not in str(raised.value)
    assert "PostgreSQL server's data disk" in str(raised.value)


def test_a_group_prefix_is_case_sensitive_on_both_backends(store: Any) -> None:
    for group in ("abc123", "ABC999"):
        # wgstore's own stream prefix takes only wgstore's event types
        store.append(f"worker-group-{group}", [WorkerGroupShutdownRequested(reason=group)])
    assert [sid for sid, _ in store.streams("worker-group-abc")] == ["worker-group-abc123"]
    assert [sid for sid, _ in store.streams("worker-group-ABC")] == ["worker-group-ABC999"]
    assert store.streams("WORKER-group-") == []
    assert resolve_group_id(store, "abc") == "abc123"
    assert resolve_group_id(store, "ABC") == "ABC999"
