"""One UTC normaliser and one plain-data converter for rows and views (projections/values.py)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest

from wgstore.projections.values import plain, to_utc

KOLKATA = timezone(timedelta(hours=5, minutes=30))
NOON_UTC = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_naive_time_is_taken_to_be_utc() -> None:
    assert to_utc(datetime(2026, 3, 1, 12, 0)) == NOON_UTC
    assert to_utc(datetime(2026, 3, 1, 12, 0)).tzinfo is UTC


def test_an_aware_time_in_another_zone_is_converted_to_utc() -> None:
    # views.py's copy kept such a time as it was (the store's engine sets its Postgres sessions
    # to UTC, so through the store it did not show; any other source of rows would)
    moment = to_utc(datetime(2026, 3, 1, 17, 30, tzinfo=KOLKATA))
    assert moment == NOON_UTC
    assert moment.tzinfo is UTC
    assert (moment.hour, moment.minute) == (12, 0)  # the UTC wall clock, not Kolkata's


def test_iso_text_is_parsed_and_none_stays_none() -> None:
    assert to_utc("2026-03-01T17:30:00+05:30") == NOON_UTC
    assert to_utc("2026-03-01 12:00:00.000000").tzinfo is UTC  # SQLite's naive text
    assert to_utc(None) is None
    with pytest.raises(ValueError):
        to_utc("yesterday")


class _Colour(enum.StrEnum):
    RED = "red"


@dataclass(frozen=True)
class _Point:
    x: float
    when: datetime


def test_plain_is_what_a_json_column_reads_back() -> None:
    value = {
        1: (_Point(1.5, NOON_UTC), _Colour.RED),
        "bytes": b"\x00\x01",
        "nan": math.nan,
    }
    assert plain(value) == {
        "1": [{"x": 1.5, "when": "2026-03-01T12:00:00Z"}, "red"],
        "bytes": "AAE=",
        "nan": None,
    }
