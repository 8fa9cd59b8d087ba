"""``wgstore events``: the log, for one group, one stream, one run or everything; ``--follow``.

``--run`` of an archived run (``wgstore archive``) prints its events from the archive's file
(:func:`~wgstore.projections.archived_views.read_archived_run`), decoded as the live log's are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    err_console,
    json_line,
    opened,
    out_console,
    parse_duration,
    parse_time,
    refuse_blank,
    resolve_group,
    resolve_run,
)
from wgstore.cli.errors import CliError
from wgstore.cli.render import event_json, event_line
from wgstore.events import EventStore, InvalidArgumentError, RecordedEvent, StoreUnavailableError
from wgstore.events.archive_log import archived_run_ids
from wgstore.events.streams import group_stream
from wgstore.projections import StreamNotFoundError, views
from wgstore.projections.archived_views import archived_events, read_archived_run
from wgstore.projections.follow import follow_events
from wgstore.projections.run_views import resolve_run_id

__all__ = ["check_types", "events_command", "run_streams"]

Filter = Callable[[RecordedEvent], bool]


check_types = views.check_event_types
"""The event types given, checked: :func:`wgstore.projections.views.check_event_types`."""


def run_streams(store: EventStore, run_id: str) -> set[str]:
    """:func:`wgstore.projections.views.run_streams` of the run ``run_id`` names (an id or a
    unique prefix); an unknown or ambiguous run is a usage problem."""
    try:
        return views.run_streams(store, resolve_run(store, run_id))
    except StreamNotFoundError as error:
        raise UsageProblem(str(error)) from None


def _archived_run(store: EventStore, run: str) -> str | None:
    """The id of the archived run ``run`` names (an id or a unique prefix, live runs
    included), None when it names a live one."""
    try:
        run_id = resolve_run_id(store, run, archived=True)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None
    return run_id if run_id in archived_run_ids(store) else None


def _emit(records: Iterable[RecordedEvent], keep: Filter, as_json: bool) -> int:
    console = None if as_json else out_console()
    count = 0
    for record in records:
        if not keep(record):
            continue
        count += 1
        if console is None:
            typer.echo(json_line(event_json(record)))
        else:
            console.print(event_line(record), soft_wrap=True)
    return count


def events_command(
    group_arg: Annotated[
        str | None,
        typer.Argument(metavar="GROUP", help="A worker group id or unique prefix (like --group)."),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="A worker group id or unique prefix.")
    ] = None,
    stream: Annotated[
        str | None, typer.Option("--stream", "-s", help="One stream id, e.g. run-42.")
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            "-r",
            help="A run (an id or a unique prefix): its run stream and every group started for it.",
        ),
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", help="Only events of this type (repeat for more)."),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="From this time: ISO 8601 (UTC if no zone) or 10m, 2h, 3d.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Up to this time (same forms as --since).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events as they arrive.")
    ] = False,
    stop_after: Annotated[
        str | None,
        typer.Option(help="With --follow: stop after this long (e.g. 30s); default: Ctrl-C."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Show the log: a worker group, a stream, a run, or everything, oldest first."""
    if group_arg is not None and group is not None:
        raise UsageProblem("give the group once: as GROUP or as --group")
    group = group if group_arg is None else group_arg
    refuse_blank(group=group, stream=stream, run=run)
    chosen = [
        name for name, value in (("--group", group), ("--stream", stream), ("--run", run)) if value
    ]
    if len(chosen) > 1:
        raise UsageProblem(f"give one of {', '.join(chosen)}, not several")
    if until and follow:
        raise UsageProblem("--until and --follow contradict each other; drop one")
    if stop_after and not follow:
        raise UsageProblem("--stop-after only makes sense with --follow")
    start: datetime | None = parse_time(since) if since else None
    end: datetime | None = parse_time(until) if until else None
    if start and end and start > end:
        raise UsageProblem(f"--since ({since}) is after --until ({until})")
    limit_s = parse_duration(stop_after).total_seconds() if stop_after else None

    def keep(record: RecordedEvent) -> bool:
        if start is not None and record.recorded_at < start:
            return False
        return end is None or record.recorded_at <= end

    with opened(url) as store:
        type_names = check_types(list(types or []), store)
        streams: set[str] | None = None
        if group:
            streams = {group_stream(resolve_group(store, group))}
        elif stream:
            if store.stream_version(stream) == 0 and not follow:
                raise UsageProblem(
                    f"no stream {stream!r} in the log; `wgstore events` lists every stream's events"
                )
            streams = {stream}
        archived = _archived_run(store, run) if run else None
        head = store.head()
        stored: Iterable[RecordedEvent]
        if archived is not None:
            try:
                found = read_archived_run(store, archived)
            except (ValueError, StoreUnavailableError) as error:
                raise CliError(
                    f"run {archived} is archived, and its file cannot be read: {error}"
                ) from None
            streams = {r.stream_id for r in found.records}  # (none takes events until restored)
            stored = archived_events(found, type_names)
        else:
            if run:
                streams = run_streams(store, run)
            stored = views.stored_events(store, streams, type_names, head)
        shown = _emit(stored, keep, as_json)
        if not shown and not as_json and not follow:
            filtered = streams is not None or type_names or start or end
            err_console().print("no events match" if filtered else "the log is empty")
        if follow:
            fresh = follow_events(
                store, head, streams=streams, types=type_names, stop_after_s=limit_s
            )
            _emit(fresh, keep, as_json)
