"""Events as a line of Rich markup (colour per type); the text itself is :mod:`wgstore.projections.text`."""

from __future__ import annotations

from wgstore.events import RecordedEvent
from wgstore.projections.text import describe, event_json, format_time, metrics_text

__all__ = ["TYPE_STYLES", "describe", "event_json", "event_line", "metrics_text"]

TYPE_STYLES = {
    "WorkerGroupStartFailed": "bold red",
    "RunErrored": "bold red",
    "RunAborted": "yellow",
    "WorkerGroupShutdownRequested": "yellow",
    "WorkerGroupShutDown": "yellow",
    "WorkerGroupStarted": "green",
    "TrainingLaunched": "green",
    "RunFinished": "green",
    "WorkerReported": "cyan",
    "WorkerGroupPolled": "blue",
}


def event_line(record: RecordedEvent) -> str:
    """One event as a line of Rich markup: position, time, stream, version, type, summary."""
    from rich.markup import escape

    style = TYPE_STYLES.get(record.type, "bold")
    return (
        f"[dim]{record.position:>7}[/]  {format_time(record.recorded_at)}  "
        f"{escape(record.stream_id)} [dim]v{record.version}[/]  "
        f"[{style}]{record.type}[/]  {escape(describe(record.event))}"
    )
