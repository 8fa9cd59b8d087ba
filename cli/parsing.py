"""Reading times and durations from the command line (``--json`` output: :mod:`wgstore.projections.text`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from wgstore.cli.errors import UsageProblem
from wgstore.events import InvalidArgumentError
from wgstore.projections import time_input
from wgstore.projections.text import json_default, json_line

__all__ = ["json_default", "json_line", "parse_duration", "parse_time"]


# ---------------------------------------------------------------------- time


def parse_duration(text: str) -> timedelta:
    """Parse a duration such as ``90s``, ``10m``, ``2h``, ``1h30m``, ``3d`` or ``1w``
    (:func:`wgstore.projections.time_input.parse_duration`).

    Raises:
        UsageProblem: not a duration.
    """
    try:
        return time_input.parse_duration(text)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """Parse a moment: ISO 8601 (naive means UTC), ``now``, or a time ago such as ``10m``/``2h``
    (:func:`wgstore.projections.time_input.parse_time`, which ``wgstore serve`` reads with too).

    Returns:
        A timezone-aware UTC datetime.

    Raises:
        UsageProblem: neither an ISO time nor a relative time.
    """
    try:
        return time_input.parse_time(text, now=now)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None
