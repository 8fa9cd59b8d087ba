"""``/api/stream?watch=...`` through a real uvicorn over a real SQLite and PostgreSQL: a stream is
sent the appends that concern what it watches, listing only those, and the log's head (no
events) about once a second otherwise; a bad ``watch`` is one clear 400."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serve_scenarios import errored_run, live_run, new_run, next_attempt, ray_train_run, report
from serve_support import StreamClient, live_server, wait_for
from starlette.testclient import TestClient
from test_api import OTHER_PROGRAM, CheckpointPinned

from wgstore.events import EventStore
from wgstore.serve.app import create_app
from wgstore.serve.interest import MAX_WATCHED

TOKEN = "t0ken-for-the-interest-tests-0123456789"


@pytest.fixture
def served(writer: Any, store_url: str) -> Iterator[dict[str, Any]]:
    """Two runs (``run-live1`` reporting, ``run-err22``) and the server over them."""
    live_group = live_run(writer, "run-live1")
    error_group = errored_run(writer, "run-err22")
    with live_server(create_app(store_url, follower_wait_s=0.5)) as base:
        yield {"base": base, "live_group": live_group, "error_group": error_group}


def _open(base: str, query: str, *, head: int | None = None) -> StreamClient:
    """A stream of ``query``, once it answered and, with ``head`` (the log's head before the
    test's own appends), once it was told of that head: what the server's follower had not yet
    read when the stream opened comes to it as appends too (they may concern it)."""
    client = StreamClient(f"{base}/api/stream{query}")
    wait_for(client.answered, f"the stream {query!r} answered")
    if head is not None:
        wait_for(lambda: client.heads() >= head, f"the stream {query!r} caught up to {head}")
    return client


def test_a_stream_watching_one_group_is_sent_nothing_of_another_but_the_head(
    served: dict[str, Any], writer: Any
) -> None:
    base, mine, other = served["base"], served["live_group"], served["error_group"]
    start = writer.head()
    watching = _open(base, f"?watch=group:{mine}", head=start)
    others = _open(base, f"?watch=group:{other}", head=start)
    everything = _open(base, "", head=start)
    assert [kind for kind, _ in watching.messages[:1]] == ["status"]  # first, always
    report(writer, other, 0, 2, loss=0.4)
    head = writer.head()
    wait_for(lambda: watching.heads() >= head, "the head reached the page watching another group")
    wait_for(lambda: others.heads() >= head, "the append reached the page watching its group")
    wait_for(lambda: everything.heads() >= head, "the append reached the stream of everything")
    # (what the follower read late of the fixture's own appends may concern a page: not news)
    assert [e for e in watching.listed() if e["position"] > start] == []
    assert watching.kinds("head")[-1] == {"kind": "head", "head": head}
    assert others.listed()[-1] == {
        "position": head,
        "stream_id": f"worker-group-{other}",
        "type": "WorkerReported",
    }
    assert head in {e["position"] for e in everything.listed()}
    report(writer, mine, 1, 3, loss=0.3)
    own = writer.head()
    wait_for(lambda: own in {e["position"] for e in watching.listed()}, "the page's own append")
    assert {e["stream_id"] for e in watching.listed()} == {f"worker-group-{mine}"}
    assert all(e["stream_id"] == f"worker-group-{other}" for e in others.listed())


def test_a_run_is_sent_its_new_attempt_even_before_its_stream_names_it(
    served: dict[str, Any], writer: Any
) -> None:
    recorded = ray_train_run(writer, "run-ray1")
    another = ray_train_run(writer, "run-ray2")
    start = writer.head()
    watching = _open(served["base"], "?watch=run:run-ray1&watch=group:run-ray1-g1", head=start)
    next_attempt(writer, another, "ray_train")
    next_attempt(writer, recorded, "ray_train")  # no event of run-ray1's stream names -g2
    head = writer.head()
    wait_for(lambda: watching.heads() >= head, "the run's page had the head")
    started = next(iter(writer.read_stream("worker-group-run-ray1-g2")))
    news = [e for e in watching.listed() if e["position"] > start]  # the follower may be late
    assert [e for e in news if e["type"] == "WorkerGroupStartRequested"] == [
        {
            "position": started.position,
            "stream_id": "worker-group-run-ray1-g2",
            "type": "WorkerGroupStartRequested",
            "run_id": "run-ray1",
        }
    ]
    assert {e["stream_id"] for e in news} == {
        "run-run-ray1",
        "worker-group-run-ray1-g2",
    }


def test_the_runs_list_watches_run_and_group_streams_only(
    served: dict[str, Any], writer: Any, store_url: str
) -> None:
    start = writer.head()
    runs = _open(served["base"], "?watch=runs", head=start)
    with EventStore.open(store_url, registry=OTHER_PROGRAM) as other:
        other.append("pins-1", [CheckpointPinned(path="/ckpt/1")])
    head = writer.head()
    wait_for(lambda: runs.heads() >= head, "the head after another program's append")
    assert [e for e in runs.listed() if e["position"] > start] == []
    new_run(writer, "run-new9", "new")
    head = writer.head()
    wait_for(lambda: runs.heads() >= head, "the new run")
    assert {e["stream_id"] for e in runs.listed() if e["position"] > start} == {"run-run-new9"}


def test_a_stream_with_the_token_in_its_query_watches_what_it_says(
    writer: Any, store_url: str
) -> None:
    group = live_run(writer, "run-tok1")
    with live_server(create_app(store_url, token=TOKEN, follower_wait_s=0.5)) as base:
        refused = _open(base, f"?watch=group:{group}")
        assert refused.status_code == 401
        watching = _open(base, f"?token={TOKEN}&watch=group:{group}")
        assert watching.status_code == 200
        report(writer, group, 0, 3, loss=0.2)
        appended = writer.head()
        wait_for(
            lambda: appended in {e["position"] for e in watching.listed()},
            "the append to the watched group",
        )


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"watch": "everything"}, "watch='everything' is not all, runs, run:ID or group:ID"),
        ({"watch": "run:"}, "watch='run:' is not all, runs, run:ID or group:ID"),
        ({"watch": "group"}, "watch='group' is not all, runs, run:ID or group:ID"),
        ({"stream": "run-x"}, "unknown parameter 'stream'; /api/stream takes watch=all"),
        ({"watch": [f"group:g{i}" for i in range(MAX_WATCHED + 1)]}, f"at most {MAX_WATCHED}"),
    ],
)
def test_a_bad_watch_is_one_clear_error(
    writer: Any, store_url: str, query: dict[str, Any], says: str
) -> None:
    with TestClient(create_app(store_url)) as client:
        response = client.get("/api/stream", params=query)
    assert response.status_code == 400
    assert says in response.json()["error"]
