// wgstore serve: draws the page from /api/... and redraws it on each server-sent event.
// Every string from the log goes into the page as a text node (never as HTML).
// A page's stream says what it watches (watch=... values, serve/interest.py): the runs list
// "runs", the log "all", a run page "run:ID" and "group:ID" of each attempt, a group page
// "group:ID". The server sends it the appends that concern that, and the log's head about once
// a second. Loaded as a SharedWorker, this same file holds the one /api/stream connection that
// every tab of the browser shares (a browser opens at most 6 HTTP/1.1 connections to one
// server), watching what its tabs watch together; it opens the stream again when that changes.
"use strict";
const KINDS = ["status", "append", "head"];
const MAX_WATCHED = 100; // more than this (a run of many attempts): watch every run instead
// the query of /api/stream for some watch values: "all" and "runs" cover the others
function watchQuery(values) {
  const all = new Set(values);
  const wanted = all.has("all") ? ["all"] : all.has("runs") || all.size > MAX_WATCHED ? ["runs"] : [...all].sort();
  return wanted.map((v) => "watch=" + encodeURIComponent(v)).join("&");
}
if (typeof document === "undefined") {
  const tabs = new Map(); // each tab's port -> what it watches
  const waiting = new Set(); // tabs that joined or changed since the stream's last status
  let source = null, query = null, status = null, timer = null;
  const send = (message) => { for (const port of tabs.keys()) port.postMessage(message); };
  // A new stream's first message is its status, which every tab refetches on: no tab misses
  // an append across the change. A tab whose watch the open stream covers gets its last status.
  function update() {
    timer = null;
    const wanted = tabs.size ? watchQuery([...tabs.values()].flat()) : null;
    if (wanted === query) {
      if (status) for (const port of waiting) port.postMessage(status);
      if (status) waiting.clear();
      return;
    }
    if (source) source.close();
    source = null; status = null; query = wanted;
    if (wanted === null) return;
    source = new EventSource("/api/stream?" + wanted);
    for (const kind of KINDS) {
      source.addEventListener(kind, (m) => {
        const message = { kind, data: m.data };
        if (kind === "status") { status = message; waiting.clear(); }
        send(message);
      });
    }
    source.onerror = () => send({ kind: "error" });
  }
  self.onconnect = (event) => {
    const port = event.ports[0];
    port.onmessage = (m) => {
      if (m.data === "bye") { tabs.delete(port); waiting.delete(port); }
      else { tabs.set(port, m.data.watch); waiting.add(port); }
      if (timer === null) timer = setTimeout(update, 25); // tabs that come together: one stream
    };
    port.start();
  };
} else (function () {
  const body = document.body;
  const kind = body.dataset.kind;
  const ident = body.dataset.id;
  const main = document.getElementById("main");
  const banner = document.getElementById("banner");
  const live = document.getElementById("live");
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  let rendered = 0;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(key, String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }
  const link = (path, id, text) => el("a", { href: path + encodeURIComponent(id) }, text || id);
  const short = (id) => (id || "").slice(0, 12);
  function when(value) {
    if (!value) return "";
    const d = new Date(value);
    return isNaN(d) ? String(value) : d.toISOString().replace("T", " ").slice(0, 19);
  }
  function seconds(s) {
    if (s === null || s === undefined) return "";
    if (s < 120) return s.toFixed(1) + "s";
    if (s < 7200) return (s / 60).toFixed(1) + "m";
    return (s / 3600).toFixed(1) + "h";
  }
  const budget = (used, limit) =>
    used === null || used === undefined ? "" : limit === null || limit === undefined ? String(used) : used + "/" + (limit < 0 ? "∞" : limit);
  const stateClass = (s) => ({ ERRORED: "bad", UNREADABLE: "bad", START_FAILED: "bad", error: "bad", RUNNING: "ok", running: "ok", ABORTED: "warn", RESTARTING: "warn" })[s] || "";
  const state = (s, extra) => el("span", { class: stateClass(s) }, s || "", extra ? el("span", { class: "dim" }, " (" + extra + ")") : null);
  function table(headers, rows) {
    return el("div", { class: "scroll" }, el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c))))))));
  }
  const facts = (pairs) => el("dl", {}, pairs.filter((p) => p[1] !== null && p[1] !== undefined && p[1] !== "").map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const metricsText = (m) => Object.entries(m || {}).map(([k, v]) => k + "=" + (typeof v === "number" ? +v.toPrecision(6) : JSON.stringify(v))).join(" ");

  // the log head of the message this redraw answers: any answer the server keeps at that head or
  // later serves it (the open pages of a run share one answer per append)
  const seen = () => (head ? "?head=" + head : "");
  async function api(path) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    let data = null;
    try { data = await response.json(); } catch (e) { data = { error: response.statusText }; }
    if (response.status === 503) { showBanner(data.error); throw new Error(data.error); }
    if (!response.ok) throw Object.assign(new Error(data.error || response.statusText), { status: response.status });
    hideBanner();
    return data;
  }
  // The follower's last status is what says the store is away: an answer the server kept from
  // before (served while the store is away) must not hide the banner that status showed.
  let storeDown = false;
  function showBanner(text) { banner.hidden = false; banner.textContent = "The store is unavailable; this page will catch up when it is back. " + (text || ""); }
  function hideBanner() { if (!storeDown) banner.hidden = true; }

  // ------------------------------------------------------------------ runs
  function runsControls() {
    const q = new URLSearchParams(location.search);
    const states = ["", "INITIALIZING", "SCHEDULING", "RUNNING", "RESTARTING", "RESIZING", "FINISHED", "ERRORED", "ABORTED"];
    return el("form", { method: "get", action: "/" },
      el("label", {}, "state", el("select", { name: "status" }, states.map((s) => el("option", { value: s, selected: q.get("status") === s }, s || "any")))),
      el("label", {}, "source", el("select", { name: "source" }, ["", "wgstore", "ray_train"].map((s) => el("option", { value: s, selected: q.get("source") === s }, s || "any")))),
      el("label", {}, "name contains", el("input", { name: "name", value: q.get("name") || "", size: 14 })),
      el("label", {}, "since (10m, 2h, ISO)", el("input", { name: "since", value: q.get("since") || "", size: 10 })),
      el("label", {}, "orphaned", el("input", { type: "checkbox", name: "orphaned", value: "1", checked: q.get("orphaned") === "1" })),
      el("button", { type: "submit" }, "filter"));
  }
  async function drawRuns() {
    const q = new URLSearchParams(location.search);
    for (const [k, v] of [...q.entries()]) if (!v) q.delete(k);
    if (head) q.set("head", head);
    const data = await api("/api/runs?" + q.toString());
    const rows = data.runs.map((r) => [
      link("/runs/", r.run_id, short(r.run_id)), r.name || "", state(r.status, r.controller_state !== r.status ? r.controller_state : null),
      el("td", { class: "num" }, r.attempts ?? ""), budget(r.worker_group_failures, r.max_failures), r.latest_checkpoint || "",
      r.orphaned ? el("span", { class: "bad" }, "ORPHANED") : r.ended_at ? "" : r.lease_holder ? "alive (" + r.lease_holder + ")" : "",
      when(r.created_at), when(r.ended_at), seconds(r.duration_s), r.status === "UNREADABLE" ? el("span", { class: "bad" }, r.error) : r.error_text || ""]);
    const pager = el("div", { class: "pager" });
    const page = (offset, text) => { const p = new URLSearchParams(q); p.set("offset", offset); return el("a", { href: "/?" + p }, text); };
    if (data.offset > 0) pager.append(page(Math.max(0, data.offset - data.limit), "← newer"));
    pager.append(el("span", { class: "dim" }, `${data.total ? data.offset + 1 : 0}–${data.offset + data.runs.length} of ${data.total}`));
    if (data.offset + data.limit < data.total) pager.append(page(data.offset + data.limit, "older →"));
    return [el("h1", {}, "Runs"), data.runs.length ? table(["run", "name", "state", "attempts", "failures", "checkpoint", "driver", "started", "ended", "duration", "error"], rows) : el("p", { class: "dim" }, "no runs match"), pager];
  }

  // ------------------------------------------------------------------ one run
  function chart(name, series) {
    const W = 600, H = 220, L = 48, R = 8, T = 8, B = 22;
    const all = series.flatMap((s) => s.points);
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const last = Math.max(...series.map((s) => s.attempt));
    const axis = series[0].x; // step, epoch, or report (the run-wide report index): the server's choice
    const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "data-metric": name, "data-points": all.length, "data-x": axis });
    plot.append(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#8886" }));
    plot.append(svg("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, +y1.toPrecision(4)));
    plot.append(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, +y0.toPrecision(4)));
    plot.append(svg("text", { x: L, y: H - 6 }, axis + " " + x0));
    plot.append(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, axis + " " + x1));
    const legend = el("div", { class: "legend" });
    series.forEach((s, i) => {
      const main = s.rank === 0 && s.attempt === last;
      const color = COLORS[i % COLORS.length];
      const d = s.points.map((p, j) => (j ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1)).join(" ");
      plot.append(svg("path", { d, fill: "none", stroke: color, "stroke-width": main ? 2.5 : 1.2, opacity: main ? 1 : 0.7, "data-attempt": s.attempt, "data-rank": s.rank }, svg("title", {}, `attempt ${s.attempt} rank ${s.rank}`)));
      if (s.points.length === 1) plot.append(svg("circle", { cx: X(s.points[0][0]), cy: Y(s.points[0][1]), r: 3, fill: color }));
      const lastPoint = s.points[s.points.length - 1];
      legend.append(el("span", { style: "color:" + color }, `■ attempt ${s.attempt} rank ${s.rank}: ${+lastPoint[1].toPrecision(6)}`));
    });
    return el("figure", {}, el("figcaption", {}, name), plot, legend);
  }
  // The run's size over time: each attempt's workers from its request to the next one's (an
  // elastic run's resizes and restarts at what fits), a step line.
  function sizeChart(attempts, end) {
    const steps = attempts.filter((a) => a.requested_at && a.num_workers !== null && a.num_workers !== undefined)
      .map((a) => [Date.parse(a.requested_at), a.num_workers]);
    if (!steps.length) return null;
    const W = 600, H = 120, L = 48, R = 8, T = 8, B = 22;
    const t1 = Math.max(end, steps[steps.length - 1][0] + 1), t0 = steps[0][0];
    const y1 = Math.max(...steps.map((p) => p[1]));
    const X = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R), Y = (y) => T + (1 - y / y1) * (H - T - B);
    let d = "";
    steps.forEach(([t, n], i) => {
      const next = i + 1 < steps.length ? steps[i + 1][0] : t1;
      d += (i ? "L" : "M") + X(t).toFixed(1) + " " + Y(n).toFixed(1) + " L" + X(next).toFixed(1) + " " + Y(n).toFixed(1) + " ";
    });
    const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "data-metric": "workers", "data-points": steps.length, "data-sizes": steps.map((p) => p[1]).join(",") });
    plot.append(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#8886" }));
    plot.append(svg("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, y1));
    plot.append(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, 0));
    plot.append(svg("text", { x: L, y: H - 6 }, when(new Date(t0).toISOString())));
    plot.append(svg("path", { d: d.trim(), fill: "none", stroke: COLORS[0], "stroke-width": 2.5 }, svg("title", {}, "workers per attempt")));
    return el("figure", {}, el("figcaption", {}, "workers"), plot);
  }
  async function drawRun() {
    const d = await api("/api/runs/" + encodeURIComponent(ident) + seen());
    watching = ["run:" + d.run.run_id, ...d.attempts.map((a) => "group:" + a.group_id)];
    const r = d.run;
    const out = [el("h1", {}, "Run ", r.run_id, r.name ? el("span", { class: "dim" }, " (" + r.name + ")") : null)];
    out.push(facts([["state", state(r.status, r.controller_state)], ["archived", r.archived ? "in batch " + r.archive_batch + ", " + when(r.archived_at) + " (read from the archive's file; wgstore restore " + r.run_id + " puts it back)" : ""], ["source", r.source], ["train_fn", r.train_fn],
      ["workers", r.num_workers === null ? "" : (r.min_workers !== null && r.min_workers !== undefined ? r.min_workers + ".." : "") + r.num_workers + " × " + JSON.stringify(r.resources_per_worker || {}) + (r.min_workers !== null && r.min_workers !== undefined ? " (now " + (r.current_workers || 0) + (r.desired_workers !== null && r.desired_workers !== r.current_workers ? ", wanted " + r.desired_workers : "") + ")" : "")],
      ["failures", budget(r.worker_group_failures, r.max_failures) + " (worker group failures used / max_failures)"],
      ["attempts", r.attempts], ["resumable", r.resumable ? "yes" : r.not_resumable_reason ? "no: " + r.not_resumable_reason : ""],
      ["ray job", d.ray_job ? d.ray_job.job_id + " " + d.ray_job.entrypoint + " (driver " + d.ray_job.driver_ip + " pid " + d.ray_job.driver_pid + ")" : ""], ["checkpoint", r.latest_checkpoint ? r.latest_checkpoint + " (committed by every rank" + (r.checkpoint_committed_at ? ", " + when(r.checkpoint_committed_at) : "") + ")" : ""],
      ["reported", r.latest_reported_checkpoint && r.latest_reported_checkpoint !== r.latest_checkpoint ? r.latest_reported_checkpoint + " (the latest some ranks reported; not committed)" : ""], ["started", when(r.created_at)], ["ended", when(r.ended_at)],
      ["duration", seconds(d.duration_s)], ["driver", r.orphaned ? el("span", { class: "bad" }, "ORPHANED: no controller holds a live lease") : r.lease_holder ? r.lease_holder + " until " + when(r.lease_expires_at) : ""],
      ["error", r.error ? [el("span", { class: "bad error-text" }, d.error_text), el("details", {}, el("summary", {}, "the run's whole error"), el("pre", {}, r.error))] : ""], ["aborted", r.abort_reason]]));
    const names = Object.keys(d.metrics);
    const sizes = d.resizes.length ? sizeChart(d.attempts, r.ended_at ? Date.parse(r.ended_at) : Date.now()) : null;
    const charts = [...(sizes ? [sizes] : []), ...names.map((n) => chart(n, d.metrics[n]))];
    out.push(el("h2", {}, "Metrics"), charts.length ? el("div", { class: "charts" }, charts) : el("p", { class: "dim" }, "no numeric metrics reported yet"));
    out.push(el("h2", {}, "Latest metrics per rank"), d.latest.length ? table(["attempt", "rank", "status", "reports", "latest metrics", "error"],
      d.latest.map((w) => [w.attempt, w.rank, state(w.status), el("td", { class: "num" }, w.reports), el("span", { class: "mono" }, metricsText(w.metrics)), el("span", { class: "bad" }, w.error)])) : el("p", { class: "dim" }, "no workers yet"));
    out.push(el("h2", {}, "Attempts"), d.attempts.length ? table(["#", "group", "try", "workers", "status", "requested", "checkpoint", "failure", "decision"],
      d.attempts.map((a) => [a.number, link("/groups/", a.group_id, short(a.group_id)), a.attempt ?? "", el("td", { class: "num" }, a.num_workers ?? ""), state(a.status || "NO EVENTS", a.outcome), when(a.requested_at), a.latest_checkpoint || "",
        el("span", { class: "bad" }, a.error || ""), a.decisions.map((x) => x.decision + " " + x.failure_kind + " " + budget(x.failures_so_far, x.limit) + (x.reason ? ": " + x.reason : "")).join("; ")])) : el("p", { class: "dim" }, "no attempts yet"));
    const timeline = [
      ...d.transitions.map((t) => [t.at, "state", t.from_state + " → " + t.to_state, t.reason || "", t.group_id]),
      ...d.decisions.map((x) => [x.at, "decision", x.decision + " " + x.failure_kind + " " + budget(x.failures_so_far, x.limit), x.reason || "", x.group_id]),
      ...d.controllers.map((c) => [c.at, c.resumed ? "resumed" : "controller", c.controller_id, c.host + " pid " + c.pid, null]),
      ...d.resizes.map((z) => [z.at, "size", (z.previous_workers === null ? "" : z.previous_workers + " → ") + z.num_workers + " (" + z.cause + ")", z.reason, z.group_id]),
      ...d.preemptions.map((p) => [p.at, "preemption", "node " + Object.keys(p.nodes).join(", ") + " going, ranks " + p.ranks.join(", "), p.deadline ? "deadline " + when(p.deadline) : "no deadline given", p.group_id]),
      ...(d.nodes_lost || []).map((n) => [n.at, "node lost", "node " + n.node_ip + " " + short(n.node_id), n.reason + (n.message ? ": " + n.message : ""), n.group_ids[0] || null]),
    ].sort((a, b) => String(a[0]).localeCompare(String(b[0])));
    out.push(el("h2", {}, "Timeline"), table(["time", "what", "", "reason", "group"], timeline.map((t) => [when(t[0]), t[1], t[2], t[3], t[4] ? link("/groups/", t[4], short(t[4])) : ""])));
    out.push(el("p", {}, el("a", { href: "/log?run=" + encodeURIComponent(r.run_id) }, "this run's events")));
    return out;
  }

  // ------------------------------------------------------------------ one group
  async function drawGroup() {
    const d = await api("/api/groups/" + encodeURIComponent(ident) + seen());
    watching = ["group:" + d.group_id];
    const s = d.state;
    const out = [el("h1", {}, "Worker group ", d.group_id)];
    out.push(facts([["run", s.run_id ? link("/runs/", s.run_id) : ""], ["attempt", s.attempt], ["status", state(s.status, s.outcome)],
      ["train_fn", s.context.train_fn], ["workers", s.num_workers + " × " + JSON.stringify(s.context.resources_per_worker)],
      ["requested", when(s.requested_at)], ["polls", s.polls_total + " (" + s.recorded_polls + " recorded)"], ["reports", s.reports_total],
      ["checkpoint", s.latest_checkpoint], ["shutdown", s.shutdown_reason], ["as of", "version " + s.version + ", position " + s.position]]));
    out.push(el("h2", {}, "Workers"), d.workers.length ? table(["rank", "node", "pid", "status", "reports", "latest metrics", "error"],
      d.workers.map((w) => [w.rank, w.node, w.pid, state(w.status), el("td", { class: "num" }, w.reports), el("span", { class: "mono" }, metricsText(w.metrics)), el("span", { class: "bad" }, w.error)])) : el("p", { class: "dim" }, "no workers started"));
    out.push(el("h2", {}, "Errors"), d.errors.length ? d.errors.map((e) => el("div", { class: "error" },
      el("div", { class: "bad" }, (e.rank === null ? "start failed at stage " + e.stage : "rank " + e.rank) + ": " + e.type + ": " + e.message),
      e.traceback ? el("pre", {}, e.traceback) : null)) : el("p", { class: "dim" }, "no errors"));
    out.push(el("h2", {}, "Builder steps"), table(["step", "time", "took", "details"], d.builder.map((b) => [b.type, when(b.t), b.took_ms === null ? "" : b.took_ms + " ms", b.summary])));
    out.push(el("h2", {}, "Poll history (last " + d.polls.length + ")"), d.polls.length ? table(["seq", "polled at", "running", "unchanged polls", "changes"],
      d.polls.map((p) => [p.poll_seq, when(p.polled_at), p.running ?? "", p.unchanged_polls, p.changes.map((c) => "rank " + c.world_rank + (c.error ? " error " + c.error.type + ": " + c.error.message : c.running ? " running" : " stopped")).join("; ")])) : el("p", { class: "dim" }, "no polls recorded"));
    out.push(el("p", {}, el("a", { href: "/log?group=" + encodeURIComponent(d.group_id) }, "this group's events")));
    return out;
  }

  // ------------------------------------------------------------------ the log
  let logNext = null;
  let logRows = [];
  const logQuery = () => { const q = new URLSearchParams(location.search); for (const [k, v] of [...q.entries()]) if (!v) q.delete(k); return q; };
  function logControls() {
    const q = new URLSearchParams(location.search);
    return el("form", { method: "get", action: "/log" },
      el("label", {}, "stream", el("input", { name: "stream", value: q.get("stream") || "", size: 24 })),
      el("label", {}, "group (id or prefix)", el("input", { name: "group", value: q.get("group") || "", size: 12 })),
      el("label", {}, "type", el("input", { name: "type", value: q.get("type") || "", size: 18 })),
      el("button", { type: "submit" }, "filter"));
  }
  function streamLink(id) {
    if (id.startsWith("worker-group-")) return link("/groups/", id.slice(13), id);
    if (id.startsWith("run-")) return link("/runs/", id.slice(4), id);
    return el("span", { class: "mono" }, id);
  }
  async function drawLog() {
    const q = logQuery();
    const run = q.get("run");
    if (logNext !== null) q.set("after", logNext);
    const data = await api("/api/events?" + q.toString());
    logRows = logRows.concat(data.events).slice(-500);
    logNext = data.next;
    return [el("h1", {}, "Log", run ? el("span", { class: "dim" }, " (run " + run + ")") : ""), el("p", { class: "dim" }, "head " + data.head + ", newest last, " + logRows.length + " shown"),
      table(["pos", "time", "stream", "v", "type", "summary"], logRows.map((e) => [el("td", { class: "num" }, e.position), el("td", { class: "nowrap" }, when(e.recorded_at)), streamLink(e.stream_id), e.version, e.type, el("span", { class: "mono", title: JSON.stringify(e.data) }, e.summary)]))];
  }

  // ------------------------------------------------------------------ drawing, live
  const draw = { runs: drawRuns, run: drawRun, group: drawGroup, log: drawLog }[kind];
  const controls = { runs: runsControls, log: logControls }[kind];
  if (controls) document.getElementById("controls").append(controls());
  let busy = false, again = false, head = 0;
  // What this page watches: from its address until it is drawn, then the ids it shows
  let watching = { runs: ["runs"], log: ["all"], run: ["run:" + ident], group: ["group:" + ident] }[kind];
  let concerns = () => true, followed = null;
  // whether an event concerns what the page watches: serve/interest.py's Interest.concerns
  function interest(values) {
    const streams = new Set(), runs = new Set();
    for (const v of values) {
      if (v.startsWith("run:")) { streams.add("run-" + v.slice(4)); runs.add(v.slice(4)); }
      if (v.startsWith("group:")) streams.add("worker-group-" + v.slice(6));
    }
    const all = values.includes("all"), wide = values.includes("runs") || values.length > MAX_WATCHED;
    return (e) => all || streams.has(e.stream_id) || (wide && (e.stream_id.startsWith("run-") || e.stream_id.startsWith("worker-group-"))) ||
      (e.type === "WorkerGroupStartRequested" && runs.has(e.run_id));
  }
  // (a stream shared with other tabs also brings what they watch)
  const matters = (message) => message.more > 0 || message.events.some(concerns);
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    const seen = head;
    try {
      const parts = await draw();
      main.replaceChildren(...parts.flat(4));
      rendered += 1;
      body.dataset.rendered = String(rendered);
      body.dataset.head = String(seen);
    } catch (error) {
      if (error.status) main.replaceChildren(el("h1", {}, "Not found"), el("p", { class: "bad" }, error.message));
    } finally {
      busy = false;
      follow();
      if (again) { again = false; refresh(); }
    }
  }
  function receive(kind, data) {
    if (kind === "error") { live.textContent = "reconnecting…"; return; }
    const message = JSON.parse(data);
    if (kind === "append" || kind === "head") {
      head = Math.max(head, message.head);
      live.textContent = "live · head " + head;
      if (kind === "append" && matters(message)) refresh();
    } else if (message.available) {
      storeDown = false;
      hideBanner();
      head = Math.max(head, message.head);
      live.textContent = "live · head " + message.head;
      refresh();
    } else {
      storeDown = true;
      showBanner(message.problem);
      live.textContent = "store unavailable";
    }
  }
  // Subscribe, or subscribe again when what the page watches changed (a new attempt): the
  // stream's first message is a status, on which the page refetches, so nothing is missed.
  const script = document.currentScript.src;
  let port = null, source = null;
  function follow() {
    const query = watchQuery(watching);
    if (query === followed) return;
    followed = query;
    concerns = interest(watching);
    if (window.SharedWorker) {
      if (port === null) {
        port = new SharedWorker(script, { name: "wgstore-live" }).port;
        port.onmessage = (m) => receive(m.data.kind, m.data.data);
        port.start();
        addEventListener("pagehide", () => port.postMessage("bye"));
        addEventListener("pageshow", (event) => { if (event.persisted) location.reload(); });
      }
      port.postMessage({ watch: watching });
    } else {
      if (source) source.close();
      source = new EventSource("/api/stream?" + query);
      for (const kind of KINDS) source.addEventListener(kind, (m) => receive(kind, m.data));
      source.onerror = () => receive("error");
    }
  }
  refresh();
})();
