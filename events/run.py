"""Event types of the stream ``run-<run_id>``: the controller's view of a training run."""

from __future__ import annotations

from dataclasses import dataclass

from wgstore.events.registry import event_type
from wgstore.events.streams import run_stream
from wgstore.events.worker_group import ErrorInfo

__all__ = [
    "ControllerStateChanged",
    "FailureDecisionMade",
    "RunAborted",
    "RunCreated",
    "RunErrored",
    "RunFinished",
    "stream_id_for_run",
]


stream_id_for_run = run_stream
"""The stream of a run: :func:`wgstore.events.streams.run_stream` (kept name)."""


@event_type("RunCreated", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunCreated:
    """A controller started a run."""

    run_id: str
    name: str = ""


@event_type("ControllerStateChanged", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStateChanged:
    """The controller moved between states (Ray Train's names: SCHEDULING, RUNNING, ...)."""

    from_state: str
    to_state: str
    reason: str = ""
    group_id: str | None = None


@event_type("FailureDecisionMade", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class FailureDecisionMade:
    """The failure policy decided what to do about a failed group: RETRY, RAISE or NOOP."""

    decision: str
    group_id: str
    reason: str = ""
    failures_so_far: int = 0


@event_type("RunFinished", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished:
    """Training finished on every worker without error."""

    group_id: str | None = None


@event_type("RunErrored", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunErrored:
    """The run ended with an error."""

    error: ErrorInfo
    group_id: str | None = None


@event_type("RunAborted", version=1)
@dataclass(frozen=True, slots=True, kw_only=True)
class RunAborted:
    """The run was stopped by a person or a signal before it finished."""

    reason: str
