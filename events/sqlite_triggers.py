"""The SQL of every trigger a SQLite store has (SQLite stores have no functions).

The runtime's one copy, which a fresh store is built from (:data:`TRIGGERS`, run by
``wgstore.migrations.fresh``); the migrations keep their own frozen copies (migrations are
history), and ``tests/migrations/test_catalog.py`` fails until the two agree.

- ``wg_events_no_update``, ``wg_events_no_delete``: stored events never change (revision
  ``0001_event_log``); a DELETE removes only a row an archive range covers
  (``0015_archive``: ``wgstore archive`` moved it to a verified archive file).
- ``wg_events_handed_out``: an INSERT must take the log's next position (or, for ``wgstore
  restore``, an archived one), an id in the one form writers store, an id and stream version
  not yet stored (``0012_handed_out_positions``, whose docstring says why each), and must not
  start an archived stream again (``0015_archive``).
"""

from __future__ import annotations

__all__ = [
    "ARCHIVED_MESSAGE",
    "HANDED_OUT",
    "HANDED_OUT_TRIGGER",
    "ID_MESSAGE",
    "IMMUTABLE_MESSAGE",
    "IMMUTABLE_TRIGGERS",
    "POSITION_MESSAGE",
    "STORED_MESSAGE",
    "TRIGGERS",
]

IMMUTABLE_MESSAGE = (
    "wg_events is append-only: stored events never change. "
    "Append a new event that corrects the old one instead."
)
ARCHIVED_MESSAGE = (
    "this stream is archived: its events left the live log (wgstore archive). Put them back "
    "with `wgstore restore RUN` before appending to it."
)


def _archived(row: str) -> str:
    """True when an archive range covers ``row``'s position (ranges never overlap: the one
    starting nearest below it is the only candidate, one probe of the primary key)."""
    return (
        "ifnull((SELECT last_position FROM wg_archive_ranges WHERE first_position <= "
        f"{row}.position ORDER BY first_position DESC LIMIT 1) >= {row}.position, 0)"
    )


IMMUTABLE_TRIGGERS = (
    f"""CREATE TRIGGER wg_events_no_update BEFORE UPDATE ON wg_events
        BEGIN SELECT RAISE(ABORT, '{IMMUTABLE_MESSAGE}'); END""",
    f"""CREATE TRIGGER wg_events_no_delete BEFORE DELETE ON wg_events
        WHEN NOT {_archived("OLD")}
        BEGIN SELECT RAISE(ABORT, '{IMMUTABLE_MESSAGE}'); END""",
)

HANDED_OUT = "wg_events_handed_out"
POSITION_MESSAGE = (
    "wg_events positions are handed out by the log: a new event goes right after the last "
    "one. Append through wgstore (EventStore.append)."
)
# The store reads "event_id" in SQLite's error as a duplicate id (DuplicateEventError, as the
# unique constraint's "UNIQUE constraint failed: wg_events.event_id"): only STORED_MESSAGE names it.
ID_MESSAGE = (
    "wg_events ids are UUIDs in lower-case hyphenated form, as str(uuid.UUID) writes them: "
    "another form reads as the same id as a stored one."
)
STORED_MESSAGE = (
    "wg_events already holds this event_id, or this version of the stream: each event is "
    "stored once (INSERT OR REPLACE would delete the stored one)."
)
# 8-4-4-4-12 lower-case hex digits: the form writers store (uuid7() and str(uuid.UUID) alike).
_ID_GLOB = "-".join("[0-9a-f]" * n for n in (8, 4, 4, 4, 12))
# Short-circuit: an append's row (the next position, a stream past its first version) pays
# for no probe of the archive's tables.
_BAD_POSITION = (
    "NEW.position IS NOT (SELECT coalesce(max(position), 0) + 1 FROM wg_events) "
    f"AND NOT {_archived('NEW')}"
)
_ARCHIVED_STREAM = (
    "NEW.stream_version = 1 AND EXISTS (SELECT 1 FROM wg_archive_streams WHERE stream_id = "
    "NEW.stream_id)"
)
_BAD_ID = f"NEW.event_id NOT GLOB '{_ID_GLOB}'"
_STORED = (
    "EXISTS (SELECT 1 FROM wg_events WHERE event_id = NEW.event_id) OR EXISTS (SELECT 1 FROM "
    "wg_events WHERE stream_id = NEW.stream_id AND stream_version = NEW.stream_version)"
)

# One trigger, one WHEN: the common row pays for one evaluation of the conditions (a probe of
# the position's index and one of each unique index); the body, which says which one failed,
# runs only for a refused row.
HANDED_OUT_TRIGGER = f"""
CREATE TRIGGER {HANDED_OUT} BEFORE INSERT ON wg_events
WHEN {_BAD_POSITION} OR {_BAD_ID} OR {_STORED} OR {_ARCHIVED_STREAM}
BEGIN
    SELECT RAISE(ABORT, '{POSITION_MESSAGE}') WHERE {_BAD_POSITION};
    SELECT RAISE(ABORT, '{ID_MESSAGE}') WHERE {_BAD_ID};
    SELECT RAISE(ABORT, '{ARCHIVED_MESSAGE}') WHERE {_ARCHIVED_STREAM};
    SELECT RAISE(ABORT, '{STORED_MESSAGE}');
END
"""

TRIGGERS = (*IMMUTABLE_TRIGGERS, HANDED_OUT_TRIGGER)
"""Every trigger of a SQLite store, in the order a fresh store makes them."""
