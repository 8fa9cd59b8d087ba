"""The report pages' HTML parts, from timeline data built by hand: no store, no template."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from wgstore.projections.report_html import fill, group_page_parts, run_page_parts
from wgstore.projections.rows import FailedRank, RunInfo


def test_fill_replaces_each_slot_once_and_leaves_slots_inside_parts() -> None:
    page = fill("<h1>@@title@@</h1>@@body@@", {"title": "@@body@@", "body": "<p>x</p>"})
    assert page == "<h1>@@body@@</h1><p>x</p>"


def test_fill_refuses_a_slot_it_has_no_part_for() -> None:
    with pytest.raises(KeyError, match="missing"):
        fill("@@missing@@", {})


def events(total: int, shown: int) -> list[dict[str, Any]]:
    return [
        {"stream": "run-r1", "version": v, "time": "t", "type": "WorkerReported", "summary": "<s>"}
        for v in range(1, shown + 1)
    ]


def group_data(**group: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "group_id": "g1",
        "run_id": "r1",
        "attempt": 1,
        "status": "SHUT_DOWN",
        "outcome": "errored",
        "resources_per_worker": {"CPU": 0.5},
        "train_fn": "m:<fn>",
        "train_fn_config": {"steps": 3},
        "num_workers": 2,
        "requested_at": "2026-01-01T12:00:00Z",
        "updated_at": "2026-01-01T12:00:02Z",
        "version": 9,
        "polls_total": 4,
        "reports_total": 6,
        "latest_checkpoint": "/ckpt/1",
        "checkpoint_committed_at": "2026-01-01T12:00:01Z",
        "latest_reported_checkpoint": "/ckpt/2",
        "shutdown_reason": None,
    }
    fields.update(group)
    return {
        "group": fields,
        "t0": 1000.0,
        "t1": 3500.0,
        "start_failure": None,
        "workers": [
            {
                "label": "rank <1>",
                "errors": [
                    {"poll_seq": 3, "type": "RuntimeError", "message": "a < b", "traceback": "tb"}
                ],
            }
        ],
        "events": events(3, 3),
        "events_total": 3,
        "metrics": {"loss": {"0": [[0, 0.5, 1200.0, None, None], [1, 0.25, 1300.0, None, None]]}},
    }


def test_a_group_page_escapes_what_the_log_holds_and_boxes_each_error() -> None:
    parts = group_page_parts(group_data())
    assert set(parts) == {"title", "group_id", "facts", "errors", "omitted", "rows", "payload"}
    assert parts["title"] == "wgstore: worker group g1"
    assert "<code>m:&lt;fn&gt;</code>" in parts["facts"]
    assert "2 x {CPU=0.5}" in parts["facts"] and "(2.50 s)" in parts["facts"]
    assert '<span class="badge errored">errored</span>' in parts["facts"]
    assert "committed 2026-01-01T12:00:01Z" in parts["facts"]
    assert "reported, not by every rank (not committed): <code>/ckpt/2</code>" in parts["facts"]
    assert "shutdown" not in parts["facts"]
    assert parts["errors"] == (
        '<div class="error-box"><b>rank &lt;1&gt;</b> (poll #3): RuntimeError: a &lt; b'
        "<pre>tb</pre></div>"
    )
    assert parts["omitted"] == "3 events"
    assert parts["rows"].count("<tr>") == 3 and "&lt;s&gt;" in parts["rows"]
    assert "run-r1" not in parts["rows"]  # one stream: no stream column


def test_a_failed_start_comes_first_and_a_shutdown_reason_is_a_fact() -> None:
    data = group_data(shutdown_reason="user <asked>")
    data["start_failure"] = {
        "stage": "workers",
        "type": "TimeoutError",
        "message": "no room",
        "traceback": None,
    }
    parts = group_page_parts(data)
    assert parts["errors"] == (
        '<div class="error-box"><b>start failed at stage workers:</b> TimeoutError: no room</div>'
        '<div class="error-box"><b>rank &lt;1&gt;</b> (poll #3): RuntimeError: a &lt; b'
        "<pre>tb</pre></div>"
    )
    assert "<dt>shutdown</dt><dd>user &lt;asked&gt;</dd>" in parts["facts"]


def test_the_payload_is_the_data_as_json_that_cannot_end_its_script() -> None:
    data = group_data(train_fn="</script><script>alert(1)</script>")
    payload = group_page_parts(data)["payload"]
    assert "</" not in payload
    decoded = json.loads(payload.replace("<\\/", "</"))
    charts = {  # the metrics as the page's charts draw them: [x, value, epoch ms, index]
        "loss": [
            {
                "attempt": 1,
                "rank": 0,
                "x": "report",
                "points": [[0, 0.5, 1200, 0], [1, 0.25, 1300, 1]],
            }
        ]
    }
    assert decoded == json.loads(json.dumps({**data, "metrics": charts}))
    assert list(decoded) == sorted(data) and list(decoded["group"]) == sorted(data["group"])


def test_a_group_pages_charts_are_drawn_at_the_steps_its_ranks_reported() -> None:
    """A resumed attempt reports steps 13, 14 from report index 0: charted at 13, 14 (issue 41,
    item 11), the axis named."""
    data = group_data(attempt=2)
    data["metrics"] = {"loss": {"0": [[0, 0.5, 1.0, 13, None], [1, 0.4, 2.0, 14, None]]}}
    decoded = json.loads(group_page_parts(data)["payload"].replace("<\\/", "</"))
    assert decoded["metrics"] == {
        "loss": [
            {"attempt": 2, "rank": 0, "x": "step", "points": [[13, 0.5, 1, 0], [14, 0.4, 2, 1]]}
        ]
    }


def test_a_thinned_event_list_says_which_events_are_shown() -> None:
    data = group_data()
    data["events"], data["events_total"] = events(5000, 3000), 5000
    assert group_page_parts(data)["omitted"] == "5000 events (the first and last 1500 shown)"


def run_data(**run: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "run_id": "r1",
        "name": "demo <1>",
        "source": "wgstore",
        "status": "ERRORED",
        "controller_state": "SHUTTING_DOWN",
        "orphaned": False,
        "attempts": 2,
        "worker_group_failures": 2,
        "max_failures": 1,
        "start_failures": 0,
        "controller_failure_limit": -1,
        "preemption_failures": 0,
        "max_preemption_failures": None,
        "latest_checkpoint": None,
        "created_at": datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        "train_fn": None,
        "ended_at": None,
        "abort_reason": None,
        "ray": {},
        "error": "RuntimeError: died",
        "failed_ranks": (FailedRank(world_rank=1, type="RuntimeError", message="<died>"),),
        "version": 1,
    }
    fields.update(run)
    decision = {
        "decision": "RETRY",
        "failure_kind": "worker_group",
        "failures_so_far": 1,
        "limit": 1,
        "reason": "rank <1> died",
    }
    return {
        "run": RunInfo(**fields),
        "attempts": [
            {
                "number": 1,
                "group_id": "g1",
                "status": "SHUT_DOWN",
                "outcome": "errored",
                "error": "x < y",
                "latest_checkpoint": "/c",
            },
            {"number": 2, "group_id": "g2", "status": None, "outcome": None, "error": None},
        ],
        "decisions": [
            {**decision, "group_id": "g1"},
            {**decision, "group_id": "g1", "decision": "RAISE", "limit": -1, "reason": ""},
        ],
        "events": events(2, 2),
        "events_total": 2,
    }


def test_a_run_page_has_each_attempt_with_its_decisions_against_the_budget() -> None:
    parts = run_page_parts(run_data())
    assert set(parts) == {
        "title", "run_id", "facts", "errors", "attempts", "omitted", "rows", "payload",
    }  # fmt: skip
    first, second = parts["attempts"].split("</tr>")[:2]
    assert "<code>g1</code>" in first and "x &lt; y" in first and "<code>/c</code>" in first
    assert first.endswith(
        '<span class="badge RETRY">RETRY</span> worker_group failure 1 of 1 '
        "<span class=muted>(rank &lt;1&gt; died)</span><br>"
        '<span class="badge RAISE">RAISE</span> worker_group failure 1 of unlimited</td>'
    )  # no reason: nothing after the budget
    assert parts["attempts"].startswith("<tr class=attempt-row><td>1</td>")
    assert parts["attempts"].count("</tr><tr class=attempt-row><td>2</td>") == 1
    assert '<span class="badge NO EVENTS">NO EVENTS</span> </td>' in second
    assert "<code>-</code>" in second  # no checkpoint
    assert "run-r1 v1" in parts["rows"]  # every stream of the run: with the stream
    assert parts["errors"] == (
        '<div class="error-box"><b>run errored:</b> rank 1: RuntimeError: &lt;died&gt;'
        "<details><summary>the run's whole error</summary><pre>RuntimeError: died</pre>"
        "</details></div>"
    )


def test_a_run_page_states_the_controller_and_orphaned_and_every_budget() -> None:
    facts = run_page_parts(run_data(orphaned=True, ray={"job_id": "02"}))["facts"]
    assert (
        '<span class="badge ERRORED">ERRORED</span> <span class="muted">controller '
        'SHUTTING_DOWN</span> <span class="badge ORPHANED">ORPHANED</span>'
    ) in facts
    assert "<dd>demo &lt;1&gt;</dd>" in facts
    assert "worker group 2 of 1, start 0 of unlimited, preemption 0 of unlimited" in facts
    assert "<code>{&quot;job_id&quot;: &quot;02&quot;}</code>" in facts
    assert "train_fn" not in facts and "ended" not in facts and "aborted" not in facts
    calm = run_page_parts(run_data(error=None, controller_state="ERRORED"))
    assert calm["errors"] == ""
    assert "controller" not in calm["facts"]


FACT = re.compile(r"<dt>(.*?)</dt><dd>(.*?)</dd>", re.S)


def facts_of(html: str) -> list[tuple[str, str]]:
    """The (label, value) pairs of a facts part, which holds nothing else."""
    pairs: list[tuple[str, str]] = FACT.findall(html)
    assert "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in pairs) == html
    return pairs


def test_a_group_page_lists_its_facts_in_order() -> None:
    data = group_data(resources_per_worker={"CPU": 0.5, "GPU": 1.0})
    data["t0"], data["t1"] = 0.0, 12345.0  # milliseconds
    facts = facts_of(group_page_parts(data)["facts"])
    assert [label for label, _ in facts] == [
        "status", "run", "train_fn", "workers", "recorded", "events", "checkpoint",
    ]  # fmt: skip
    values = dict(facts)
    assert values["run"] == "r1 (attempt 1)"
    assert values["train_fn"] == "<code>m:&lt;fn&gt;</code> <code>{&quot;steps&quot;: 3}</code>"
    assert values["workers"] == "2 x {CPU=0.5, GPU=1}"
    assert values["recorded"] == "2026-01-01T12:00:00Z to 2026-01-01T12:00:02Z (12.35 s)"
    assert values["events"] == "9; 4 polls, 6 reports"


def test_a_group_pages_events_are_one_row_each() -> None:
    data = group_data()
    data["events"] = events(2, 2)
    row = "<tr><td class=muted>v{}</td><td><code>t</code></td><td><b>WorkerReported</b></td>"
    assert group_page_parts(data)["rows"] == "".join(
        row.format(v) + "<td>&lt;s&gt;</td></tr>" for v in (1, 2)
    )


def test_a_run_page_lists_its_facts_in_order_and_the_optional_ones_when_set() -> None:
    bare = facts_of(run_page_parts(run_data(name=None, ray={}))["facts"])
    assert [label for label, _ in bare] == [
        "state", "name", "source", "attempts", "failures", "checkpoint", "created",
    ]  # fmt: skip
    values = dict(bare)
    assert (values["name"], values["source"], values["attempts"]) == ("", "wgstore", "2")
    unsourced = dict(facts_of(run_page_parts(run_data(source=None))["facts"]))
    assert unsourced["source"] == ""  # a run recorded before sources were: empty, not "None"
    assert values["created"] == "2026-01-01 12:00:00.000Z"
    ended = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
    full = run_page_parts(
        run_data(train_fn="m:<fn>", ended_at=ended, abort_reason="SIGINT <2>", ray={"j": 1})
    )
    assert facts_of(full["facts"])[7:] == [
        ("train_fn", "<code>m:&lt;fn&gt;</code>"),
        ("ended", "2026-01-01 13:00:00.000Z"),
        ("aborted", "SIGINT &lt;2&gt;"),
        ("ray", "<code>{&quot;j&quot;: 1}</code>"),
    ]


def test_a_commit_time_without_a_committed_checkpoint_is_not_shown() -> None:
    run = run_data(checkpoint_committed_at=datetime(2026, 1, 1, 12, 0, 1, tzinfo=UTC))
    assert dict(facts_of(run_page_parts(run)["facts"]))["checkpoint"] == "<code>-</code>"


def test_every_failed_rank_of_an_errored_run_is_named() -> None:
    failed = (
        FailedRank(world_rank=0, type="RuntimeError", message="a"),
        FailedRank(world_rank=1, type="ValueError", message="b"),
    )
    assert run_page_parts(run_data(failed_ranks=failed))["errors"] == (
        '<div class="error-box"><b>run errored:</b> rank 0: RuntimeError: a (and 1 more rank)'
        "<br>rank 1: ValueError: b<details><summary>the run's whole error</summary>"
        "<pre>RuntimeError: died</pre></details></div>"
    )


def test_a_ray_train_run_error_is_the_users_error_with_rays_wrapper_below() -> None:
    """Ray Train's run error wraps every rank's traceback (WorkerGroupError); the box leads
    with the user's error, as the CLI and wgstore serve show it (issue 41, item 10)."""
    wrapper = "WorkerGroupError: Training failed due to worker errors:\nTraceback (most recent"
    failed = (FailedRank(world_rank=0, type="ValueError", message="bad batch"),)
    errors = run_page_parts(run_data(error=wrapper, failed_ranks=failed))["errors"]
    assert errors.startswith(
        '<div class="error-box"><b>run errored:</b> rank 0: ValueError: bad batch<details>'
    )
    assert "<pre>WorkerGroupError: Training failed due to worker errors:\nTraceback" in errors


def test_a_run_page_states_an_elastic_runs_range_and_each_attempts_workers() -> None:
    parts = run_page_parts(run_data(num_workers=4, min_workers=2, current_workers=3))
    assert dict(facts_of(parts["facts"]))["workers"] == "2..4 (now 3)"
    fixed = run_page_parts(run_data(num_workers=4))
    assert dict(facts_of(fixed["facts"]))["workers"] == "4"
