"""The recorder's own fold of each stream it writes: no event its readers would refuse is written.

Ray Train calls the recorder's hooks in an order wgstore does not control, and a Ray release may
change it, add a state, or hand a hook a shape wgstore did not foresee. Whatever happens, every
stream the recorder writes must stay readable by ``wgstore runs``, ``report``, ``serve`` and
``verify`` (issue 40: an elastic run's stream once began with ``ControllerStateChanged``, and
every reader refused the run). So the recorder folds each event with the readers' own fold
(:func:`~wgstore.projections.state.evolve`, :func:`~wgstore.projections.run_state.evolve_run`)
before it hands it to the writer, and an event the fold refuses is not written: the hook that
made it is reported in a ``RecordingFailed`` on the run stream instead. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from wgstore.events.records import NewEvent, RecordedEvent
from wgstore.events.registry import REGISTRY
from wgstore.projections.errors import ProjectionError

__all__ = ["StreamGuard"]

Fold = Callable[[Any, RecordedEvent], Any]


class StreamGuard:
    """Folds the events a recorder writes to one stream, and lets through only those the fold
    takes.

    Args:
        stream_id: the stream.
        fold: the readers' fold of such a stream (``evolve`` or ``evolve_run``).
    """

    def __init__(self, stream_id: str, fold: Fold) -> None:
        self.stream_id = stream_id
        self._fold = fold
        self._state: Any = None
        self._version = 0

    @property
    def state(self) -> Any:
        """The stream's state after every event admitted so far (``None`` before the first)."""
        return self._state

    def fold_stored(self, records: Sequence[RecordedEvent]) -> None:
        """Start from the stream as stored: fold ``records`` (its events from version 1)."""
        for record in records:
            self._state = self._fold(self._state, record)
        self._version = len(records)

    def admit(self, events: Sequence[NewEvent]) -> tuple[list[NewEvent], list[str]]:
        """``(admitted, refused)``: the events the fold takes, in order, and why each other one
        was refused (its type and the fold's error). A refused event changes nothing."""
        admitted: list[NewEvent] = []
        refused: list[str] = []
        now = datetime.now(UTC)
        for new in events:
            name = REGISTRY.by_class(type(new.event)).name
            record = RecordedEvent(
                position=self._version + 1,
                stream_id=self.stream_id,
                version=self._version + 1,
                event_id=new.event_id or uuid.uuid4(),
                type=name,
                schema_version=1,
                event=new.event,
                metadata=new.metadata or {},
                recorded_at=now,
                hash="",
            )
            try:
                state = self._fold(self._state, record)
            except ProjectionError as error:
                refused.append(f"{name}: {error}")
                continue
            self._state = state
            self._version += 1
            admitted.append(new)
        return admitted, refused
