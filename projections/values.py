"""Plain values for read-model rows and views: one UTC normaliser, one plain-data converter.

Both backends hand times back in their own ways (SQLite: naive text or naive datetimes in UTC;
PostgreSQL: aware datetimes in the session's time zone, which ``PGTZ`` or the server's settings
may make anything), and folds carry aware UTC datetimes. :func:`to_utc` makes every one of them
the same aware UTC datetime, so a view reads the same from the log and from the read models.
:func:`plain` turns events' and states' values into what a JSON column gives back;
:func:`is_number` says which metric values are points of a series.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

import msgspec

__all__ = ["is_number", "plain", "to_utc"]


@overload
def to_utc(value: datetime | str) -> datetime: ...


@overload
def to_utc(value: None) -> None: ...


@overload
def to_utc(value: datetime | str | None) -> datetime | None: ...


def to_utc(value: datetime | str | None) -> datetime | None:
    """``value`` as an aware UTC datetime.

    A naive value is taken to be UTC (how wgstore stores times on SQLite); an aware one is
    converted (a Postgres session in another time zone returns ``+05:30`` times); ISO 8601
    text is parsed first; ``None`` stays ``None``.

    Raises:
        ValueError: ``value`` is text that is not an ISO 8601 time.
    """
    if value is None:
        return None
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def is_number(value: Any) -> bool:
    """True when ``value`` is a metric a chart draws: an int or a float, not a bool (a JSON
    ``true`` is no number)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def plain(value: Any) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, numbers, bool, None): exactly what a JSON
    column holding it reads back as, so rows and views built from the log equal those read from
    the read models. Dataclasses and structs become dicts, tuples and sets lists, keys text,
    datetimes ISO 8601 text, enums their values, bytes base64 text, and NaN or infinities
    ``None`` (JSON has no such numbers)."""
    return msgspec.json.decode(msgspec.json.encode(value))
