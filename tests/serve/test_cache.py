"""The answers the pages share: one computation per question and log head."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from serve_scenarios import live_run, report
from starlette.testclient import TestClient

from wgstore.serve.app import create_app
from wgstore.serve.cache import AnswerCache


def test_an_answer_is_computed_once_per_head_and_an_error_is_not_kept() -> None:
    cache = AnswerCache()
    calls: list[int] = []

    def compute() -> bytes:
        calls.append(1)
        return f"answer {len(calls)}".encode()

    assert cache.get("/a", 1, compute) == b"answer 1"
    assert cache.get("/a", 1, compute) == b"answer 1"
    assert cache.get("/b", 1, compute) == b"answer 2"
    assert cache.get("/a", 2, compute) == b"answer 3"  # the log moved on
    with pytest.raises(ValueError, match="store down"):
        cache.get("/c", 2, lambda: (_ for _ in ()).throw(ValueError("store down")))
    assert cache.get("/c", 2, compute) == b"answer 4"
    assert cache.computed == 4


def test_an_answer_older_than_its_ttl_is_computed_again() -> None:
    cache = AnswerCache(ttl_s=0.0, size=1)
    assert cache.get("/a", 1, lambda: b"1") == b"1"
    assert cache.get("/a", 1, lambda: b"2") == b"2"
    assert cache.get("/b", 1, lambda: b"3") == b"3"  # /a evicted (size 1)


def test_callers_asking_meanwhile_wait_for_the_one_computation() -> None:
    cache = AnswerCache()
    release = threading.Event()
    entered = threading.Event()
    calls: list[int] = []

    def slow() -> bytes:
        calls.append(1)
        entered.set()
        assert release.wait(60)
        return b"shared"

    got: list[bytes] = []
    first = threading.Thread(target=lambda: got.append(cache.get("/a", 1, slow)))
    first.start()
    assert entered.wait(60)
    others = [
        threading.Thread(target=lambda: got.append(cache.get("/a", 1, slow))) for _ in range(5)
    ]
    for thread in others:
        thread.start()
    release.set()
    for thread in [first, *others]:
        thread.join(60)
    assert got == [b"shared"] * 6
    assert calls == [1]


def test_pages_asking_the_same_run_at_the_same_head_share_one_answer(
    writer: Any, store_url: str
) -> None:
    group_id = live_run(writer, "run-share1")
    app = create_app(store_url)
    with TestClient(app) as client:
        answers = [client.get("/api/runs/run-share1").json() for _ in range(10)]
        assert app.state.answers.computed == 1
        assert all(answer == answers[0] for answer in answers), [
            a for a in answers if a != answers[0]
        ]
        report(writer, group_id, 0, 3, loss=0.1)  # a new head: a new answer, at once
        fresh = client.get("/api/runs/run-share1").json()
        assert app.state.answers.computed == 2
        assert [w["reports"] for w in fresh["latest"]] == [3, 2]


def test_pages_saying_the_head_they_saw_are_served_any_answer_that_holds_it(
    writer: Any, store_url: str
) -> None:
    group_id = live_run(writer, "run-seen1")
    app = create_app(store_url)
    with TestClient(app) as client:
        first = client.get("/api/runs/run-seen1")
        head = writer.head()
        assert app.state.answers.computed == 1
        for seen in (1, head, head):  # an older head, or the one the answer holds: no new answer
            assert client.get(f"/api/runs/run-seen1?head={seen}").json() == first.json()
        assert app.state.answers.computed == 1
        report(writer, group_id, 0, 3, loss=0.1)
        newer = client.get(f"/api/runs/run-seen1?head={writer.head()}")  # announced: computed
        assert app.state.answers.computed == 2
        assert [w["reports"] for w in newer.json()["latest"]] == [3, 2]
        missing = client.get("/api/runs/nope?head=3")
        assert missing.status_code == 404
        assert missing.json()["error"].startswith("no run id starts with 'nope'")
