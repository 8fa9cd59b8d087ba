"""The run read models (``wg_runs``, ``wg_run_decisions``) say what ``project_run`` and the
attempts' folds say, on both backends; the listing says the same from the read model and the log."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import run_scenarios as scenarios
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgstore.events import EventRegistry, EventStore, UnknownEvent, event_type
from wgstore.events.run import RunAborted, RunFinished
from wgstore.events.schema import wg_run_decisions, wg_runs
from wgstore.events.streams import run_stream
from wgstore.projections import catch_up_read_models, rebuild_read_models, worker_group_state
from wgstore.projections.projector import read_model_rows
from wgstore.projections.run_rows import (
    attempt_of,
    decision_rows,
    needs_controller,
    order_attempts,
    orphaned,
    run_row,
)
from wgstore.projections.run_state import is_orphaned, project_run
from wgstore.projections.run_views import run_summaries
from wgstore.projections.views import read_model_problems, read_model_status

OTHER_PROGRAM = EventRegistry()


@event_type("RunNoteAdded", version=1, registry=OTHER_PROGRAM)
@dataclass(frozen=True)
class RunNoteAdded:
    """An event type a newer wgstore appends to run streams (this wgstore does not know it)."""

    note: str


# wgstore's streams (run-, worker-group-) take only wgstore's types (events/streams.py), so a type
# this reader does not know gets there from a newer wgstore: this one stands for such a type.
RunNoteAdded.__module__ = "wgstore.events.newer"


JSON_COLUMNS = {"resources_per_worker", "failed_ranks", "ray", "errors"}


def _normal(row: dict[str, Any]) -> dict[str, Any]:
    clean = {}
    for name, value in row.items():
        if name in JSON_COLUMNS and isinstance(value, str):
            value = json.loads(value)
        elif isinstance(value, datetime):
            value = (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
        elif name == "needs_controller":
            value = bool(value)
        clean[name] = value
    return clean


def _rows(store: Any, table: sa.Table, run_id: str) -> list[dict[str, Any]]:
    query = sa.select(table).where(table.c.run_id == run_id).order_by(*table.primary_key.columns)
    with store.engine.connect() as connection:
        return [_normal(dict(row)) for row in connection.execute(query).mappings()]


def _expected(store: Any, run: scenarios.Run) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The row and decision rows from the pure folds: project_run + each attempt's state."""
    state = project_run(store.read_stream(run_stream(run.run_id)))
    attempts = [attempt_of(worker_group_state(store, g)) for g in run.groups]
    row = run_row(state, order_attempts(state, attempts))
    row["projection_error"] = None
    return _normal(row), [_normal(d) for d in decision_rows(state)]


@pytest.mark.parametrize("scenario", scenarios.ALL, ids=lambda s: s.__name__)
def test_the_run_row_is_the_fold_of_the_run_and_its_attempts(store: Any, scenario: Any) -> None:
    run = scenario(store)
    catch_up_read_models(store)
    (row,) = _rows(store, wg_runs, run.run_id)
    expected, decisions = _expected(store, run)
    assert row == expected
    assert _rows(store, wg_run_decisions, run.run_id) == decisions


def test_each_scenario_reads_as_it_should(store: Any) -> None:
    for scenario in scenarios.ALL:
        scenario(store)
    scenarios.running(store, "orph", lease_expired=True)
    catch_up_read_models(store)
    rows = {
        r["run_id"]: r
        for r in (
            _rows(store, wg_runs, rid)[0] for rid in ("fin", "err", "abt", "live", "orph", "ray")
        )
    }
    fin, err, abt, live, orph, ray = (rows[k] for k in ("fin", "err", "abt", "live", "orph", "ray"))
    assert (fin["status"], fin["attempts"], fin["worker_group_failures"]) == ("FINISHED", 2, 1)
    assert (fin["max_failures"], fin["latest_checkpoint"]) == (2, "/ckpt/fin/2")
    assert (fin["current_group_id"], fin["final_group_id"]) == ("fin-g2", "fin-g2")
    assert (err["status"], err["attempts"], err["worker_group_failures"]) == ("ERRORED", 2, 2)
    assert err["last_decision"] == "RAISE"
    assert err["latest_checkpoint"] == "/ckpt/err/1"  # attempt 2 reported none: attempt 1's
    assert err["failed_ranks"] == [
        {"world_rank": 1, "type": "RuntimeError", "message": "rank 1 died in err-g2"}
    ]
    assert (abt["status"], abt["abort_reason"], abt["needs_controller"]) == (
        "ABORTED",
        "SIGINT",
        False,
    )
    assert (live["status"], live["needs_controller"]) == ("RUNNING", True)
    assert orph["needs_controller"] is True
    assert (ray["source"], ray["ray"], ray["needs_controller"]) == (
        "ray_train",
        scenarios.RAY_FIELDS,
        False,
    )
    assert (fin["source"], fin["train_fn"], fin["num_workers"]) == (
        "wgstore",
        scenarios.TRAIN_FN,
        2,
    )
    summaries = {s.run_id: s for s in run_summaries(store)}
    assert {k for k, s in summaries.items() if s.orphaned} == {"orph"}


def test_orphaned_of_a_row_is_is_orphaned_of_the_run(store: Any) -> None:
    scenarios.running(store, "live")
    scenarios.aborted(store)
    scenarios.from_ray_train(store)
    now = datetime.now(UTC)
    for run_id in ("live", "abt", "ray"):
        state = project_run(store.read_stream(run_stream(run_id)))
        for expires in (None, now, now.replace(year=now.year + 1)):
            assert orphaned(needs_controller(state), expires, now) == is_orphaned(
                state, expires, now
            ), (run_id, expires)


def test_the_listing_says_the_same_from_the_read_model_and_from_the_log(store: Any) -> None:
    for scenario in scenarios.ALL:
        scenario(store)
    scenarios.running(store, "orph", lease_expired=True)
    now = datetime.now(UTC)
    from_log = run_summaries(store, from_log=True, now=now)
    catch_up_read_models(store)
    assert run_summaries(store, now=now) == from_log
    assert [s.run_id for s in from_log] == ["fin", "err", "abt", "live", "ray", "orph"]


def test_the_listing_reads_each_lease_as_it_is_now(store: Any) -> None:
    """Leases are live state, not in the log: a lease given up after the read models caught up
    shows at once (the run is orphaned), from the read models as from the log."""
    from wgstore.events.leases import release_lease

    scenarios.running(store, "live")
    catch_up_read_models(store)
    now = datetime.now(UTC)
    (held,) = run_summaries(store, now=now)
    assert held.lease_holder == "c1" and held.lease_expires_at is not None and not held.orphaned
    assert release_lease(store, "live", "c1")
    (released,) = run_summaries(store, now=now)
    assert released.lease_holder is None and released.lease_expires_at is None
    assert released.orphaned
    assert run_summaries(store, now=now) == run_summaries(store, from_log=True, now=now)


def test_a_current_listing_is_one_statement(store: Any) -> None:
    """Every run, its lease and the read models' lag in one statement (one round trip on
    PostgreSQL); one more only when the read models lag (which streams moved)."""
    for scenario in scenarios.ALL:
        scenario(store)
    catch_up_read_models(store)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's read transaction
            statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        assert len(run_summaries(store)) == len(scenarios.ALL)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)
    assert len(statements) == 1


def test_a_run_row_follows_its_attempts_when_only_their_streams_change(store: Any) -> None:
    run = scenarios.running(store, "live")
    catch_up_read_models(store)
    assert _rows(store, wg_runs, "live")[0]["latest_checkpoint"] == "/ckpt/live/1"
    run.group("live-g2", checkpoint="/ckpt/live/2")  # a group stream only; the run stream waits
    catch_up_read_models(store)
    row = _rows(store, wg_runs, "live")[0]
    assert (row["attempts"], row["latest_checkpoint"]) == (2, "/ckpt/live/2")
    assert row == _expected(store, run)[0]


def test_unknown_event_types_in_a_run_stream_are_stepped_over(store: Any) -> None:
    run = scenarios.finished_after_a_retry(store)
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        other.append(run_stream("fin"), [RunNoteAdded(note="from a newer wgstore")])
    catch_up_read_models(store)
    row = _rows(store, wg_runs, "fin")[0]
    assert row["projection_error"] is None
    assert row["status"] == "FINISHED"
    assert row == _expected(store, run)[0]
    assert any(isinstance(r.event, UnknownEvent) for r in store.read_stream(run_stream("fin")))


def test_a_stream_named_run_that_is_not_a_run_gets_no_row(store: Any) -> None:
    with EventStore.open(store.url, registry=OTHER_PROGRAM) as other:
        other.append("run-notes", [RunNoteAdded(note="not a run")])
    store.append("run-aborted-only", [RunAborted(reason="no RunCreated first")])
    assert catch_up_read_models(store) == 2
    assert _rows(store, wg_runs, "notes") == _rows(store, wg_runs, "aborted-only") == []


def test_a_run_stream_the_fold_refuses_keeps_its_last_good_state(store: Any) -> None:
    run = scenarios.running(store, "bad")
    run.add(RunFinished(group_id="bad-g1"), RunAborted(reason="after the end"))
    catch_up_read_models(store)
    row = _rows(store, wg_runs, "bad")[0]
    assert row["status"] == "FINISHED"
    assert "already ended" in row["projection_error"]
    (refused,) = read_model_status(store).broken_runs
    assert refused[0] == "bad" and "already ended" in refused[1]
    from_read_model = run_summaries(store)
    (bad,) = from_read_model
    assert bad.status == "UNREADABLE" and bad.error is not None and "already ended" in bad.error
    assert run_summaries(store, from_log=True) == from_read_model


def test_a_rebuild_gives_the_same_rows_as_catching_up_event_by_event(store: Any) -> None:
    for scenario in scenarios.ALL:
        scenario(store)
    catch_up_read_models(store, batch_size=3)
    with store.engine.connect() as connection:
        caught_up = read_model_rows(connection)
    assert len(caught_up["wg_runs"]) == 5
    assert len(caught_up["wg_run_decisions"]) == 3
    rebuild_read_models(store)
    assert read_model_problems(store) == ([], 0)
    with store.engine.connect() as connection:
        rebuilt = read_model_rows(connection)
    assert {k: len(v) for k, v in rebuilt.items()} == {k: len(v) for k, v in caught_up.items()}


def test_a_ray_train_run_finds_its_attempts_by_run_id_when_no_transition_names_them(
    store: Any,
) -> None:
    run = scenarios.Run(store, "rt", context=None, ray=scenarios.RAY_FIELDS)
    run.to("SCHEDULING").to("RUNNING")  # Ray's controller states, no group named
    run.group("rt-g1", checkpoint="/ckpt/rt/1")
    catch_up_read_models(store)
    row = _rows(store, wg_runs, "rt")[0]
    assert (row["source"], row["attempts"], row["current_group_id"]) == ("ray_train", 1, "rt-g1")
    assert row["latest_checkpoint"] == "/ckpt/rt/1"
    assert row["num_workers"] is None  # no scaling config recorded
    assert row == _expected(store, run)[0]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chosen=st.lists(st.sampled_from(scenarios.ALL), min_size=1, max_size=3, unique=True),
    batch_size=st.integers(1, 40),
)
def test_any_batch_boundaries_give_the_rows_of_the_folds(
    tmp_path_factory: pytest.TempPathFactory, chosen: list[Any], batch_size: int
) -> None:
    """SQLite only (a fresh file per example): where batches end never changes a run's rows."""
    url = f"sqlite:///{tmp_path_factory.mktemp('runs') / 'wgstore.db'}"
    with EventStore.open(url) as store:
        runs = [scenario(store) for scenario in chosen]
        catch_up_read_models(store, batch_size=batch_size)
        for run in runs:
            expected, decisions = _expected(store, run)
            assert _rows(store, wg_runs, run.run_id) == [expected]
            assert _rows(store, wg_run_decisions, run.run_id) == decisions


def _both_listings(store: Any) -> None:
    """Runs and groups listed from the read models (corrected for what they have not caught up
    on) are what a fold of the whole log lists."""
    from wgstore.projections.behind import read_models_behind
    from wgstore.projections.views import group_summaries

    now = datetime.now(UTC)
    assert read_models_behind(store) is not None  # corrected, not folded from the log
    assert run_summaries(store, now=now) == run_summaries(store, from_log=True, now=now)
    assert group_summaries(store) == group_summaries(store, from_log=True)


def test_read_models_caught_up_part_way_list_what_the_log_says(store: Any) -> None:
    for scenario in scenarios.ALL:
        scenario(store)
    scenarios.running(store, "orph", lease_expired=True)
    _both_listings(store)  # never projected
    while catch_up_read_models(store, batch_size=7, max_batches=1):
        _both_listings(store)  # 7 events further each time, ending mid-run and mid-group
    _both_listings(store)  # current


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chosen=st.lists(st.sampled_from(scenarios.ALL), min_size=1, max_size=4, unique=True),
    batch_size=st.integers(1, 30),
    batches=st.integers(0, 5),
)
def test_read_models_behind_at_any_point_list_what_the_log_says(
    tmp_path_factory: pytest.TempPathFactory, chosen: list[Any], batch_size: int, batches: int
) -> None:
    """SQLite only (a fresh file per example): wherever the read models stopped, the listings
    read from them say what the log says."""
    url = f"sqlite:///{tmp_path_factory.mktemp('behind') / 'wgstore.db'}"
    with EventStore.open(url) as store:
        for scenario in chosen:
            scenario(store)
        catch_up_read_models(store, batch_size=batch_size, max_batches=batches)
        _both_listings(store)


def test_updated_is_the_runs_latest_event_in_any_stream_reports_included(store: Any) -> None:
    """A run that reports after its last run-stream event is updated when it last reported:
    the column that shows a stalled run (issue 41, item 12). From the read models (a report
    moves its group's row, not the run's), from a listing the read models lag, from the log,
    and in the run's detail alike."""
    from wgstore.events.streams import group_stream
    from wgstore.events.worker_group import WorkerReported
    from wgstore.projections.run_views import run_detail

    scenarios.running(store, "live")
    last_of_run = list(store.read_stream(run_stream("live")))[-1].recorded_at
    catch_up_read_models(store)

    def report(index: int) -> datetime:
        (recorded,) = store.append(
            group_stream("live-g1"), [WorkerReported(world_rank=0, index=index, metrics={})]
        )
        return recorded.recorded_at

    report(2)
    catch_up_read_models(store)  # the group's row moved past the run's
    reported = report(3)  # and one report the read models have not applied
    assert reported > last_of_run
    now = datetime.now(UTC)
    (lagging,) = run_summaries(store, now=now)
    assert lagging.updated_at == reported
    catch_up_read_models(store)
    (current,) = run_summaries(store, now=now)
    assert current.updated_at == reported
    (folded,) = run_summaries(store, from_log=True, now=now)
    assert folded.updated_at == reported
    assert run_detail(store, "live", now=now).run.updated_at == reported


def test_an_ended_run_shows_no_lease_though_its_row_is_left(store: Any) -> None:
    """A finished run whose lease row its holder left behind shows no lease: not "lease c1
    until ..." as if a driver were alive (issue 41, item 13)."""
    from wgstore.events.leases import acquire_lease
    from wgstore.projections.run_facts import run_facts
    from wgstore.projections.run_views import run_detail

    scenarios.finished_after_a_retry(store)
    scenarios.running(store, "live")
    assert acquire_lease(store, "fin", "c1", 60.0, now=datetime.now(UTC))
    catch_up_read_models(store)
    now = datetime.now(UTC)
    for summaries in (run_summaries(store, now=now), run_summaries(store, from_log=True, now=now)):
        by_id = {s.run_id: s for s in summaries}
        assert (by_id["fin"].lease_holder, by_id["fin"].lease_expires_at) == (None, None)
        assert by_id["live"].lease_holder == "c1"  # a live run's lease shows
    detail = run_detail(store, "fin", now=now)
    assert detail.run.lease_holder is None
    assert "lease" not in [fact.label for fact in run_facts(detail)]
    assert "lease" in [fact.label for fact in run_facts(run_detail(store, "live", now=now))]
