"""A SQLite store on a read-only filesystem can still be read (issue 21, item 12).

A WAL database needs its ``-shm`` file even to be read, and SQLite makes it beside the database;
on a read-only filesystem it cannot, so ``mode=ro`` fails. A cleanly closed database (no ``-wal``
with content) is read ``immutable=1`` there; one with changes left in its ``-wal`` is refused with
what to do.

The read-only filesystem is a real one: a read-only bind mount of a temporary folder. That needs
root (``chmod`` does not stop root, so it cannot stand in), and the tests say so when they cannot
mount.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import fill


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``(folder, mounted)``: ``mounted`` shows ``folder`` on a read-only filesystem."""
    folder = tmp_path / "files"
    mounted = tmp_path / "read-only"
    folder.mkdir()
    mounted.mkdir()
    made = subprocess.run(
        ["mount", "--bind", str(folder), str(mounted)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot bind-mount a folder read-only here (needs root): {made.stderr}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(mounted)], check=True, capture_output=True
        )
        yield folder, mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def test_a_cleanly_closed_store_on_a_read_only_filesystem_is_read(
    cli: Any, read_only_mount: tuple[Path, Path]
) -> None:
    folder, mounted = read_only_mount
    recorded = fill(_url(folder / "wgstore.db"))
    assert sorted(p.name for p in folder.iterdir()) == ["wgstore.db"]  # cleanly closed
    url = _url(mounted / "wgstore.db")
    events = cli("events", "--url", url)
    assert events.exit_code == 0, events.stderr
    assert recorded.errored_group[:8] in events.stdout
    count = cli("sql", "SELECT count(*) AS n FROM wg_events", "--url", url, "--json")
    assert count.exit_code == 0, count.stderr
    assert '"n": 28' in count.stdout or '"n":28' in count.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["wgstore.db"]


def test_a_store_with_changes_left_in_its_wal_says_what_to_do(
    cli: Any, read_only_mount: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, mounted = read_only_mount
    source = tmp_path / "source.db"
    fill(_url(source))
    writer = sqlite3.connect(source)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute(
        "INSERT INTO wg_subscriptions (name, checkpoint, updated_at) VALUES ('left-in-wal', 0, '2026-01-01')"
    )
    writer.commit()
    # a copy taken while the writer is open: the database and a -wal holding its last commit
    shutil.copy(source, folder / "wgstore.db")
    shutil.copy(f"{source}-wal", folder / "wgstore.db-wal")
    writer.close()
    for command in (["events"], ["sql", "SELECT 1"]):
        result = cli(*command, "--url", _url(mounted / "wgstore.db"))
        assert result.exit_code == 1, result.stdout
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "not closed cleanly" in result.stderr
        assert "copy the database with its wgstore.db-wal to a writable folder" in result.stderr
