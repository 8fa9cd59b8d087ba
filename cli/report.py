"""``wgstore report GROUP -o timeline.html``: one self-contained HTML page about a worker group.

The page needs no network: the data is embedded as JSON, and a small inline script draws the
SVG (lifecycle phases on a time axis, a lane per worker with its status over time, errors marked
where they happened, and one chart per reported metric, by report index). Every time on the
page is when the store recorded the event, so one clock orders everything.
"""

from __future__ import annotations

import html
import json
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
)
from wgstore.cli.render import describe
from wgstore.events import EventStore, RecordedEvent
from wgstore.events.streams import group_stream
from wgstore.projections import WorkerGroupState, evolve

__all__ = ["build_report_data", "render_html", "report_command"]


def _ms(record: RecordedEvent) -> float:
    return record.recorded_at.timestamp() * 1000.0


class _Lanes:
    """Each worker's status over time, as segments, plus where its errors happened."""

    def __init__(self) -> None:
        self.segments: dict[int, list[dict[str, Any]]] = {}
        self.open: dict[int, dict[str, Any]] = {}
        self.errors: dict[int, list[dict[str, Any]]] = {}

    def switch(self, rank: int, status: str, t: float) -> None:
        current = self.open.get(rank)
        if current is not None:
            if current["status"] == status:
                return
            current["end"] = t
        segment = {"status": status, "start": t, "end": t, "open": True}
        self.segments.setdefault(rank, []).append(segment)
        self.open[rank] = segment

    def close_all(self, t: float, still_open: bool = False) -> None:
        for segment in self.open.values():
            segment["end"] = t
            segment["open"] = still_open
        if not still_open:
            self.open.clear()


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


MAX_EVENTS = 3000
"""The page lists at most this many events (the first and last halves) to stay small."""
MAX_POINTS = 2000
"""A metric series keeps at most this many points (evenly spaced, the last one always)."""


def _thin_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(events) <= MAX_EVENTS:
        return events
    half = MAX_EVENTS // 2
    return events[:half] + events[-half:]


def _thin(points: list[list[float]]) -> list[list[float]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    kept = [points[int(i * step)] for i in range(MAX_POINTS - 1)]
    return [*kept, points[-1]]


def build_report_data(store: EventStore, group_id: str) -> dict[str, Any]:
    """Everything the page shows about ``group_id``, as JSON-ready data (times in epoch ms)."""
    records = list(store.read_stream(group_stream(group_id)))
    state: WorkerGroupState | None = None
    phases: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    lanes = _Lanes()
    metrics: dict[str, dict[str, list[list[float]]]] = {}
    for record in records:
        t = _ms(record)
        previous = state.status.value if state else None
        state = evolve(state, record)
        if state.status.value != previous:
            if phases:
                phases[-1]["end"] = t
            phases.append({"name": state.status.value, "start": t, "end": t})
        events.append(
            {
                "t": t,
                "version": record.version,
                "type": record.type,
                "summary": describe(record.event),
                "time": format_time(record.recorded_at),
            }
        )
        event = record.event
        if record.type == "WorkersStarted":
            for worker in event.workers:
                lanes.switch(worker.world_rank, "starting", t)
        elif record.type == "TrainingLaunched":
            for rank in list(lanes.open):
                if lanes.open[rank]["status"] == "starting":
                    lanes.switch(rank, "running", t)
        elif record.type == "WorkerGroupPolled":
            for change in event.changes:
                if change.error is not None:
                    lanes.switch(change.world_rank, "error", t)
                    lanes.errors.setdefault(change.world_rank, []).append(
                        {
                            "t": t,
                            "type": change.error.type,
                            "message": change.error.message,
                            "traceback": change.error.traceback,
                            "poll_seq": event.poll_seq,
                        }
                    )
                else:
                    lanes.switch(change.world_rank, "running" if change.running else "finished", t)
        elif record.type == "WorkerReported":
            for key, value in event.metrics.items():
                if _numeric(value):
                    metrics.setdefault(key, {}).setdefault(str(event.world_rank), []).append(
                        [event.index, float(value), t]
                    )
        elif record.type == "WorkerGroupShutDown":
            lanes.close_all(t)
    if state is None:
        raise UsageProblem(f"worker group {group_id!r} has no events")
    end = _ms(records[-1])
    lanes.close_all(end, still_open=not state.is_terminal)
    if phases:
        phases[-1]["end"] = end
        phases[-1]["open"] = not state.is_terminal
    workers = []
    for worker in state.workers:
        rank = worker.world_rank
        workers.append(
            {
                "rank": rank,
                "label": f"rank {rank}",
                "detail": f"node {worker.node_rank} {worker.node_ip}, pid {worker.pid}, {worker.actor_name}",
                "segments": lanes.segments.get(rank, []),
                "errors": lanes.errors.get(rank, []),
            }
        )
    outcome = state.outcome
    error = state.error
    failure = state.start_failure
    return {
        "group": {
            "group_id": state.group_id,
            "run_id": state.run_id,
            "attempt": state.attempt,
            "status": state.status.value,
            "outcome": None if outcome is None else outcome.value,
            "train_fn": state.context.train_fn,
            "train_fn_config": dict(state.context.train_fn_config),
            "num_workers": state.num_workers,
            "resources_per_worker": dict(state.context.resources_per_worker),
            "requested_at": format_time(state.requested_at),
            "updated_at": format_time(state.updated_at),
            "version": state.version,
            "polls_total": state.polls_total,
            "reports_total": state.reports_total,
            "shutdown_reason": state.shutdown_reason,
            "error": None if error is None else str(error),
        },
        "t0": _ms(records[0]),
        "t1": end,
        "phases": phases,
        "events": _thin_events(events),
        "events_total": len(events),
        "workers": workers,
        "start_failure": None
        if failure is None
        else {
            "t": next(_ms(r) for r in records if r.type == "WorkerGroupStartFailed"),
            "stage": str(failure.stage),
            "type": failure.error.type,
            "message": failure.error.message,
            "traceback": failure.error.traceback,
        },
        "metrics": {
            name: {rank: _thin(points) for rank, points in series.items()}
            for name, series in metrics.items()
        },
    }


_CSS = """
:root { --fg:#1d2330; --muted:#6b7280; --line:#e5e7eb; --bg:#ffffff; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       background: var(--bg); margin: 24px 32px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.muted { color: var(--muted); } code, pre { font: 12px/1.4 ui-monospace, Menlo, monospace; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 12px 0; }
.facts dt { color: var(--muted); } .facts dd { margin: 0; }
.badge { display:inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600; font-size: 12px;
         background:#eef2ff; }
.badge.SHUT_DOWN, .badge.finished { background:#e5e7eb; } .badge.RUNNING { background:#dcfce7; }
.badge.START_FAILED, .badge.errored { background:#fee2e2; color:#991b1b; }
.badge.aborted { background:#fef3c7; }
.error-box { border-left: 4px solid #dc2626; background:#fef2f2; padding: 8px 12px; margin: 8px 0; }
.error-box pre { white-space: pre-wrap; margin: 6px 0 0; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .axis line, svg .grid { stroke: var(--line); } svg .tick text { fill: var(--muted); }
.legend span { display:inline-block; margin-right: 14px; }
.legend i { display:inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px;
            vertical-align: -2px; }
table.events { border-collapse: collapse; width: 100%; }
table.events td { border-top: 1px solid var(--line); padding: 3px 8px; vertical-align: top; }
#tooltip { position: fixed; pointer-events: none; background: #111827; color: #f9fafb; padding: 6px 8px;
           border-radius: 4px; font-size: 12px; max-width: 520px; white-space: pre-wrap; display: none; }
"""

_JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("wgstore-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = {starting: "#93c5fd", running: "#16a34a", finished: "#6b7280", error: "#dc2626",
                REQUESTED: "#c7d2fe", STARTING: "#93c5fd", RUNNING: "#16a34a",
                SHUTTING_DOWN: "#f59e0b", SHUT_DOWN: "#374151", START_FAILED: "#dc2626"};
  var SERIES = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777",
                "#65a30d", "#4f46e5", "#b45309"];
  var tip = document.getElementById("tooltip");

  function el(name, attrs, parent, text) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function hover(node, text) {
    el("title", {}, node, text);
    node.addEventListener("mousemove", function (e) {
      tip.textContent = text; tip.style.display = "block";
      tip.style.left = (e.clientX + 12) + "px"; tip.style.top = (e.clientY + 12) + "px";
    });
    node.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }
  function seconds(ms) {
    var s = ms / 1000;
    if (Math.abs(s) < 1) { return (ms).toFixed(0) + " ms"; }
    if (Math.abs(s) < 120) { return s.toFixed(s < 10 ? 2 : 1) + " s"; }
    if (Math.abs(s) < 7200) { return (s / 60).toFixed(1) + " min"; }
    return (s / 3600).toFixed(2) + " h";
  }
  function niceTicks(lo, hi, count) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= count) { step *= m; return true; } return false; });
    var ticks = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) { ticks.push(v); }
    return ticks;
  }

  var width = Math.max(760, Math.min(1400, document.getElementById("timeline-box").clientWidth || 1100));
  var left = 150, right = 24, plot = width - left - right;
  var t0 = data.t0, t1 = Math.max(data.t1, data.t0 + 1);
  function x(t) { return left + (t - t0) / (t1 - t0) * plot; }

  // ---- the timeline: phases, events, one lane per worker
  var laneH = 22, top = 30, rows = 2 + data.workers.length;
  var height = top + rows * (laneH + 8) + 30;
  var svg = el("svg", {id: "timeline", width: width, height: height, viewBox: "0 0 " + width + " " + height,
                       role: "img", "aria-label": "worker group timeline"});
  var axis = el("g", {"class": "axis"}, svg);
  niceTicks(0, t1 - t0, 8).forEach(function (offset) {
    var tx = x(t0 + offset), g = el("g", {"class": "tick"}, axis);
    el("line", {x1: tx, x2: tx, y1: top - 6, y2: height - 24, "class": "grid"}, g);
    el("text", {x: tx, y: top - 10, "text-anchor": "middle"}, g, "+" + seconds(offset));
  });
  var y = top;
  el("text", {x: 8, y: y + 15}, svg, "lifecycle");
  var phaseGroup = el("g", {"class": "phases"}, svg);
  data.phases.forEach(function (p) {
    var w = Math.max(4, x(p.end) - x(p.start));
    var r = el("rect", {x: x(p.start), y: y, width: w, height: laneH, rx: 3,
                        fill: COLORS[p.name] || "#9ca3af", "class": "phase phase-" + p.name}, phaseGroup);
    hover(r, p.name + "\n" + seconds(p.end - p.start) + (p.open ? " (still going)" : ""));
    if (w > 70) {
      el("text", {x: x(p.start) + 5, y: y + 15, fill: "#fff", style: "fill:#fff"}, phaseGroup, p.name);
    }
  });
  if (data.start_failure) {
    var f = data.start_failure;
    var m = el("path", {d: "M" + x(f.t) + " " + (y - 2) + " l6 -8 h-12 z", fill: "#dc2626",
                        "class": "error-marker start-failure"}, svg);
    hover(m, "start failed at stage " + f.stage + "\n" + f.type + ": " + f.message);
  }
  y += laneH + 8;
  el("text", {x: 8, y: y + 15}, svg, "events");
  var ev = el("g", {"class": "events"}, svg);
  data.events.forEach(function (e) {
    var l = el("line", {x1: x(e.t), x2: x(e.t), y1: y + 2, y2: y + laneH - 2, stroke: "#4b5563",
                        "stroke-width": 1.5, "class": "event-tick"}, ev);
    hover(l, "v" + e.version + " " + e.type + "  " + e.time + "\n" + e.summary);
  });
  y += laneH + 8;
  data.workers.forEach(function (w) {
    var lane = el("g", {"class": "lane", "data-rank": w.rank}, svg);
    var label = el("text", {x: 8, y: y + 15}, lane, w.label);
    hover(label, w.detail);
    el("rect", {x: left, y: y, width: plot, height: laneH, fill: "#f9fafb"}, lane);
    w.segments.forEach(function (s) {
      var r = el("rect", {x: x(s.start), y: y + 2, width: Math.max(2, x(s.end) - x(s.start)),
                          height: laneH - 4, rx: 2, fill: COLORS[s.status] || "#9ca3af",
                          "class": "seg seg-" + s.status}, lane);
      hover(r, w.label + ": " + s.status + " for " + seconds(s.end - s.start) +
               (s.open ? " (still going)" : ""));
    });
    w.errors.forEach(function (e) {
      var cx = x(e.t), cy = y + laneH / 2;
      var mark = el("g", {"class": "error-marker"}, lane);
      el("circle", {cx: cx, cy: cy, r: 7, fill: "#fff", stroke: "#dc2626", "stroke-width": 2}, mark);
      el("path", {d: "M" + (cx - 3) + " " + (cy - 3) + " l6 6 m0 -6 l-6 6", stroke: "#dc2626",
                  "stroke-width": 2}, mark);
      hover(mark, w.label + " failed (poll #" + e.poll_seq + ")\n" + e.type + ": " + e.message +
                  (e.traceback ? "\n\n" + e.traceback : ""));
    });
    y += laneH + 8;
  });
  document.getElementById("timeline-box").appendChild(svg);

  // ---- one chart per metric, a line per rank
  var charts = document.getElementById("metrics-box");
  var names = Object.keys(data.metrics).sort();
  if (!names.length) { charts.textContent = "No numeric metrics were reported."; }
  names.forEach(function (name) {
    var series = data.metrics[name], ranks = Object.keys(series).sort(function (a, b) { return a - b; });
    var values = [], indexes = [];
    ranks.forEach(function (r) {
      series[r].forEach(function (p) { values.push(p[1]); indexes.push(p[0]); });
    });
    var i0 = Math.min.apply(null, indexes), i1 = Math.max.apply(null, indexes);
    if (i0 === i1) { i1 = i0 + 1; }
    function xi(i) { return left + (i - i0) / (i1 - i0) * plot; }
    var lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    if (lo === hi) { lo -= 1; hi += 1; }
    var h = 200, pt = 16, pb = 28;
    function yv(v) { return pt + (1 - (v - lo) / (hi - lo)) * (h - pt - pb); }
    var chart = el("svg", {"class": "metric-chart", "data-metric": name, width: width, height: h,
                           viewBox: "0 0 " + width + " " + h});
    el("text", {x: 8, y: pt + 10, style: "font-weight:600"}, chart, name);
    niceTicks(lo, hi, 4).forEach(function (v) {
      var g = el("g", {"class": "tick"}, chart);
      el("line", {x1: left, x2: left + plot, y1: yv(v), y2: yv(v), "class": "grid"}, g);
      el("text", {x: left - 6, y: yv(v) + 4, "text-anchor": "end"}, g, +v.toPrecision(4));
    });
    niceTicks(i0, i1, 10).filter(function (i) { return i === Math.round(i); }).forEach(function (i) {
      el("text", {x: xi(i), y: h - 8, "text-anchor": "middle", "class": "tick"}, chart, "report " + i);
    });
    ranks.forEach(function (r, i) {
      var color = SERIES[i % SERIES.length];
      var points = series[r].map(function (p) { return xi(p[0]).toFixed(1) + "," + yv(p[1]).toFixed(1); });
      el("polyline", {points: points.join(" "), fill: "none", stroke: color, "stroke-width": 2,
                      "class": "series", "data-rank": r}, chart);
      series[r].forEach(function (p, k) {
        var dot = el("circle", {cx: xi(p[0]), cy: yv(p[1]), r: 3, fill: color}, chart);
        hover(dot, "rank " + r + " report " + p[0] + ": " + name + " = " + p[1] + "\nrecorded +" +
                   seconds(p[2] - t0));
      });
    });
    var legend = document.createElement("div");
    legend.className = "legend muted";
    legend.innerHTML = ranks.map(function (r, i) {
      return '<span><i style="background:' + SERIES[i % SERIES.length] + '"></i>rank ' + r + "</span>";
    }).join("");
    charts.appendChild(chart);
    charts.appendChild(legend);
  });

  var legendBox = document.getElementById("status-legend");
  legendBox.innerHTML = ["starting", "running", "finished", "error"].map(function (s) {
    return '<span><i style="background:' + COLORS[s] + '"></i>' + s + "</span>";
  }).join("") + '<span>&#x2715; worker error &#9660; start failure</span>';
  document.body.setAttribute("data-rendered", "true");
  document.body.setAttribute("data-lanes", String(data.workers.length));
  document.body.setAttribute("data-charts", String(names.length));
})();
"""


def _fact(name: str, value: Any) -> str:
    return f"<dt>{html.escape(name)}</dt><dd>{value}</dd>"


def render_html(data: dict[str, Any]) -> str:
    """The report page for ``data`` (from :func:`build_report_data`), with nothing to download."""
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
    title = f"wgstore: worker group {group['group_id']}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_CSS}</style>
<script>window.addEventListener("error", function (e) {{
  document.documentElement.setAttribute("data-js-error", String(e.message));
}});</script>
</head>
<body>
<h1>Worker group <code>{esc(group["group_id"])}</code></h1>
<div class="muted">made by <code>wgstore report</code> from the event log; every time is when the store recorded the event</div>
<dl class="facts">{facts}</dl>
{"".join(errors)}
<h2>Timeline</h2>
<div id="status-legend" class="legend muted"></div>
<div id="timeline-box"></div>
<h2>Reported metrics</h2>
<div id="metrics-box"></div>
<h2>Events</h2>
<details><summary>{omitted}</summary><table class="events">{rows}</table></details>
<div id="tooltip"></div>
<script type="application/json" id="wgstore-data">{payload}</script>
<script>{_JS}</script>
</body>
</html>
"""


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
        data = build_report_data(store, group_id)
    output.write_text(render_html(data), encoding="utf-8")
    err_console().print(f"wrote {output} (worker group {group_id}); open it in a browser")
