"""The typed rows' JSON is what ``wgstore groups / runs / runs RUN --json`` and ``/api/...``
printed when the views returned dicts: one example per row type, from a real store.

The expected values below were printed by the dict-returning views (commit 384e487) for the
same scenarios, with the keys added since (an elastic run's sizes, 2026-12-07); times are pinned by their form (``<T+00:00>``: ``datetime.isoformat``, as
``json_default`` writes it; ``<TZ>``: msgspec's form, which an attempt's
``checkpoint_committed_at`` has always had), not by their value (the scenarios use the wall
clock).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import run_scenarios as scenarios

from wgstore.events.run import RunResumed
from wgstore.events.streams import run_stream
from wgstore.projections import catch_up_read_models, worker_group_state
from wgstore.projections.rows import GroupSummary, RunSummary
from wgstore.projections.run_views import run_detail, run_summaries
from wgstore.projections.text import json_line
from wgstore.projections.views import group_summaries, worker_rows

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)")

ERR = "RuntimeError: rank 1 died in err-g2"
ERR_G1 = "RuntimeError: rank 1 died in err-g1"
T = "<T+00:00>"


def printed(row: Any) -> Any:
    """``row.to_json()`` as ``--json`` prints it (``json_line``), read back, times as their form."""
    text = _TIME.sub(lambda m: "<T" + m.group(2) + ">", json_line(row.to_json()))
    return json.loads(text)


GROUP = {
    "group_id": "err-g2", "run_id": "err", "attempt": 2, "status": "SHUT_DOWN",
    "outcome": "errored", "num_workers": 2, "running_workers": 0, "requested_at": T,
    "updated_at": T, "shut_down_at": T, "train_fn": "examples.train:train_fn", "reports": 2,
    "error": ERR,
}  # fmt: skip
WORKERS = [
    {"rank": 0, "node": "0 10.0.0.1", "node_rank": 0, "node_ip": "10.0.0.1", "pid": 1000,
     "status": "shut down", "error": "", "reports": 1, "metrics": {"loss": 0.5}},
    {"rank": 1, "node": "0 10.0.0.1", "node_rank": 0, "node_ip": "10.0.0.1", "pid": 1001,
     "status": "error", "error": ERR, "reports": 1, "metrics": {"loss": 0.5}},
]  # fmt: skip
RUN = {
    "run_id": "err", "name": "err-name", "source": "wgstore", "status": "ERRORED",
    "controller_state": "ERRORED", "attempts": 2, "current_group_id": "err-g2",
    "worker_group_failures": 2, "max_failures": 1, "start_failures": 0,
    "controller_failure_limit": -1, "preemption_failures": 0, "max_preemption_failures": -1,
    "latest_checkpoint": "/ckpt/err/1", "checkpoint_committed_at": T,
    "latest_reported_checkpoint": "/ckpt/err/1", "resumable": True,
    "not_resumable_reason": None, "min_workers": None, "current_workers": 0,
    "desired_workers": None, "orphaned": False, "lease_holder": None,
    "lease_expires_at": None, "created_at": T, "updated_at": T, "ended_at": T, "error": ERR,
    "failed_ranks": [{"world_rank": 1, "type": "RuntimeError", "message": "rank 1 died in err-g2"}],
    "abort_reason": None,
}  # fmt: skip


def _decision(decision: str, group: str, so_far: int, version: int, error: str) -> dict[str, Any]:
    return {
        "version": version, "at": T, "group_id": group, "decision": decision,
        "failure_kind": "worker_group", "failures_so_far": so_far, "limit": 1,
        "reason": error.removeprefix("RuntimeError: "),
        "errors": [{"world_rank": 1, "type": "RuntimeError",
                    "message": error.removeprefix("RuntimeError: ")}],
    }  # fmt: skip


RETRY = _decision("RETRY", "err-g1", 1, 5, ERR_G1)
RAISE = _decision("RAISE", "err-g2", 2, 9, ERR)


def _transition(version: int, old: str, new: str, group: str | None = None) -> dict[str, Any]:
    return {"version": version, "at": T, "from_state": old, "to_state": new, "reason": "",
            "group_id": group}  # fmt: skip


DETAIL = {
    "run": {
        **RUN,
        "num_workers": 2, "resources_per_worker": {"CPU": 0.5},
        "train_fn": "examples.train:train_fn", "final_group_id": "err-g2",
        "lease_s": 60.0, "ray": {}, "version": 11,
    },
    "attempts": [
        {"group_id": "err-g1", "attempt": 1, "status": "SHUT_DOWN", "outcome": "errored",
         "requested_at": T, "latest_checkpoint": "/ckpt/err/1", "checkpoint_committed_at": "<TZ>",
         "latest_reported_checkpoint": "/ckpt/err/1", "error": ERR_G1, "num_workers": 2,
         "number": 1, "decisions": [RETRY]},
        {"group_id": "err-g2", "attempt": 2, "status": "SHUT_DOWN", "outcome": "errored",
         "requested_at": T, "latest_checkpoint": None, "checkpoint_committed_at": None,
         "latest_reported_checkpoint": None, "error": ERR, "num_workers": 2, "number": 2,
         "decisions": [RAISE]},
    ],
    "decisions": [RETRY, RAISE],
    "transitions": [
        _transition(3, "INITIALIZING", "SCHEDULING"),
        _transition(4, "SCHEDULING", "RUNNING", "err-g1"),
        _transition(6, "RUNNING", "RESTARTING"),
        _transition(7, "RESTARTING", "SCHEDULING"),
        _transition(8, "SCHEDULING", "RUNNING", "err-g2"),
        _transition(10, "RUNNING", "ERRORED"),
    ],
    "controllers": [
        {"version": 2, "at": T, "controller_id": "c1", "host": "h", "pid": 7, "resumed": False}
    ],
    "resumes": [],
    "resizes": [],  # an elastic run's sizes (issue 40): none for a fixed run
    "preemptions": [],
    "nodes_lost": [],  # nodes Ray reported dead under its workers (issue 45): none here
    "ray_job": None,  # the driver job, from Ray's export events (issue 45): none here
}  # fmt: skip


@pytest.fixture
def filled(store: Any) -> Any:
    scenarios.errored_budget_exhausted(store)
    scenarios.running(store, "live")
    store.append(run_stream("live"), [RunResumed(by="wgstore resume", reason="lost", attempt=2)])
    return store


@pytest.mark.parametrize("caught_up", [True, False], ids=["read-models", "log"])
def test_summaries_print_as_before_from_the_read_models_and_from_the_log(
    filled: Any, caught_up: bool
) -> None:
    if caught_up:
        catch_up_read_models(filled)
    (group,) = [g for g in group_summaries(filled) if g.group_id == "err-g2"]
    assert printed(group) == GROUP
    (run,) = [r for r in run_summaries(filled) if r.run_id == "err"]
    assert printed(run) == RUN


def test_worker_rows_and_a_run_detail_print_as_before(filled: Any) -> None:
    rows = worker_rows(worker_group_state(filled, "err-g2"))
    assert [printed(row) for row in rows] == WORKERS
    assert printed(run_detail(filled, "err")) == DETAIL
    resumed = printed(run_detail(filled, "live"))
    assert resumed["resumes"] == [{"by": "wgstore resume", "reason": "lost", "attempt": 2}]


def test_an_unreadable_summary_has_every_key_none_but_its_id_status_and_error() -> None:
    assert GroupSummary.unreadable("g", "why").to_json() == {
        **dict.fromkeys(GROUP),
        "group_id": "g",
        "status": "UNREADABLE",
        "error": "why",
    }
    assert RunSummary.unreadable("r", "why").to_json() == {
        **dict.fromkeys(RUN), "run_id": "r", "status": "UNREADABLE", "error": "why",
        "orphaned": False, "failed_ranks": [],
    }  # fmt: skip
