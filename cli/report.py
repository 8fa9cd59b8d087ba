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
    resolve_group,
    resolve_run,
)
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.report_html import fill, group_page_parts, run_page_parts
from wgstore.projections.timeline import run_timeline_data, timeline_data

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
            run_id = resolve_run(store, run)  # an unknown id: the command line is wrong (2)
            try:
                page = render_run_html(run_timeline_data(store, run_id))
            except (StreamNotFoundError, ProjectionError) as error:  # the log is (1)
                raise CliError(f"run {run_id}: {error}") from None
            what = f"run {run_id}"
        else:
            assert group is not None
            group_id = resolve_group(store, group)
            try:
                page = render_html(timeline_data(store, group_id))
            except StreamNotFoundError as error:
                raise UsageProblem(str(error)) from None
            what = f"worker group {group_id}"
    output.write_text(page, encoding="utf-8")
    err_console().print(f"wrote {output} ({what}); open it in a browser")
