"""Ray's export events mapped to wgstore's events, without files or a database.

The lines are those a real 3-node Ray Train run wrote (``tests/ingest/fixtures``: a run whose
first attempt lost a node, and a run recorded by the callback too); the expected values are what
Ray's state actor held at the end of that run (``ray_state.json``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.ingest.exported import (
    ATTEMPT_FIELDS,
    JOBS,
    NODES,
    RUN_FIELDS,
    TRAIN_STATE,
    WORKER_FIELDS,
    MemoryLog,
    export_events,
    ray_state,
)
from wgstore.events.ray_cluster import RayExportEventKept, kept_stream
from wgstore.events.run import RunCreated
from wgstore.events.streams import group_stream, run_stream
from wgstore.orchestration.ray_export.mapping import (
    ExportEvent,
    ExportMapper,
    hex_id,
    rank_errors,
)
from wgstore.projections.ray_train import ray_train_run, ray_train_run_attempts
from wgstore.projections.run_state import project_run, resume_problem
from wgstore.projections.state import project_worker_group

NODE_LOST = "fac4e5ec98ef43dc8285a6c1f39896ac"
LATE = 10**20  # a clock long past every run's claim


def _mapped(claim_wait_s: float = 0.0, now_ns: int = LATE) -> tuple[MemoryLog, ExportMapper]:
    log = MemoryLog()
    mapper = ExportMapper(log.load, claim_wait_s=claim_wait_s)
    events = export_events(NODES) + export_events(JOBS) + export_events(TRAIN_STATE)
    batch = mapper.map(events, now_ns)
    assert not batch.problems and not batch.held
    log.commit(batch)
    return log, mapper


def test_every_run_and_attempt_equals_rays_state_actor() -> None:
    log, _ = _mapped()
    state = ray_state()
    assert len(state["runs"]) == 2
    for run_id, ray_run in state["runs"].items():
        records = log.streams[run_stream(run_id)]
        run = ray_train_run(records)
        assert {k: run[k] for k in RUN_FIELDS} == {k: ray_run[k] for k in RUN_FIELDS}
        groups = [log.streams[group_stream(g)] for g in project_run(records).groups]
        attempts = ray_train_run_attempts(groups)
        assert attempts.keys() == state["attempts"][run_id].keys()
        for attempt_id, ray_attempt in state["attempts"][run_id].items():
            ours = attempts[attempt_id]
            assert {k: ours[k] for k in ATTEMPT_FIELDS} == {
                k: ray_attempt[k] for k in ATTEMPT_FIELDS
            }
            assert [{k: w[k] for k in WORKER_FIELDS} for w in ours["workers"]] == [
                {k: w[k] for k in WORKER_FIELDS} for w in ray_attempt["workers"]
            ]


def test_the_lost_node_is_a_failure_retried_then_the_run_finishes() -> None:
    log, _ = _mapped()
    run = project_run(log.streams[run_stream(NODE_LOST)])
    assert run.status.value == "FINISHED" and run.source == "ray_export"
    assert len(run.groups) == 2 and run.failures == 1
    assert [d.decision for d in run.decisions] == ["RETRY"]
    first = project_worker_group(log.streams[group_stream(run.groups[0])])
    assert first.outcome is not None and first.outcome.value == "errored"
    assert "A worker health check failed" in first.errors[0].message
    removed = ray_state()["removed"]["node_id"]
    assert removed in {w.node_id for w in first.workers}
    assert log.types(f"ray-node-{removed}") == ["RayNodeStarted", "RayNodeDied"]
    died = log.streams[f"ray-node-{removed}"][1].event
    assert died.reason == "EXPECTED_TERMINATION" and died.end_time_ms > 0


def test_such_a_run_is_never_resumable_and_says_why() -> None:
    log, _ = _mapped()
    problem = resume_problem(project_run(log.streams[run_stream(NODE_LOST)]))
    assert problem is not None and "export events" in problem and "RecordingCallback" in problem


def test_lines_mapped_again_produce_nothing() -> None:
    log, mapper = _mapped()
    events = export_events(NODES) + export_events(JOBS) + export_events(TRAIN_STATE)
    assert mapper.map(events, LATE).count == 0
    fresh = ExportMapper(log.load, claim_wait_s=0)  # another process, reading the log
    assert fresh.map(events, LATE).count == 0


def test_every_event_says_where_it_came_from_and_when_ray_wrote_it() -> None:
    log, _ = _mapped()
    for stream_id, records in log.streams.items():
        for record in records:
            assert record.metadata["source"] == "ray_export", stream_id
            assert record.metadata["ray_export_event_id"]
            assert isinstance(record.metadata["ray_time_ns"], int)


def test_a_run_waits_for_the_callbacks_claim_then_is_mapped_in_order() -> None:
    log = MemoryLog()
    mapper = ExportMapper(log.load, claim_wait_s=45)
    events = export_events(TRAIN_STATE)
    start = min(int(e.data["start_time_ns"]) for e in events if "start_time_ns" in e.data)
    early = mapper.map(events, start + 10 * 10**9)
    assert early.count == 0 and len(early.held) == len(events)
    later = mapper.map(early.held, start + 46 * 10**9)  # the first run's claim has passed
    log.commit(later)
    assert project_run(log.streams[run_stream(NODE_LOST)]).status.value == "FINISHED"
    assert later.held and {e.data.get("id") or e.data.get("run_id") for e in later.held} == {
        "2a1453d45477407592d64e924ada0501"  # started 25 s later: still the callback's to claim
    }
    last = mapper.map(later.held, start + 100 * 10**9)
    assert not last.held and last.count > 0


def test_a_run_the_callback_recorded_is_left_to_it() -> None:
    log = MemoryLog()
    mapper = ExportMapper(log.load, claim_wait_s=0)
    created = mapper.map([e for e in export_events(TRAIN_STATE)][:1], LATE)
    # the callback's own record of the run: RunCreated with source ray_train
    created.events = {
        run_stream(NODE_LOST): [
            dataclasses.replace(new, metadata={**new.metadata, "source": "ray_train"})
            for new in created.events[run_stream(NODE_LOST)]
            if isinstance(new.event, RunCreated)
        ]
    }
    log.commit(created)
    again = ExportMapper(log.load, claim_wait_s=0).map(export_events(TRAIN_STATE), LATE)
    assert not any(s.endswith(NODE_LOST) for s in again.events)
    assert any(s.startswith("run-") for s in again.events)  # the other run is mapped


def _run_line(**data: Any) -> ExportEvent:
    base = {
        "schema_version": 4,
        "id": "r1",
        "name": "n",
        "status": "INITIALIZING",
        "start_time_ns": "1000000000",
    }
    return ExportEvent("e" + str(len(data)), 1, "EXPORT_TRAIN_RUN", {**base, **data}, "t:1")


def test_a_newer_schema_or_an_unknown_field_is_kept_raw_and_mapped_as_far_as_it_can_be() -> None:
    log = MemoryLog()
    line = _run_line(schema_version=5, status="SCHEDULING", new_field={"x": 1})
    batch = ExportMapper(log.load, claim_wait_s=0).map([line], LATE)
    log.commit(batch)
    kept = log.streams[kept_stream("EXPORT_TRAIN_RUN")][0].event
    assert isinstance(kept, RayExportEventKept)
    assert kept.schema_version == 5 and kept.unknown_fields == ("new_field",)
    assert kept.event_data["new_field"] == {"x": 1}
    assert project_run(log.streams["run-r1"]).controller_state.value == "SCHEDULING"


def test_an_aborted_run_and_an_attempt_that_never_started() -> None:
    log = MemoryLog()
    attempt = {"schema_version": 4, "run_id": "r1", "attempt_id": "a1", "resources": [{}]}
    lines = [
        _run_line(status="SCHEDULING"),
        ExportEvent("x1", 1, "EXPORT_TRAIN_RUN_ATTEMPT", {**attempt, "status": "PENDING"}, "t:2"),
        ExportEvent(
            "x2",
            2,
            "EXPORT_TRAIN_RUN_ATTEMPT",
            {**attempt, "status": "ERRORED", "status_detail": "placement group timed out"},
            "t:3",
        ),
        _run_line(status="ABORTED", status_detail="Run aborted due to user interrupt (SIGINT)."),
    ]
    log.commit(ExportMapper(log.load, claim_wait_s=0).map(lines, LATE))
    run = project_run(log.streams["run-r1"])
    assert run.status.value == "ABORTED" and run.abort_reason.startswith("Run aborted")
    group = project_worker_group(log.streams["worker-group-a1"])
    assert group.status.value == "START_FAILED"
    assert group.start_failure is not None and group.start_failure.stage.value == "placement_group"


def test_an_unknown_status_is_reported_and_changes_nothing() -> None:
    log = MemoryLog()
    batch = ExportMapper(log.load, claim_wait_s=0).map([_run_line(status="HIBERNATING")], LATE)
    assert any("HIBERNATING" in p for p in batch.problems)
    log.commit(batch)
    assert project_run(log.streams["run-r1"]).controller_state.value == "INITIALIZING"


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        ("[Rank 1 Error Snippet]:\nboom", {1: "boom"}),
        ("[Rank 0, 2 Error Snippet]:\nA\n[Rank 1 Error Snippet]:\nB", {0: "A", 2: "A", 1: "B"}),
        ("something else", {0: "something else"}),
    ],
)
def test_rank_errors_are_read_from_rays_status_detail(
    detail: str, expected: dict[int, str]
) -> None:
    assert {r: e.message for r, e in rank_errors(detail, [0, 1, 2]).items()} == expected


def test_ids_are_rays_hex_form() -> None:
    assert hex_id("AQAAAA==") == "01000000"
    assert hex_id("V/oc8t+ggmlBt1eeAQAAAA==") == "57fa1cf2dfa0826941b7579e01000000"
    assert hex_id("") == "" and hex_id(None) == ""
    assert hex_id("not base64!") == "not base64!"


def test_ended_runs_leave_the_mappers_memory_and_a_late_line_about_one_changes_nothing() -> None:
    log, mapper = _mapped()
    mapper.settle()
    assert not mapper.cached(run_stream(NODE_LOST))
    groups = project_run(log.streams[run_stream(NODE_LOST)]).groups
    assert not any(mapper.cached(group_stream(g)) for g in groups)
    late = [e for e in export_events(TRAIN_STATE) if e.data.get("id") == NODE_LOST][2:4]
    assert mapper.map(late, LATE).count == 0  # read again from the log: ended


def test_a_run_under_way_stays_in_the_mappers_memory() -> None:
    log = MemoryLog()
    mapper = ExportMapper(log.load, claim_wait_s=0)
    events = [e for e in export_events(TRAIN_STATE) if e.data.get("status") != "FINISHED"]
    log.commit(mapper.map(events[:6], LATE))
    mapper.settle()
    assert mapper.cached(run_stream(NODE_LOST))


def test_the_same_job_id_on_two_clusters_is_two_jobs() -> None:
    """A job id counts a cluster's jobs (``01000000`` is every cluster's first): a job is known
    by its id and its start."""
    log = MemoryLog()
    first, *_ = export_events(JOBS)
    again = ExportEvent("other", 2, first.source_type, {**first.data, "start_time": "1"}, "t:1")
    log.commit(ExportMapper(log.load, claim_wait_s=0).map([first, again], LATE))
    jobs = sorted(s for s in log.streams if s.startswith("ray-job-"))
    assert jobs == ["ray-job-01000000-1", "ray-job-01000000-1796673076971"]
