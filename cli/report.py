"""``wgstore report GROUP -o timeline.html``: one self-contained HTML page about a worker group;
``wgstore report --run RUN``: one about a run, its attempts on one timeline.

The data is :func:`wgstore.projections.timeline.timeline_data`; the page is the template
``templates/report.html`` (package data) with that data embedded as JSON. It needs no network: a
small inline script draws the SVG (lifecycle phases on a time axis, a lane per worker with its status over time, errors marked
where they happened, and one chart per reported metric, by report index). Every time on the
page is when the store recorded the event, so one clock orders everything.

The run page (:func:`~wgstore.projections.timeline.run_timeline_data`, template
``templates/run_report.html``) draws the controller's states, one lane per attempt with its
phases and every failure, and each decision of the failure policy (RETRY / RAISE) where it was
taken; tables list the attempts with their failure and decision, and the events.
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
    format_time,
    json_default,
    opened,
    resolve_group,
    resolve_run,
)
from wgstore.projections.errors import ProjectionError, StreamNotFoundError
from wgstore.projections.timeline import run_timeline_data, timeline_data

__all__ = ["render_html", "render_run_html", "report_command"]


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
            _fact("checkpoint", _checkpoint_text(group)),
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
    rows, omitted, payload = _events_part(data, with_stream=False)
    fills = {
        "title": esc(f"wgstore: worker group {group['group_id']}"),
        "group_id": esc(group["group_id"]),
        "facts": facts,
        "errors": "".join(errors),
        "omitted": omitted,
        "rows": rows,
        "payload": payload,
    }
    return _fill(fills, "report.html")


def _fill(fills: dict[str, str], name: str) -> str:
    # One pass, so a value that happens to contain "@@name@@" is left as it is. Both pages share
    # their base CSS and their SVG helpers (report_common.css / .js).
    shared = {
        "common_css": _template("report_common.css").rstrip("\n"),
        "common_js": _template("report_common.js").rstrip("\n"),
    }
    return re.sub(r"@@(\w+)@@", lambda match: {**shared, **fills}[match.group(1)], _template(name))


def _template(name: str = "report.html") -> str:
    """A page or a shared part of one, shipped as package data: templates/<name>."""
    return (resources.files("wgstore.cli") / "templates" / name).read_text("utf-8")


def _badge(value: str | None) -> str:
    if not value:
        return ""
    return f'<span class="badge {html.escape(value)}">{html.escape(value)}</span>'


def _budget(used: int, limit: int | None) -> str:
    return f"{used} of {'unlimited' if limit is None or limit < 0 else limit}"


def _decision_text(decision: dict[str, Any]) -> str:
    esc = html.escape
    return (
        f"{_badge(decision['decision'])} {esc(decision['failure_kind'])} failure "
        f"{_budget(decision['failures_so_far'], decision['limit'])}"
        + (f" <span class=muted>({esc(decision['reason'])})</span>" if decision["reason"] else "")
    )


def _checkpoint_text(item: dict[str, Any]) -> str:
    """The committed checkpoint of a run or an attempt, when it was committed, and the latest
    one a rank reported when that is another (not every rank reported it: not committed)."""
    esc = html.escape
    committed = item.get("latest_checkpoint")
    text = f"<code>{esc(committed or '-')}</code>"
    at = item.get("checkpoint_committed_at")
    if committed and at:
        shown = at if isinstance(at, str) else format_time(at)
        text += f' <span class="muted">committed {esc(shown)}</span>'
    reported = item.get("latest_reported_checkpoint")
    if reported and reported != committed:
        text += (
            f'<br><span class="muted uncommitted">reported, not by every rank (not committed): '
            f"<code>{esc(reported)}</code></span>"
        )
    return text


def render_run_html(data: dict[str, Any]) -> str:
    """The report page of a run for ``data`` (from
    :func:`~wgstore.projections.timeline.run_timeline_data`), with nothing to download."""
    run = data["run"]
    esc = html.escape
    state = _badge(run["status"])
    if run["controller_state"] and run["controller_state"] != run["status"]:
        state += f' <span class="muted">controller {esc(run["controller_state"])}</span>'
    if run["orphaned"]:
        state += " " + _badge("ORPHANED")
    facts = [
        _fact("state", state),
        _fact("name", esc(run["name"] or "")),
        _fact("source", esc(run["source"])),
        _fact("attempts", str(run["attempts"])),
        _fact(
            "failures",
            f"worker group {_budget(run['worker_group_failures'], run['max_failures'])}, "
            f"start {_budget(run['start_failures'], run['controller_failure_limit'])}, "
            f"preemption {_budget(run['preemption_failures'], run['max_preemption_failures'])}",
        ),
        _fact("checkpoint", _checkpoint_text(run)),
        _fact("created", esc(format_time(run["created_at"]))),
    ]
    if run["train_fn"]:
        facts.append(_fact("train_fn", f"<code>{esc(run['train_fn'])}</code>"))
    if run["ended_at"]:
        facts.append(_fact("ended", esc(format_time(run["ended_at"]))))
    if run["abort_reason"]:
        facts.append(_fact("aborted", esc(run["abort_reason"])))
    if run["ray"]:
        facts.append(_fact("ray", f"<code>{esc(json.dumps(run['ray'], sort_keys=True))}</code>"))
    errors = []
    if run["error"]:
        ranks = "".join(
            f"<br>rank {f['world_rank']}: {esc(f['type'])}: {esc(f['message'])}"
            for f in run["failed_ranks"] or []
        )
        errors.append(
            f'<div class="error-box"><b>run errored:</b> {esc(run["error"])}{ranks}</div>'
        )
    attempts = "".join(
        f"<tr class=attempt-row><td>{a['number']}</td><td><code>{esc(a['group_id'])}</code></td>"
        f"<td>{_badge(a['status'] or 'NO EVENTS')} {_badge(a['outcome'])}</td>"
        f"<td>{_checkpoint_text(a)}</td>"
        f"<td>{esc(a['error'] or '')}</td>"
        f"<td>{'<br>'.join(_decision_text(d) for d in _decisions_of(data, a['group_id']))}</td></tr>"
        for a in data["attempts"]
    )
    rows, omitted, payload = _events_part(data, with_stream=True)
    fills = {
        "title": esc(f"wgstore: run {run['run_id']}"),
        "run_id": esc(run["run_id"]),
        "facts": "".join(facts),
        "errors": "".join(errors),
        "attempts": attempts,
        "omitted": omitted,
        "rows": rows,
        "payload": payload,
    }
    return _fill(fills, "run_report.html")


def _decisions_of(data: dict[str, Any], group_id: str) -> list[dict[str, Any]]:
    return [d for d in data["decisions"] if d["group_id"] == group_id]


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
            try:
                run_id = resolve_run(store, run)
                page = render_run_html(run_timeline_data(store, run_id))
            except (StreamNotFoundError, ProjectionError) as error:
                raise UsageProblem(str(error)) from None
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


def _events_part(data: dict[str, Any], *, with_stream: bool) -> tuple[str, str, str]:
    """The events table's rows, its caption ("N events", or which are shown) and the page's
    JSON payload (safe inside ``<script>``), for both reports."""
    esc = html.escape
    rows = "".join(
        f"<tr><td class=muted>{esc(e['stream']) + ' ' if with_stream else ''}v{e['version']}</td>"
        f"<td><code>{esc(e['time'])}</code></td>"
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
    return rows, omitted, payload
