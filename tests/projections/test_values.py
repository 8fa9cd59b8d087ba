"""One UTC normaliser and one plain-data converter for rows and views (projections/values.py)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest
from projection_builders import Stream, append_stream

from wgstore.events import EventStore
from wgstore.projections import catch_up_read_models
from wgstore.projections.values import plain, to_utc
from wgstore.projections.views import group_summaries

KOLKATA = timezone(timedelta(hours=5, minutes=30))
NOON_UTC = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_naive_time_is_taken_to_be_utc() -> None:
    assert to_utc(datetime(2026, 3, 1, 12, 0)) == NOON_UTC
    assert to_utc(datetime(2026, 3, 1, 12, 0)).tzinfo is UTC


def test_an_aware_time_in_another_zone_is_converted_to_utc() -> None:
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


def test_summaries_read_from_the_read_models_are_utc_whatever_the_session_zone(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libpq sets the session's time zone from PGTZ: Postgres then returns +05:30 times
    monkeypatch.setenv("PGTZ", "Asia/Kolkata")
    store = EventStore.open(pg_url)
    try:
        stream = Stream("g1", start=NOON_UTC, step=timedelta(seconds=1)).running()
        append_stream(store, stream)
        from_log = group_summaries(store, from_log=True)
        catch_up_read_models(store)
        from_models = group_summaries(store)
    finally:
        store.close()
    assert from_models == from_log
    for key in ("requested_at", "updated_at"):
        assert from_models[0][key].tzinfo is UTC, key  # was +05:30 before the one normaliser
