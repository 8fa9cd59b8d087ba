"""Time parsing, the top-level help, and error handling shared by every command."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wgstore.cli.common import UsageProblem, parse_duration, parse_time

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10m", NOW - timedelta(minutes=10)),
        ("2h", NOW - timedelta(hours=2)),
        ("1h30m", NOW - timedelta(minutes=90)),
        ("3d ago", NOW - timedelta(days=3)),
        ("now", NOW),
        ("2024-04-30T08:15:00Z", datetime(2024, 4, 30, 8, 15, tzinfo=UTC)),
        ("2024-04-30 08:15", datetime(2024, 4, 30, 8, 15, tzinfo=UTC)),
        ("2024-04-30T10:15:00+02:00", datetime(2024, 4, 30, 8, 15, tzinfo=UTC)),
    ],
)
def test_parse_time_reads_iso_and_relative_times_as_utc(text: str, expected: datetime) -> None:
    assert parse_time(text, now=NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "10x", "2024-13-01", ""])
def test_parse_time_refuses_what_is_not_a_time(text: str) -> None:
    with pytest.raises(UsageProblem, match="is not a time"):
        parse_time(text, now=NOW)


def test_parse_duration_adds_up_its_parts() -> None:
    assert parse_duration("1h30m15s") == timedelta(hours=1, minutes=30, seconds=15)
    assert parse_duration("250ms") == timedelta(milliseconds=250)
    with pytest.raises(UsageProblem, match="not a duration"):
        parse_duration("5 parsecs")


def test_help_lists_every_command(cli: Any) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for command in ("events", "verify", "sql", "db"):
        assert command in result.stdout


def test_no_arguments_shows_the_help_instead_of_failing_silently(cli: Any) -> None:
    result = cli()
    assert "Usage" in result.stdout + result.stderr


def test_an_unknown_option_is_a_usage_error_with_exit_2(cli: Any) -> None:
    result = cli("events", "--colour")
    assert result.exit_code == 2
