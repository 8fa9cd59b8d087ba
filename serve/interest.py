"""What a live page watches: the part of the log whose appends it is told about.

A page's ``/api/stream`` says it with ``watch`` parameters, each one of:

- ``all``: every append (the log page).
- ``runs``: every append to a run or worker group stream (the runs list: a run's summary is
  folded from those streams alone; its lease, in its own table, and the clock move without an
  append either way).
- ``run:ID``: the run's stream ``run-ID``, and every ``WorkerGroupStartRequested`` that names run
  ``ID``: a new attempt of the run. A recorded Ray Train run's attempt starts on its group's
  stream before the run's stream names it; a wgstore run's too, when the start fails first.
- ``group:ID``: the worker group's stream ``worker-group-ID``.

A run page watches ``run:`` its run and ``group:`` each of its attempts; a group page ``group:``
its group. No ``watch`` at all means ``all`` (a script's ``curl .../api/stream``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from wgstore.events import InvalidArgumentError
from wgstore.events.stored_names import type_name
from wgstore.events.streams import RESERVED_PREFIXES, group_stream, run_stream
from wgstore.events.worker_group import WorkerGroupStartRequested

__all__ = ["EVERYTHING", "MAX_WATCHED", "NEW_ATTEMPT", "Interest"]

NEW_ATTEMPT = type_name(WorkerGroupStartRequested)
"""The event that starts a run's attempt; it names its run (``run_id``)."""
MAX_WATCHED = 500
"""At most this many ``watch`` values a stream (a browser's pages together ask for far fewer; a
page with more attempts than it can name watches ``runs``)."""
_IGNORED = frozenset({"token"})
"""Query parameters a stream may carry besides ``watch`` (the token, read by the guard)."""


@dataclass(frozen=True, slots=True)
class Interest:
    """The appends a subscriber is told about (hashable: pages with equal interests share their
    messages)."""

    everything: bool = False
    """Every append."""
    wgstore_streams: bool = False
    """Every append to a run or worker group stream (``watch=runs``)."""
    streams: frozenset[str] = frozenset()
    """Appends to these streams."""
    runs: frozenset[str] = frozenset()
    """``WorkerGroupStartRequested`` events naming these runs (their new attempts)."""

    @classmethod
    def parse(cls, params: Iterable[tuple[str, str]]) -> Interest:
        """The interest of a stream's query (its ``(name, value)`` pairs), in its simplest form.

        Raises:
            InvalidArgumentError: another parameter, a ``watch`` value of no known form, or
                more than :data:`MAX_WATCHED` of them.
        """
        watched: list[str] = []
        for name, value in params:
            if name == "watch":
                watched.append(value)
            elif name not in _IGNORED:
                raise InvalidArgumentError(
                    f"unknown parameter {name!r}; /api/stream takes watch=all, watch=runs, "
                    "watch=run:ID and watch=group:ID"
                )
        if len(watched) > MAX_WATCHED:
            raise InvalidArgumentError(
                f"{len(watched)} watch values; at most {MAX_WATCHED} (watch=runs covers every run)"
            )
        return cls.of(watched) if watched else EVERYTHING

    @classmethod
    def of(cls, watched: Iterable[str]) -> Interest:
        """The interest of ``watch`` values (see the module), in its simplest form: ``all``
        covers everything, ``runs`` every ``run:`` and ``group:``.

        Raises:
            InvalidArgumentError: a value of no known form (named).
        """
        streams: set[str] = set()
        runs: set[str] = set()
        wide = set()
        for value in watched:
            kind, colon, ident = value.partition(":")
            if not colon and kind in ("all", "runs"):
                wide.add(kind)
            elif colon and ident and kind == "run":
                streams.add(run_stream(ident))
                runs.add(ident)
            elif colon and ident and kind == "group":
                streams.add(group_stream(ident))
            else:
                raise InvalidArgumentError(
                    f"watch={value!r} is not all, runs, run:ID or group:ID (an ID is not empty)"
                )
        if "all" in wide:
            return EVERYTHING
        if "runs" in wide:
            return cls(wgstore_streams=True)
        return cls(streams=frozenset(streams), runs=frozenset(runs))

    def concerns(self, stream_id: str, event_type: str, run_id: str | None) -> bool:
        """Whether an append (its stream, type and, for a new attempt, the run it names) is one
        this interest is told about."""
        return (
            self.everything
            or stream_id in self.streams
            or (self.wgstore_streams and stream_id.startswith(RESERVED_PREFIXES))
            or (event_type == NEW_ATTEMPT and run_id in self.runs)
        )


EVERYTHING = Interest(everything=True)
"""Every append: a stream that asks for nothing in particular."""
