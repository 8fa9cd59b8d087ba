"""Every example query of docs/sql.md runs on both backends and answers what it says."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from projection_builders import Stream, append_stream, error, stopped

from wgstore.events.worker_group import StartStage, WorkerReported
from wgstore.projections import catch_up_read_models
from wgstore.projections.read_models import READ_MODEL_TABLES

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"
_SECTION = re.compile(r"^### (\d+)\. (.+)$", re.MULTILINE)
_BLOCK = re.compile(r"^```sql(?: (sqlite|postgresql))?\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _queries() -> dict[int, dict[str, str]]:
    """Query number -> backend ('sqlite', 'postgresql' or '' for both) -> SQL."""
    text = DOC.read_text()
    sections = list(_SECTION.finditer(text))
    queries: dict[int, dict[str, str]] = {}
    for section, following in zip(sections, [*sections[1:], None], strict=True):
        body = text[section.end() : following.start() if following else len(text)]
        blocks = {backend or "": sql for backend, sql in _BLOCK.findall(body)}
        queries[int(section.group(1))] = blocks
    return queries


QUERIES = _queries()


def _sql_for(number: int, backend: str) -> str:
    blocks = QUERIES[number]
    return blocks.get(backend) or blocks[""]


def test_the_doc_has_at_least_ten_queries_each_for_both_backends() -> None:
    assert len(QUERIES) >= 10
    for number, blocks in QUERIES.items():
        assert "" in blocks or {"sqlite", "postgresql"} <= set(blocks), number


def test_every_read_model_column_is_explained_in_the_doc() -> None:
    text = DOC.read_text()
    for table in READ_MODEL_TABLES:
        section = text.split(f"## `{table.name}`", 1)[1].split("\n## ", 1)[0]
        for column in table.columns:
            assert f"| `{column.name}` |" in section, f"{table.name}.{column.name}"


def _stream(group_id: str, n: int, run_id: str, attempt: int) -> Stream:
    return Stream(
        group_id,
        num_workers=n,
        run_id=run_id,
        attempt=attempt,
        start=datetime.now(UTC),
        step=timedelta(milliseconds=10),
    )


@pytest.fixture
def scenario(store: Any) -> Any:
    """Four groups of two runs: errored, running, failed to start, finished."""
    g1 = _stream("g1", 4, "r1", 1).running().reported(0, loss=0.9).polled()
    g1.polled(stopped(3, error("CUDA out of memory")), unchanged=3)
    g1.shutdown_requested("worker failed").shut_down()
    g2 = _stream("g2", 2, "r1", 2).running().polled().reported(0, loss=0.5)
    g2.reported(1, loss=0.25).reported(0, "/ckpt/2", loss=0.125)
    g2.poll_seq += 5  # five polls lost with a crashed executor
    g2.polled(unchanged=2)
    g3 = _stream("g3", 2, "r2", 1).requested().start_failed(StartStage.PLACEMENT_GROUP, ())
    g4 = _stream("g4", 1, "r2", 2).running().polled(stopped(0)).shutdown_requested().shut_down()
    for stream in (g1, g2, g3, g4):
        append_stream(store, stream)
    catch_up_read_models(store)
    return store


def _run(store: Any, number: int, **params: Any) -> list[Any]:
    sql = _sql_for(number, store.engine.dialect.name)
    with store.engine.connect() as connection:
        return list(connection.execute(sa.text(sql), params).mappings())


def test_query_1_lists_the_running_groups(scenario: Any) -> None:
    rows = _run(scenario, 1)
    assert [(r["group_id"], r["running_workers"]) for r in rows] == [("g2", 2)]


def test_query_2_lists_every_attempt_of_a_run(scenario: Any) -> None:
    rows = _run(scenario, 2, run_id="r1")
    assert [(r["attempt"], r["status"], r["outcome"]) for r in rows] == [
        (1, "SHUT_DOWN", "errored"),
        (2, "RUNNING", None),
    ]
    assert rows[0]["error_message"] == "CUDA out of memory"


def test_query_3_counts_worker_failures_by_node(scenario: Any) -> None:
    rows = _run(scenario, 3)
    assert [(r["node_id"], r["failed_workers"], r["groups"]) for r in rows] == [("node-1", 1, 1)]


def test_query_4_counts_failed_starts_by_stage(scenario: Any) -> None:
    rows = _run(scenario, 4)
    assert [tuple(r.values()) for r in rows] == [("placement_group", "RuntimeError", 1)]


def test_query_5_gives_the_time_from_request_to_running(scenario: Any) -> None:
    rows = _run(scenario, 5)
    assert sorted(r["group_id"] for r in rows) == ["g1", "g2", "g4"]
    assert all(float(r["seconds_to_running"]) >= 0 for r in rows)
    assert [float(r["seconds_to_running"]) for r in rows] == sorted(
        (float(r["seconds_to_running"]) for r in rows), reverse=True
    )


def test_query_6_finds_poll_gaps_and_lost_polls(scenario: Any) -> None:
    rows = _run(scenario, 6)
    lost = {(r["group_id"], r["poll_seq"]): r["lost_polls"] for r in rows}
    assert lost == {("g1", 5): 0, ("g2", 9): 5}
    assert all(float(r["gap_s"]) >= 0 for r in rows)


def test_query_7_counts_reports_per_worker(scenario: Any) -> None:
    rows = _run(scenario, 7)
    assert [(r["group_id"], r["world_rank"], r["reports"]) for r in rows] == [
        ("g1", 0, 1),
        ("g2", 0, 2),
        ("g2", 1, 1),
    ]
    assert all(r["first_report_at"] <= r["last_report_at"] for r in rows)


def test_query_8_gives_the_latest_loss_of_every_worker(scenario: Any) -> None:
    rows = _run(scenario, 8, group_id="g2")
    assert [(r["world_rank"], r["reports"], r["loss"]) for r in rows] == [
        (0, 2, 0.125),
        (1, 1, 0.25),
    ]


def test_query_9_counts_how_training_ended_per_run(scenario: Any) -> None:
    rows = _run(scenario, 9)
    assert [tuple(r.values()) for r in rows] == [("r1", "errored", 1), ("r2", "finished", 1)]


def test_query_10_tells_the_story_of_a_group(scenario: Any) -> None:
    rows = _run(scenario, 10, group_id="g4")
    assert [r["event_type"] for r in rows] == [
        "WorkerGroupStartRequested",
        "PlacementGroupReserved",
        "SyncActorStarted",
        "WorkersStarted",
        "WorkerGroupStarted",
        "TrainingLaunched",
        "WorkerGroupPolled",
        "WorkerGroupShutdownRequested",
        "WorkerGroupShutDown",
    ]
    assert all(r["host"] and int(r["pid"]) > 0 for r in rows)


def test_query_11_shows_how_far_the_read_models_are_behind(scenario: Any) -> None:
    assert [r["events_behind"] for r in _run(scenario, 11)] == [0]
    scenario.append("worker-group-g2", [WorkerReported(world_rank=1, index=2)])
    assert [r["events_behind"] for r in _run(scenario, 11)] == [1]


@pytest.fixture
def runs(store: Any) -> Any:
    """Runs: finished after a retry, errored (budget exhausted), live, orphaned, from Ray Train."""
    import run_scenarios

    run_scenarios.finished_after_a_retry(store)
    run_scenarios.errored_budget_exhausted(store)
    run_scenarios.running(store, "live")
    run_scenarios.running(store, "orph", lease_expired=True)
    run_scenarios.from_ray_train(store)
    catch_up_read_models(store)
    return store


def test_query_12_finds_the_orphaned_runs(runs: Any) -> None:
    rows = _run(runs, 12)
    assert [(r["run_id"], r["status"], r["holder"]) for r in rows] == [("orph", "RUNNING", "c1")]


def test_query_13_lists_the_attempts_of_a_run_with_their_decisions(runs: Any) -> None:
    rows = _run(runs, 13, run_id="err")
    assert [
        (r["attempt"], r["outcome"], r["decision"], r["failures_so_far"], r["failure_limit"])
        for r in rows
    ] == [(1, "errored", "RETRY", 1, 1), (2, "errored", "RAISE", 2, 1)]
    assert rows[1]["error_message"] == "rank 1 died in err-g2"


def test_query_14_lists_the_failures_used_against_the_budget(runs: Any) -> None:
    rows = _run(runs, 14)
    assert [
        (r["run_id"], r["status"], r["attempts"], r["worker_group_failures"], r["max_failures"])
        for r in rows
    ] == [
        ("fin", "FINISHED", 2, 1, 2),
        ("err", "ERRORED", 2, 2, 1),
        ("live", "RUNNING", 1, 0, 2),
        ("orph", "RUNNING", 1, 0, 2),
        ("ray", "FINISHED", 1, 0, 0),
    ]
    assert rows[0]["latest_checkpoint"] == "/ckpt/fin/2"


def test_query_15_lists_the_checkpoints_reported_but_not_committed(scenario: Any) -> None:
    # g2: both ranks made report 1 (no checkpoint); only rank 0 made report 2, with /ckpt/2
    rows = _run(scenario, 15)
    assert [
        (r["group_id"], r["report_index"], r["checkpoint"], r["ranks_reported"], r["committed"])
        for r in rows
    ] == [("g2", 2, "/ckpt/2", 1, None)]


def test_query_16_gives_the_log_per_event_type(scenario: Any) -> None:
    rows = _run(scenario, 16)
    with scenario.engine.connect() as connection:
        rows_by_type = connection.execute(
            sa.text("SELECT event_type, COUNT(*) FROM wg_events GROUP BY event_type")
        )
        counts = {event_type: count for event_type, count in rows_by_type}
    assert {r["event_type"]: r["events"] for r in rows} == counts
    assert counts["WorkerReported"] == 4  # g1 one report, g2 three
    sizes = [int(r["row_bytes"]) for r in rows]
    assert sizes == sorted(sizes, reverse=True) and all(size > 100 for size in sizes)
    assert all(r["first_at"] <= r["last_at"] for r in rows)


def test_query_17_gives_the_logs_size_on_disk(scenario: Any) -> None:
    (row,) = _run(scenario, 17)
    assert row["events"] == scenario.head()
    assert row["bytes"] > 8192  # some pages


def test_query_18_gives_an_elastic_runs_size_over_time(store: Any) -> None:
    import run_scenarios

    run_scenarios.elastic_resized(store)
    run_scenarios.finished_after_a_retry(store)  # a fixed run: no resizes, one size
    catch_up_read_models(store)
    rows = _run(store, 18, run_id="ela")
    assert [
        (r["attempt"], r["num_workers"], r["outcome"], r["cause"], r["previous_workers"])
        for r in rows
    ] == [(1, 2, "resized", "initial", None), (2, 4, None, "grew", 2)]
    assert rows[1]["reason"].startswith("more resources available")
    fixed = _run(store, 18, run_id="fin")
    assert [(r["num_workers"], r["cause"]) for r in fixed] == [(2, None), (2, None)]
    with store.engine.connect() as connection:
        sizes = connection.execute(
            sa.text(
                "SELECT run_id, num_workers, min_workers, current_workers, desired_workers "
                "FROM wg_runs ORDER BY run_id"
            )
        ).all()
    assert [tuple(row) for row in sizes] == [("ela", 4, 2, 4, 4), ("fin", 2, None, 0, None)]
