"""``wgstore report GROUP -o timeline.html``: one self-contained HTML page about a worker group;
``wgstore report --run RUN``: one about a run, its attempts on one timeline.

The data is :func:`wgstore.projections.timeline.timeline_data`; the page is the template
``templates/report.html`` (package data) filled with its parts
(:func:`~wgstore.projections.report_html.group_page_parts`, the data embedded as JSON). It
needs no network: a small inline script draws the SVG (lifecycle phases on a time axis, a lane
per worker with its status over time, errors marked where they happened, and one chart per
reported metric, against the step each rank reported, else its report index). Every time on the page is when the store recorded the
event, so one clock orders everything.

The run page (:func:`~wgstore.projections.timeline.run_timeline_data`, template
``templates/run_report.html``, :func:`~wgstore.projections.report_html.run_page_parts`) draws
the controller's states, one lane per attempt with its phases and every failure, and each
decision of the failure policy (RETRY / RAISE) where it was taken; tables list the attempts
with their failure and decision, and the events.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    err_console,
    opened,
    resolve_live_or_archived_group,
)
from wgstore.events import EventStore, InvalidArgumentError
from wgstore.events.archive_log import archived_run_ids
from wgstore.events.streams import group_stream
from wgstore.projections.archived_views import archived_run_timeline
from wgstore.projections.archiving import archived_stream_records
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.report_html import fill, group_page_parts, run_page_parts
from wgstore.projections.run_views import resolve_run_id
from wgstore.projections.timeline import group_timeline, run_timeline_data

__all__ = ["render_html", "render_run_html", "report_command"]


def render_html(data: Mapping[str, Any]) -> str:
    """The report page for ``data`` (from :func:`~wgstore.projections.timeline.timeline_data`), with nothing to download."""
    return _page("report.html", group_page_parts(data))


def render_run_html(data: Mapping[str, Any]) -> str:
    """The report page of a run for ``data`` (from
    :func:`~wgstore.projections.timeline.run_timeline_data`), with nothing to download."""
    return _page("run_report.html", run_page_parts(data))


def _page(name: str, parts: Mapping[str, str]) -> str:
    # Both pages share their base CSS and their SVG helpers (report_common.css / .js).
    shared = {
        "common_css": _template("report_common.css").rstrip("\n"),
        "common_js": _template("report_common.js").rstrip("\n"),
    }
    return fill(_template(name), {**shared, **parts})


def _template(name: str) -> str:
    """A page or a shared part of one, shipped as package data: templates/<name>."""
    return (resources.files("wgstore.cli") / "templates" / name).read_text("utf-8")


def report_command(
    group: Annotated[
        str | None, typer.Argument(help="A worker group id or a unique prefix of one.")
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run", "-r", help="Report on this run (an id or a unique prefix) instead of a group."
        ),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path(
        "timeline.html"
    ),
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Write one self-contained HTML page: lifecycle, a lane per worker, errors, metrics.

    With --run, the run's attempts on one timeline, with each failure and each decision.
    """
    if (group is None) == (run is None):
        raise UsageProblem("give a worker group id, or --run RUN_ID (not both)")
    if not output.parent.exists():
        raise UsageProblem(f"cannot write {output}: the folder {output.parent} does not exist")
    with opened(url) as store:
        if run is not None:
            run_id = _resolve_run(store, run)  # an unknown id: the command line is wrong (2)
            archived = run_id in archived_run_ids(store)
            try:
                data = (
                    archived_run_timeline(store, run_id)
                    if archived
                    else run_timeline_data(store, run_id)
                )
                page = render_run_html(data)
            except (StreamNotFoundError, ProjectionError, ValueError) as error:  # the log is (1)
                raise CliError(f"run {run_id}: {error}") from None
            what = f"{'archived ' if archived else ''}run {run_id}"
        else:
            assert group is not None
            group_id, archived = resolve_live_or_archived_group(store, group)
            records = None
            if archived:
                try:
                    records = archived_stream_records(store, group_stream(group_id))
                except ValueError as error:
                    raise CliError(f"worker group {group_id}: {error}") from None
            try:
                page = render_html(group_timeline(store, group_id, records).data)
            except StreamNotFoundError as error:
                raise UsageProblem(str(error)) from None
            what = f"{'archived ' if records is not None else ''}worker group {group_id}"
    output.write_text(page, encoding="utf-8")
    err_console().print(f"wrote {output} ({what}); open it in a browser")


def _resolve_run(store: EventStore, run: str) -> str:
    """A live or archived run's full id (:func:`~wgstore.projections.run_views.resolve_run_id`
    with ``archived``); a usage problem when none, or more than one, matches."""
    try:
        return resolve_run_id(store, run, archived=True)
    except InvalidArgumentError as error:
        raise UsageProblem(str(error)) from None
