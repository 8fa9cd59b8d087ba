"""``wgstore report GROUP -o timeline.html``: one self-contained HTML page about a worker group.

The data is :func:`wgstore.projections.timeline.timeline_data`; the page is the template
``templates/report.html`` (package data) with that data embedded as JSON. It needs no network: a
small inline script draws the SVG (lifecycle phases on a time axis, a lane per worker with its status over time, errors marked
where they happened, and one chart per reported metric, by report index). Every time on the
page is when the store recorded the event, so one clock orders everything.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    err_console,
    json_default,
    opened,
    resolve_group,
)
from wgstore.projections.errors import StreamNotFoundError
from wgstore.projections.timeline import timeline_data

__all__ = ["render_html", "report_command"]


def _fact(name: str, value: Any) -> str:
    return f"<dt>{html.escape(name)}</dt><dd>{value}</dd>"


def render_html(data: dict[str, Any]) -> str:
    """The report page for ``data`` (from :func:`~wgstore.projections.timeline.timeline_data`), with nothing to download."""
    group = data["group"]
    esc = html.escape
    status = f'<span class="badge {esc(group["status"])}">{esc(group["status"])}</span>'
    if group["outcome"]:
        status += f' <span class="badge {esc(group["outcome"])}">{esc(group["outcome"])}</span>'
    resources = ", ".join(f"{k}={v:g}" for k, v in group["resources_per_worker"].items())
    duration = (data["t1"] - data["t0"]) / 1000.0
    facts = "".join(
        [
            _fact("status", status),
            _fact("run", f"{esc(group['run_id'])} (attempt {group['attempt']})"),
            _fact(
                "train_fn",
                f"<code>{esc(group['train_fn'])}</code> "
                f"<code>{esc(json.dumps(group['train_fn_config'], sort_keys=True))}</code>",
            ),
            _fact("workers", f"{group['num_workers']} x {{{esc(resources)}}}"),
            _fact(
                "recorded",
                f"{esc(group['requested_at'])} to {esc(group['updated_at'])} ({duration:.2f} s)",
            ),
            _fact(
                "events",
                f"{group['version']}; {group['polls_total']} polls, {group['reports_total']} reports",
            ),
        ]
        + ([_fact("shutdown", esc(group["shutdown_reason"]))] if group["shutdown_reason"] else [])
    )
    errors = []
    failure = data["start_failure"]
    if failure:
        errors.append(
            f'<div class="error-box"><b>start failed at stage {esc(failure["stage"])}:</b> '
            f"{esc(failure['type'])}: {esc(failure['message'])}"
            + (f"<pre>{esc(failure['traceback'])}</pre>" if failure["traceback"] else "")
            + "</div>"
        )
    for worker in data["workers"]:
        for error in worker["errors"]:
            errors.append(
                f'<div class="error-box"><b>{esc(worker["label"])}</b> '
                f"(poll #{error['poll_seq']}): {esc(error['type'])}: {esc(error['message'])}"
                + (f"<pre>{esc(error['traceback'])}</pre>" if error["traceback"] else "")
                + "</div>"
            )
    rows = "".join(
        f"<tr><td class=muted>v{e['version']}</td><td><code>{esc(e['time'])}</code></td>"
        f"<td><b>{esc(e['type'])}</b></td><td>{esc(e['summary'])}</td></tr>"
        for e in data["events"]
    )
    shown, total = len(data["events"]), data["events_total"]
    omitted = (
        f"{total} events"
        if shown == total
        else f"{total} events (the first and last {shown // 2} shown)"
    )
    payload = json.dumps(data, default=json_default, sort_keys=True).replace("</", "<\\/")
    fills = {
        "title": esc(f"wgstore: worker group {group['group_id']}"),
        "group_id": esc(group["group_id"]),
        "facts": facts,
        "errors": "".join(errors),
        "omitted": omitted,
        "rows": rows,
        "payload": payload,
    }
    # One pass, so a value that happens to contain "@@name@@" is left as it is.
    return re.sub(r"@@(\w+)@@", lambda match: fills[match.group(1)], _template())


def _template() -> str:
    """The page (its CSS and script inline), shipped as package data: templates/report.html."""
    return (resources.files("wgstore.cli") / "templates" / "report.html").read_text("utf-8")


def report_command(
    group: Annotated[str, typer.Argument(help="A worker group id or a unique prefix of one.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path(
        "timeline.html"
    ),
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Write one self-contained HTML page: lifecycle, a lane per worker, errors, metrics."""
    if not output.parent.exists():
        raise UsageProblem(f"cannot write {output}: the folder {output.parent} does not exist")
    with opened(url) as store:
        group_id = resolve_group(store, group)
        try:
            data = timeline_data(store, group_id)
        except StreamNotFoundError as error:
            raise UsageProblem(str(error)) from None
    output.write_text(render_html(data), encoding="utf-8")
    err_console().print(f"wrote {output} (worker group {group_id}); open it in a browser")
