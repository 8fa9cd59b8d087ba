"""Times and durations as people type them (``--since 2h``, ``?since=2026-12-01T14:00``), read
the same way by the CLI and ``wgstore serve``. Pure: ``now`` is passed in.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from wgstore.events import InvalidArgumentError

__all__ = ["parse_duration", "parse_time"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class _TooLong(InvalidArgumentError):
    """A duration past what ``timedelta`` holds."""


def parse_duration(text: str) -> timedelta:
    """Parse a duration such as ``90s``, ``10m``, ``2h``, ``1h30m``, ``3d`` or ``1w``.

    Raises:
        InvalidArgumentError: not a duration, or too long a one.
    """
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise InvalidArgumentError(
            f"{text!r} is not a duration; use a number and a unit, e.g. 30s, 10m, 2h, 1h30m, 3d"
        )
    try:
        return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts))
    except OverflowError:
        raise _TooLong(
            f"{text!r} is too long a duration (the limit is 999999999 days); use a smaller one"
        ) from None


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """Parse a moment: ISO 8601 (naive means UTC), ``now``, or a time ago such as ``10m``/``2h``.

    Returns:
        A timezone-aware UTC datetime.

    Raises:
        InvalidArgumentError: neither an ISO time nor a time ago, or one outside the years 1 to
            9999.
    """
    now = now or datetime.now(UTC)
    value = text.strip()
    if value.lower() == "now":
        return now
    if _DURATION_PART.match(value.lower().removesuffix(" ago")):
        try:
            ago = parse_duration(value.lower().removesuffix("ago").strip())
        except _TooLong:
            raise
        except InvalidArgumentError:
            pass  # not a duration after all: maybe an ISO time
        else:
            try:
                return now - ago
            except OverflowError:
                raise InvalidArgumentError(
                    f"{text!r} reaches back before the year 1; use a shorter time ago"
                ) from None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            f"{text!r} is not a time; use ISO 8601 (2024-05-01T14:30:00Z, times without a zone "
            "are UTC) or a time ago such as 10m, 2h, 3d"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise InvalidArgumentError(
            f"{text!r} is outside the years 1 to 9999 once converted to UTC; give a time "
            "within them"
        ) from None
