"""The bench payload: one registered poll-like event type and the same fields as a dict."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from wgstore.events import event_type

EVENT_TYPE = "BenchPolled"


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchWorkerChange:
    """One worker whose status changed in a poll."""

    world_rank: int
    running: bool
    node_id: str
    pid: int
    error: str | None = None


@event_type(EVENT_TYPE, version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class BenchPolled:
    """A poll-like event (the shape of ``WorkerGroupPolled``), about 300 bytes of JSON."""

    poll_seq: int
    polled_at: datetime
    changes: tuple[BenchWorkerChange, ...] = ()
    unchanged_polls: int = 0
    unchanged_since: datetime | None = None


_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_event(seq: int) -> BenchPolled:
    """The wgstore side's event number ``seq``."""
    at = _T0 + timedelta(seconds=seq)
    changes = tuple(
        BenchWorkerChange(
            world_rank=rank,
            running=rank != 1,
            node_id=f"{rank:02d}c9f1a2b3d4e5f60718293a4b5c6d7e8f9",
            pid=40_000 + rank,
            error=None if rank != 1 else "RayActorError: worker died",
        )
        for rank in (0, 1)
    )
    return BenchPolled(
        poll_seq=seq, polled_at=at, changes=changes, unchanged_polls=7, unchanged_since=at
    )


def make_payload(seq: int) -> dict[str, Any]:
    """The plain side's payload for event ``seq``: the same fields as a dict."""
    result: dict[str, Any] = msgspec.to_builtins(make_event(seq))
    return result
