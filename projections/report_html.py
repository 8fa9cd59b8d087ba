"""The HTML parts of the report pages (``wgstore report``), from their timeline data.

:func:`group_page_parts` and :func:`run_page_parts` turn
:func:`~wgstore.projections.timeline.timeline_data` and
:func:`~wgstore.projections.timeline.run_timeline_data` into the escaped fragments a page
template names (``@@facts@@``, ``@@rows@@``, ``@@payload@@``, ...); :func:`fill` puts them into
a template. Pure: the templates themselves are package data of :mod:`wgstore.cli`.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from wgstore.projections.metric_series import chart_series
from wgstore.projections.rows import RunInfo
from wgstore.projections.run_facts import run_error_text, sizes_note, workers_size
from wgstore.projections.text import format_time, json_default

__all__ = ["fill", "group_page_parts", "run_page_parts"]

_SLOT = re.compile(r"@@(\w+)@@")


def fill(template: str, parts: Mapping[str, str]) -> str:
    """``template`` with each ``@@name@@`` replaced by ``parts[name]``, in one pass (a part that
    happens to contain ``@@name@@`` is left as it is).

    Raises:
        KeyError: the template names a part that ``parts`` does not hold.
    """
    return _SLOT.sub(lambda match: parts[match.group(1)], template)


def _fact(name: str, value: Any) -> str:
    return f"<dt>{html.escape(name)}</dt><dd>{value}</dd>"


def _badge(value: str | None) -> str:
    if not value:
        return ""
    return f'<span class="badge {html.escape(value)}">{html.escape(value)}</span>'


def _budget(used: int | None, limit: int | None) -> str:
    return f"{used} of {'unlimited' if limit is None or limit < 0 else limit}"


def _decision_text(decision: Mapping[str, Any]) -> str:
    esc = html.escape
    return (
        f"{_badge(decision['decision'])} {esc(decision['failure_kind'])} failure "
        f"{_budget(decision['failures_so_far'], decision['limit'])}"
        + (f" <span class=muted>({esc(decision['reason'])})</span>" if decision["reason"] else "")
    )


def _checkpoint_text(committed: str | None, at: datetime | str | None, reported: str | None) -> str:
    """The committed checkpoint of a run or an attempt, when it was committed, and the latest
    one a rank reported when that is another (not every rank reported it: not committed)."""
    esc = html.escape
    text = f"<code>{esc(committed or '-')}</code>"
    if committed and at:
        shown = at if isinstance(at, str) else format_time(at)
        text += f' <span class="muted">committed {esc(shown)}</span>'
    if reported and reported != committed:
        text += (
            f'<br><span class="muted uncommitted">reported, not by every rank (not committed): '
            f"<code>{esc(reported)}</code></span>"
        )
    return text


def _error_box(title: str, error: Mapping[str, Any]) -> str:
    esc = html.escape
    return (
        f'<div class="error-box">{title}{esc(error["type"])}: {esc(error["message"])}'
        + (f"<pre>{esc(error['traceback'])}</pre>" if error["traceback"] else "")
        + "</div>"
    )


def _events_part(data: Mapping[str, Any], *, with_stream: bool) -> dict[str, str]:
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
    return {"rows": rows, "omitted": omitted, "payload": payload}


def _group_facts(data: Mapping[str, Any]) -> str:
    group = data["group"]
    esc = html.escape
    status = f'<span class="badge {esc(group["status"])}">{esc(group["status"])}</span>'
    if group["outcome"]:
        status += f' <span class="badge {esc(group["outcome"])}">{esc(group["outcome"])}</span>'
    resources = ", ".join(f"{k}={v:g}" for k, v in group["resources_per_worker"].items())
    duration = (data["t1"] - data["t0"]) / 1000.0
    return "".join(
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
            _fact("checkpoint", _checkpoint_of(group)),
        ]
        + ([_fact("shutdown", esc(group["shutdown_reason"]))] if group["shutdown_reason"] else [])
    )


def group_page_parts(data: Mapping[str, Any]) -> dict[str, str]:
    """The parts of a worker group's page (``report.html``) for ``data`` (from
    :func:`~wgstore.projections.timeline.timeline_data`): title, facts, errors, events; the
    payload's ``metrics`` are the charts'
    (:func:`~wgstore.projections.metric_series.chart_series`: each point at the step the rank
    reported, else at its report index)."""
    group = data["group"]
    esc = html.escape
    errors = []
    failure = data["start_failure"]
    if failure:
        errors.append(
            _error_box(f"<b>start failed at stage {esc(failure['stage'])}:</b> ", failure)
        )
    for worker in data["workers"]:
        for error in worker["errors"]:
            title = f"<b>{esc(worker['label'])}</b> (poll #{error['poll_seq']}): "
            errors.append(_error_box(title, error))
    charted = {**data, "metrics": chart_series([(group["attempt"] or 1, data["metrics"])])}
    return {
        "title": esc(f"wgstore: worker group {group['group_id']}"),
        "group_id": esc(group["group_id"]),
        "facts": _group_facts(data),
        "errors": "".join(errors),
        **_events_part(charted, with_stream=False),
    }


def _run_facts(run: RunInfo) -> str:
    esc = html.escape
    state = _badge(run.status)
    if run.controller_state and run.controller_state != run.status:
        state += f' <span class="muted">controller {esc(run.controller_state)}</span>'
    if run.orphaned:
        state += " " + _badge("ORPHANED")
    facts = [
        _fact("state", state),
        _fact("name", esc(run.name or "")),
        _fact("source", esc(run.source or "")),
        _fact("attempts", str(run.attempts)),
        _fact(
            "failures",
            f"worker group {_budget(run.worker_group_failures, run.max_failures)}, "
            f"start {_budget(run.start_failures, run.controller_failure_limit)}, "
            f"preemption {_budget(run.preemption_failures, run.max_preemption_failures)}",
        ),
        _fact(
            "checkpoint",
            _checkpoint_text(
                run.latest_checkpoint, run.checkpoint_committed_at, run.latest_reported_checkpoint
            ),
        ),
        _fact("created", esc(format_time(run.created_at))),
    ]
    if run.train_fn:
        facts.append(_fact("train_fn", f"<code>{esc(run.train_fn)}</code>"))
    if run.num_workers is not None:
        facts.append(_fact("workers", esc(workers_size(run) + sizes_note(run))))
    if run.ended_at:
        facts.append(_fact("ended", esc(format_time(run.ended_at))))
    if run.abort_reason:
        facts.append(_fact("aborted", esc(run.abort_reason)))
    if run.ray:
        facts.append(_fact("ray", f"<code>{esc(json.dumps(run.ray, sort_keys=True))}</code>"))
    return "".join(facts)


def _attempt_rows(data: Mapping[str, Any]) -> str:
    esc = html.escape
    return "".join(
        f"<tr class=attempt-row><td>{a['number']}</td><td><code>{esc(a['group_id'])}</code></td>"
        f"<td>{'' if a.get('num_workers') is None else a['num_workers']}</td>"
        f"<td>{_badge(a['status'] or 'NO EVENTS')} {_badge(a['outcome'])}</td>"
        f"<td>{_checkpoint_of(a)}</td>"
        f"<td>{esc(a['error'] or '')}</td>"
        f"<td>{'<br>'.join(_decision_text(d) for d in _decisions_of(data, a['group_id']))}</td></tr>"
        for a in data["attempts"]
    )


def _checkpoint_of(item: Mapping[str, Any]) -> str:
    """:func:`_checkpoint_text` of a group (``timeline_data``'s ``group``) or an attempt's lane
    (``run_timeline_data``'s ``attempts``)."""
    return _checkpoint_text(
        item.get("latest_checkpoint"),
        item.get("checkpoint_committed_at"),
        item.get("latest_reported_checkpoint"),
    )


def _decisions_of(data: Mapping[str, Any], group_id: str) -> list[Mapping[str, Any]]:
    return [d for d in data["decisions"] if d["group_id"] == group_id]


def run_page_parts(data: Mapping[str, Any]) -> dict[str, str]:
    """The parts of a run's page (``run_report.html``) for ``data`` (from
    :func:`~wgstore.projections.timeline.run_timeline_data`): title, facts, errors, attempts
    with their failures and decisions, events."""
    run: RunInfo = data["run"]
    esc = html.escape
    errors = []
    text = run_error_text(run)
    if run.error and text:
        ranks = "".join(
            f"<br>rank {f.world_rank}: {esc(f.type)}: {esc(f.message)}"
            for f in run.failed_ranks
            if not text.startswith(f"rank {f.world_rank}: ")
        )
        whole = (
            ""
            if run.error in text
            else f"<details><summary>the run's whole error</summary><pre>{esc(run.error)}</pre>"
            "</details>"
        )
        errors.append(f'<div class="error-box"><b>run errored:</b> {esc(text)}{ranks}{whole}</div>')
    return {
        "title": esc(f"wgstore: run {run.run_id}"),
        "run_id": esc(run.run_id),
        "facts": _run_facts(run),
        "errors": "".join(errors),
        "attempts": _attempt_rows(data),
        **_events_part(data, with_stream=True),
    }
