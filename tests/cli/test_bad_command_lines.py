"""Bad command lines: one red line, a non-zero exit, never a traceback (both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cli.conftest import GROUP_ERRORED, Recorded

GROUP = GROUP_ERRORED[:8]
HUGE = str(2**70)

# (the command line without --url, a phrase the one line must contain)
BAD_COMMAND_LINES: list[tuple[list[str], str]] = [
    (["events", "--since", "999999999w"], "too long a duration"),
    (["events", "--until", "99999999999999999999d"], "too long a duration"),
    (["events", "--since", "0001-01-01T00:00:00+01:00"], "years 1 to 9999"),
    (["events", "--until", "9999-12-31T23:59:59-01:00"], "years 1 to 9999"),
    (["events", "--since", "2000000d"], "before the year 1"),
    (["events", "--follow", "--stop-after", "99999999999999999999s"], "too long a duration"),
    (["groups", "--since", "999999999w"], "too long a duration"),
    (["polls", GROUP, "--since", "999999999w"], "too long a duration"),
    (["polls", GROUP, "--until", "0001-01-01T00:00:00+01:00"], "years 1 to 9999"),
    (["export", "-o", "-", "--since", "999999999w"], "too long a duration"),
    (["export", "-o", "-", "--until", "0001-01-01T00:00:00+01:00"], "years 1 to 9999"),
    (["state", GROUP, "--at", "999999999w"], "too long a duration"),
    (["state", GROUP, "--at", "9999-12-31T23:59:59-05:00"], "years 1 to 9999"),
    (["state", GROUP, "--version", HUGE], "64-bit range"),
    (["export", "-o", "-", "--group", ""], "--group is empty"),
    (["export", "-o", "-", "--run", " "], "--run is empty"),
    (["events", "--group", ""], "--group is empty"),
    (["events", "--stream", ""], "--stream is empty"),
    (["events", "--run", ""], "--run is empty"),
    (["events", "--stream", "run-\x00"], "NUL"),
    (["export", "-o", "-", "--run", "\x00"], "NUL"),
    (["state", ""], "give a worker group id"),
    (["state", "a\x00"], "NUL"),
    (["replay", "a\ud800"], "surrogate"),
]


@pytest.mark.parametrize(
    ("args", "phrase"),
    [pytest.param(args, phrase, id=" ".join(args)) for args, phrase in BAD_COMMAND_LINES],
)
def test_a_bad_command_line_is_one_line_and_a_non_zero_exit(
    recorded: Recorded, cli: Callable[..., Any], args: list[str], phrase: str
) -> None:
    result = cli(*args, "--url", recorded.url)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and phrase in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("workers", "phrase"),
    [
        ("4..2", "the minimum (4) is above the maximum (2); write 2..4"),
        ("0..2", "at least 1 worker"),
        ("0", "at least 1 worker"),
        ("two", "a whole number (4) or a range MIN..MAX (2..4)"),
        ("2.5", "a whole number (4) or a range MIN..MAX (2..4)"),
        ("1..2..3", "a whole number (4) or a range MIN..MAX (2..4)"),
    ],
)
def test_a_bad_worker_range_is_one_line_and_writes_nothing(
    cli: Callable[..., Any], tmp_path: Any, workers: str, phrase: str
) -> None:
    """Issue 40: an elastic range the run cannot have is refused before anything is opened."""
    db = tmp_path / "never.db"
    result = cli("run", "examples.train:train_fn", "--workers", workers, "--url", f"sqlite:///{db}")
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and phrase in lines[0], lines
    assert not db.exists()  # nothing written: no store was even created
