"""``wgstore serve``'s JSON API, /metrics and token, through Starlette's TestClient, against a
real SQLite file and a real PostgreSQL; server-sent events through a real uvicorn."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from projection_builders import Stream, append_stream
from prometheus_client.parser import text_string_to_metric_families
from serve_scenarios import ERROR_MESSAGE, errored_run, live_run, new_run, report, resumed_run
from serve_support import live_server, wait_for
from starlette.testclient import TestClient

from wgstore.events import EventRegistry, EventStore, event_type
from wgstore.projections import catch_up_read_models
from wgstore.serve.app import TOKEN_COOKIE, create_app

TOKEN = "t0ken-for-the-serve-tests-0123456789"


@pytest.fixture
def filled(writer: Any, store_url: str) -> dict[str, str]:
    """Two runs: ``run-live1`` reporting (named with HTML), ``run-err22`` with a failed rank."""
    live_group = live_run(writer, "run-live1", name="<script>alert(1)</script>")
    error_group = errored_run(writer, "run-err22")
    return {"url": store_url, "live_group": live_group, "error_group": error_group}


@pytest.fixture
def client(filled: dict[str, str]) -> Any:
    with TestClient(create_app(filled["url"])) as test_client:
        yield test_client


def test_runs_are_listed_newest_first_filtered_and_paged(client: Any) -> None:
    runs = client.get("/api/runs").json()
    assert [r["run_id"] for r in runs["runs"]] == ["run-err22", "run-live1"]
    assert runs["total"] == 2
    live = runs["runs"][1]
    assert live["name"] == "<script>alert(1)</script>"
    assert (live["status"], live["attempts"], live["max_failures"]) == ("RUNNING", 1, 2)
    assert live["duration_s"] >= 0
    named = client.get("/api/runs", params={"name": "ALERT"}).json()
    assert [r["run_id"] for r in named["runs"]] == ["run-live1"]
    assert client.get("/api/runs", params={"status": "finished"}).json()["total"] == 0
    paged = client.get("/api/runs", params={"limit": 1, "offset": 1}).json()
    assert [r["run_id"] for r in paged["runs"]] == ["run-live1"]
    assert client.get("/api/runs", params={"since": "1h"}).json()["total"] == 2


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"status": "SLEEPING"}, "unknown status SLEEPING"),
        ({"source": "mlflow"}, "unknown source 'mlflow'"),
        ({"since": "yesterday"}, "since: 'yesterday' is not a time"),
        ({"since": "99999999999h"}, "since: '99999999999h' is too long a duration"),
        ({"since": "9999-12-31T23:00-05:00"}, "outside the years 1 to 9999"),
        ({"limit": "ten"}, "limit='ten' is not a whole number"),
    ],
)
def test_bad_run_filters_are_one_clear_error(
    client: Any, params: dict[str, str], says: str
) -> None:
    response = client.get("/api/runs", params=params)
    assert response.status_code == 400
    assert says in response.json()["error"]


def test_a_run_by_prefix_has_its_attempts_and_a_series_per_metric_and_rank(client: Any) -> None:
    run = client.get("/api/runs/run-li").json()
    assert run["run"]["run_id"] == "run-live1"
    assert [a["group_id"] for a in run["attempts"]] == ["run-live1-g1"]
    assert sorted(run["metrics"]) == ["acc", "loss"]
    loss = {(s["attempt"], s["rank"]): [p[:2] for p in s["points"]] for s in run["metrics"]["loss"]}
    assert loss == {(1, 0): [[1, 1.0], [2, 0.5]], (1, 1): [[1, 1.1], [2, 0.6]]}
    assert [(w["rank"], w["reports"], w["metrics"]["acc"]) for w in run["latest"]] == [
        (0, 2, 0.2),
        (1, 2, 0.2),
    ]
    assert [t["to_state"] for t in run["transitions"]] == ["SCHEDULING", "RUNNING"]


def test_a_group_by_prefix_shows_its_workers_error_builder_steps_and_polls(client: Any) -> None:
    group = client.get("/api/groups/run-err2").json()
    assert group["group_id"] == "run-err22-g1"
    assert [(w["rank"], w["status"]) for w in group["workers"]] == [(0, "running"), (1, "error")]
    (failure,) = group["errors"]
    assert (failure["rank"], failure["message"]) == (1, ERROR_MESSAGE)
    assert failure["traceback"].startswith("Traceback")
    assert [b["type"] for b in group["builder"]][:2] == [
        "WorkerGroupStartRequested",
        "PlacementGroupReserved",
    ]
    assert group["builder"][1]["took_ms"] is not None
    assert [p["poll_seq"] for p in group["polls"]] == [1, 3]


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/api/runs/nope", 404, "no run id starts with 'nope'"),
        ("/api/runs/run-", 400, "matches 2 runs"),
        ("/api/groups/zzz", 404, "no worker group id starts with 'zzz'"),
        ("/api/events?type=Nonsense", 400, "'Nonsense' is not an event type"),
        ("/api/events?after=-1", 400, "after=-1 is negative"),
    ],
)
def test_unknown_ambiguous_or_bad_ids_answer_with_the_reason(
    client: Any, path: str, status: int, says: str
) -> None:
    response = client.get(path)
    assert response.status_code == status
    assert says in response.json()["error"]


def test_ids_with_a_slash_are_reachable_encoded(writer: Any, store_url: str) -> None:
    """A run or group id may hold ``/``: the pages link it encoded (``%2F``), which the server
    decodes before routing, so the id must match across the slash (issue 41, item 9)."""
    group = live_run(writer, "team/a")
    with TestClient(create_app(store_url)) as client:
        run = client.get("/api/runs/team%2Fa")
        assert run.status_code == 200, run.text
        assert run.json()["run"]["run_id"] == "team/a"
        assert client.get("/api/groups/team%2Fa-g1").json()["group_id"] == group
        page = client.get("/runs/team%2Fa")
        assert page.status_code == 200
        assert 'data-id="team/a"' in page.text
        assert client.get("/groups/team%2Fa-g1").status_code == 200
        assert client.get("/api/runs/team%2Fb").status_code == 404


def test_a_ray_train_run_error_is_the_users_as_the_cli_shows_it(
    writer: Any, store_url: str
) -> None:
    """The runs page's error cell and the run page show the failed rank's own error, as
    ``wgstore runs RUN`` does, not Ray's WorkerGroupError wrapper with every traceback (issue
    41, item 10); the whole error stays in ``error``."""
    from wgstore.events.run import RankError, RunErrored
    from wgstore.events.worker_group import ErrorInfo
    from wgstore.projections.run_facts import run_facts
    from wgstore.projections.run_views import run_detail

    wrapper = "Training failed due to worker errors:\n[Rank 0 Error Snippet]:\nTraceback (most"
    run = new_run(writer, "run-ray9", "failing").to("SCHEDULING").to("RUNNING", "run-ray9-g1")
    run.to("ERRORED").add(
        RunErrored(
            error=ErrorInfo(type="WorkerGroupError", message=wrapper),
            errors=(RankError(world_rank=0, error=ErrorInfo(type="ValueError", message="bad")),),
        )
    )
    cli_error = next(
        f.text for f in run_facts(run_detail(writer, "run-ray9")) if f.label == "error"
    )
    assert cli_error == "rank 0: ValueError: bad"
    with TestClient(create_app(store_url)) as client:
        (listed,) = client.get("/api/runs").json()["runs"]
        assert listed["error_text"] == cli_error
        assert listed["error"] == f"WorkerGroupError: {wrapper}"
        assert client.get("/api/runs/run-ray9").json()["error_text"] == cli_error


@pytest.mark.parametrize("with_step", [True, False], ids=["step", "no-step"])
def test_a_resumed_runs_charts_continue_attempt_after_attempt(
    writer: Any, store_url: str, with_step: bool
) -> None:
    """Attempt 2 of a resumed run reports steps 3-6 from report index 0: charted at those steps
    (or, without a step metric, after attempt 1's last report), not from x = 0 on top of
    attempt 1 (issue 41, item 11); from the log and from the read models alike."""
    first, second = resumed_run(writer, "run-res1", with_step=with_step)
    expected = (
        ("step", [float(s) for s in first], [float(s) for s in second])
        if with_step
        else ("report", [0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0])
    )
    with TestClient(create_app(store_url)) as client:
        for _ in ("log", "read models"):
            lines = client.get("/api/runs/run-res1").json()["metrics"]["loss"]
            assert [(line["attempt"], line["rank"]) for line in lines] == [(1, 0), (2, 0)]
            assert {line["x"] for line in lines} == {expected[0]}
            assert [[p[0] for p in line["points"]] for line in lines] == list(expected[1:])
            assert [p[3] for p in lines[1]["points"]] == [0, 1, 2, 3]  # the report index
            catch_up_read_models(writer)


def test_events_after_a_position_page_through_the_log(client: Any, filled: Any) -> None:
    everything = client.get("/api/events", params={"after": 0, "limit": 500}).json()
    positions = [e["position"] for e in everything["events"]]
    assert positions == sorted(positions) and len(positions) == everything["head"]
    first = client.get("/api/events", params={"after": 0, "limit": 5}).json()
    assert [e["position"] for e in first["events"]] == positions[:5]
    second = client.get("/api/events", params={"after": first["next"], "limit": 5}).json()
    assert [e["position"] for e in second["events"]] == positions[5:10]
    reports = client.get("/api/events", params={"type": "WorkerReported", "run": "run-live"})
    assert {e["stream_id"] for e in reports.json()["events"]} == {"worker-group-run-live1-g1"}
    assert len(reports.json()["events"]) == 4
    last = client.get("/api/events", params={"limit": 3}).json()
    assert [e["position"] for e in last["events"]] == positions[-3:]
    group = client.get("/api/events", params={"group": "run-err"}).json()
    assert {e["stream_id"] for e in group["events"]} == {"worker-group-run-err22-g1"}


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_are_computed_at_scrape_time(client: Any, filled: Any, writer: Any) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = _metrics(response.text)
    assert samples[("wgstore_store_up", ())] == 1
    assert samples[("wgstore_runs", (("state", "RUNNING"),))] == 2
    assert samples[("wgstore_runs", (("state", "FINISHED"),))] == 0
    assert samples[("wgstore_workers", (("status", "error"),))] == 1
    assert samples[("wgstore_workers", (("status", "running"),))] == 3
    assert samples[("wgstore_run_attempts_total", ())] == 2
    age = samples[
        ("wgstore_run_last_report_age_seconds", (("name", "errored"), ("run_id", "run-err22")))
    ]
    assert 0 <= age < 600
    head = samples[("wgstore_log_head_position", ())]
    # the follower counts the appends per type; a new report shows at the next scrape
    before = samples[("wgstore_events_appended_total", (("type", "WorkerReported"),))]
    assert before == 5
    report(writer, filled["live_group"], 0, 3, loss=0.1)

    def counted() -> Any:
        now = _metrics(client.get("/metrics").text)
        return (
            now[("wgstore_events_appended_total", (("type", "WorkerReported"),))] == before + 1
            and now
        )

    now = wait_for(counted, "the new report counted in /metrics")
    assert now[("wgstore_log_head_position", ())] == head + 1


def test_every_request_needs_the_token_when_one_is_set(filled: Any) -> None:
    with TestClient(create_app(filled["url"], token=TOKEN)) as client:
        for path in (
            "/",
            "/runs/run-live1",
            "/api/runs",
            "/api/stream",
            "/metrics",
            "/static/live.js",
        ):
            response = client.get(path)
            assert response.status_code == 401, path
            assert "give the token" in response.text
        assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/runs", params={"token": TOKEN[:-1]}).status_code == 401
        bearer = client.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status_code == 200
        first = client.get("/runs/run-li", params={"token": TOKEN, "x": "1"})
        assert first.status_code == 200
        (redirect,) = first.history  # the token leaves the address bar for a cookie
        assert redirect.status_code == 303
        assert redirect.headers["location"] == "/runs/run-li?x=1"
        assert TOKEN_COOKIE in redirect.headers["set-cookie"]
        assert "httponly" in redirect.headers["set-cookie"].lower()
        assert client.get("/api/runs").status_code == 200  # the cookie from the first visit


def _read_events(
    url: str, wanted_head: int, found: list[dict[str, Any]], ready: threading.Event
) -> None:
    with httpx.Client(timeout=60) as http, http.stream("GET", url) as response:
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                message = json.loads(line[6:])
                if kind == "status":
                    ready.set()
                if kind == "append":
                    found.append(message)
                    if message["head"] >= wanted_head:
                        return


def test_one_follower_fans_each_append_out_to_every_open_stream(filled: Any, writer: Any) -> None:
    app = create_app(filled["url"], follower_wait_s=0.5)
    with live_server(app) as base:
        head = writer.head()
        found: list[list[dict[str, Any]]] = [[], []]
        ready = [threading.Event(), threading.Event()]
        readers = [
            threading.Thread(
                target=_read_events, args=(f"{base}/api/stream", head + 1, found[i], ready[i])
            )
            for i in range(2)
        ]
        for reader in readers:
            reader.start()
        for event in ready:
            assert event.wait(60), "a stream sent no status"
        report(writer, filled["live_group"], 1, 3, loss=0.2)
        for reader in readers:
            reader.join(timeout=60)
            assert not reader.is_alive(), "a stream did not see the append within 60 s"
        for messages in found:
            listed = [e for m in messages for e in m["events"]]
            assert {
                "position": head + 1,
                "stream_id": "worker-group-run-live1-g1",
                "type": "WorkerReported",
            } in listed


def test_the_dashboard_alerts_and_docs_name_only_metrics_the_server_exports(client: Any) -> None:
    exported = {name for name, _labels in _metrics(client.get("/metrics").text)}
    docs = Path(__file__).resolve().parents[2] / "docs"
    for name in ("grafana-wgstore.json", "wgstore-alerts.yml", "serve.md"):
        text = (docs / name).read_text(encoding="utf-8")
        named = set(re.findall(r"\bwgstore_[a-z_]+[a-z]\b", text)) - {"wgstore_serve_token"}
        assert named, name
        assert named <= exported, (name, sorted(named - exported))
    json.loads((docs / "grafana-wgstore.json").read_text(encoding="utf-8"))


OTHER_PROGRAM = EventRegistry()
"""Another program's event types: the server has never heard of them."""


@event_type("CheckpointPinned", version=1, registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class CheckpointPinned:
    path: str


def test_a_foreign_event_type_is_listed_raw_and_can_be_filtered(client: Any, filled: Any) -> None:
    with EventStore.open(filled["url"], registry=OTHER_PROGRAM) as other:
        other.append("pins-1", [CheckpointPinned(path="<img src=x onerror=alert(1)>")])
    events = client.get("/api/events", params={"type": "CheckpointPinned"}).json()["events"]
    (pinned,) = events
    assert (pinned["stream_id"], pinned["data"]) == (
        "pins-1",
        {"path": "<img src=x onerror=alert(1)>"},
    )
    assert "<img src=x onerror=alert(1)>" in pinned["summary"]
    assert client.get("/api/runs").json()["total"] == 2  # the listing is not disturbed


def test_metrics_read_from_the_read_models_agree_with_the_log_folded(
    client: Any, writer: Any
) -> None:
    started = new_run(writer, "run-new33", "not polled yet")
    started.to("SCHEDULING").to("RUNNING", "run-new33-g1")
    stream = Stream("run-new33-g1", num_workers=3, run_id="run-new33")
    append_stream(writer, stream.running())  # workers started, no poll yet
    folded = _metrics(client.get("/metrics").text)
    assert folded[("wgstore_read_models_lag_events", ())] > 0
    catch_up_read_models(writer)
    projected = _metrics(client.get("/metrics").text)
    assert projected[("wgstore_read_models_lag_events", ())] == 0
    assert projected[("wgstore_read_models_lag_seconds", ())] == 0
    for name in ("wgstore_workers", "wgstore_runs", "wgstore_run_orphaned", "wgstore_run_workers"):
        assert {k: v for k, v in projected.items() if k[0] == name} == {
            k: v for k, v in folded.items() if k[0] == name
        }, name
    workers = {k[1][0][1]: v for k, v in projected.items() if k[0] == "wgstore_workers"}
    assert workers == {"started": 3, "running": 3, "finished": 0, "error": 1}
    ages = [k for k in projected if k[0] == "wgstore_run_last_report_age_seconds"]
    assert len(ages) == 3 and set(ages) == {k for k in folded if k[0] == ages[0][0]}
    for key in ages:  # the same moment, read a little later
        assert 0 <= projected[key] - folded[key] < 120


def test_on_loopback_only_loopback_host_names_are_answered(filled: Any) -> None:
    app = create_app(filled["url"], allowed_hosts=["127.0.0.1", "localhost"])
    with TestClient(app, base_url="http://localhost:8275") as client:
        assert client.get("/api/runs").status_code == 200
    with TestClient(app, base_url="http://rebound.example:8275") as client:
        refused = client.get("/api/runs")
        assert refused.status_code == 400
        assert refused.text == "Invalid host header"


def test_an_elastic_runs_current_and_desired_workers_are_metrics(client: Any, writer: Any) -> None:
    """Issue 40: the size of each live run, now and as its controller last chose it, from the
    read models and from the log folded alike."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
    import run_scenarios

    run_scenarios.elastic_resized(writer)
    folded = _metrics(client.get("/metrics").text)
    catch_up_read_models(writer)
    projected = _metrics(client.get("/metrics").text)
    for samples in (folded, projected):
        sizes = {
            dict(labels)["size"]: value
            for (name, labels), value in samples.items()
            if name == "wgstore_run_workers" and dict(labels)["run_id"] == "ela"
        }
        assert sizes == {"current": 4, "desired": 4}
