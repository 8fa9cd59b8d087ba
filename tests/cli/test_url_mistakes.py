"""Mistakes in a store URL, said right the first time (issue 41, item 15 and its URL notes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wgstore.events import EventStore, StoreUnavailableError
from wgstore.events.engine import mask_url


def _one_line(result: Any, exit_code: int) -> str:
    assert result.exit_code == exit_code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def test_three_slashes_before_an_existing_absolute_path_are_told_to_write_four(
    cli: Any, in_tmp_folder: Path
) -> None:
    store = in_tmp_folder / "abs" / "x.db"
    store.parent.mkdir()
    assert cli("db", "upgrade", "--url", f"sqlite:///{store}").exit_code == 0  # four slashes
    relative = str(store).lstrip("/")  # sqlite:///tmp/...: the relative path tmp/... from here
    line = _one_line(cli("runs", "--url", f"sqlite:///{relative}"), 1)
    assert f"no wgstore database at {relative}" in line
    assert f"write four slashes: sqlite:///{store}" in line
    # creating one: the relative folder is missing where the absolute one is there
    new = _one_line(cli("db", "upgrade", "--url", f"sqlite:///{relative[:-4]}new.db"), 1)
    assert f"write four slashes: sqlite:///{store.parent}/new.db" in new
    assert not (in_tmp_folder / relative).parent.exists()


def test_a_missing_relative_path_without_an_absolute_twin_gets_no_slash_hint(
    cli: Any, in_tmp_folder: Path
) -> None:
    line = _one_line(cli("runs", "--url", "sqlite:///nowhere/x.db"), 1)
    assert "no wgstore database at nowhere/x.db" in line
    assert "slashes" not in line


def test_a_query_string_on_a_sqlite_url_is_refused_in_one_line_naming_the_options(
    cli: Any, recorded_sqlite: Any
) -> None:
    """``?mode=ro`` said "no such access mode: ro?mode=ro" (read-only commands), and writable
    ones ignored it with a driver warning."""
    url = f"{recorded_sqlite.url}?mode=ro"
    for command in (["runs"], ["sql", "SELECT 1"], ["gc", "--dry-run"], ["db", "upgrade"]):
        line = _one_line(cli(*command, "--url", url), 2)
        assert "?mode=ro is not an option of a wgstore SQLite URL" in line
        assert "synchronous, busy_timeout, lock_wait" in line
        assert "no such access mode" not in line
    with pytest.raises(StoreUnavailableError, match="not an option"):
        EventStore.open(url)
    # wgstore's own options still work
    assert cli("runs", "--url", f"{recorded_sqlite.url}?busy_timeout=5").exit_code == 0


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://postgres@[::1/test", "postgresql://postgres@[::1/test"),
        ("postgresql://[::1/test", "postgresql://[::1/test"),
        ("postgresql://bob:s3cret@[::1/test", "postgresql://bob:***@[::1/test"),
    ],
)
def test_a_malformed_url_is_echoed_as_given_with_only_a_given_password_masked(
    cli: Any, url: str, shown: str
) -> None:
    """``[::1`` (no closing bracket) was echoed as ``postgres:***`` with no password given."""
    assert mask_url(url) == shown
    line = _one_line(cli("runs", "--url", url), 2)
    assert f"{shown!r} is not a valid database URL" in line
    assert "s3cret" not in line
