"""Controller states, failure decisions and failure kinds are ``StrEnum``s (events/run.py), and the
log does not notice: events built with them store the text bare strings stored, and text an
older wgstore stored reads back as the members, which ``decide`` steps on (both backends)."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from wgstore.events import NO_STREAM, EventStore
from wgstore.events.codec import Codec
from wgstore.events.run import (
    ControllerState,
    ControllerStateChanged,
    FailureConfig,
    FailureDecisionMade,
    FailureKind,
    RetryDecision,
    RunCreated,
    ScalingConfig,
)
from wgstore.events.schema import wg_events
from wgstore.events.streams import group_stream, run_stream
from wgstore.events.worker_group import (
    ErrorInfo,
    StartStage,
    WorkerGroupContext,
    WorkerGroupStartFailed,
    WorkerGroupStartRequested,
)
from wgstore.orchestration.run.decide import attempt_group_id, decide
from wgstore.projections.queries import worker_group_state
from wgstore.projections.run_state import project_run

G1 = attempt_group_id("r1", 1)

# What wgstore stored before the enums, byte for byte (Codec.encode of the bare-string events,
# taken from the code before this change).
OLD_TRANSITION = (
    f'{{"from_state":"SCHEDULING","group_id":"{G1}","reason":"start failed",'
    '"resume_checkpoint":null,"to_state":"RESTARTING"}'
)
OLD_DECISION = (
    '{"decision":"RETRY","errors":[],"failure_kind":"start","failures_so_far":1,'
    f'"group_id":"{G1}","limit":-1,"reason":"start failed"}}'
)


def _transition(from_state: Any, to_state: Any) -> ControllerStateChanged:
    return ControllerStateChanged(
        from_state=from_state, to_state=to_state, reason="start failed", group_id=G1
    )


def _decision(decision: Any, kind: Any) -> FailureDecisionMade:
    return FailureDecisionMade(
        decision=decision,
        group_id=G1,
        reason="start failed",
        failures_so_far=1,
        failure_kind=kind,
        limit=-1,
    )


def test_events_built_with_the_enums_encode_to_the_text_bare_strings_stored() -> None:
    codec = Codec()
    members = _transition(ControllerState.SCHEDULING, ControllerState.RESTARTING)
    assert codec.encode(members)[1] == OLD_TRANSITION
    assert codec.encode(_transition("SCHEDULING", "RESTARTING"))[1] == OLD_TRANSITION
    decided = _decision(RetryDecision.RETRY, FailureKind.START)
    assert codec.encode(decided)[1] == OLD_DECISION
    assert codec.encode(_decision("RETRY", "start"))[1] == OLD_DECISION


def test_the_enums_are_their_stored_text() -> None:
    assert [str(state) for state in ControllerState] == [
        "INITIALIZING",
        "SCHEDULING",
        "RESCHEDULING",
        "RUNNING",
        "PREEMPTING",
        "RESTARTING",
        "RESIZING",
        "SHUTTING_DOWN",
        "FINISHED",
        "ERRORED",
        "ABORTED",
    ]
    assert [str(kind) for kind in FailureKind] == [
        "worker_group",
        "start",
        "preemption",
        "controller",
    ]
    assert [str(decision) for decision in RetryDecision] == ["RETRY", "RAISE", "NOOP"]
    assert {s for s in ControllerState if s.is_terminal} == {"FINISHED", "ERRORED", "ABORTED"}


def _stored(store: EventStore, stream_id: str, version: int) -> dict[str, Any]:
    query = sa.select(wg_events.c.data).where(
        wg_events.c.stream_id == stream_id, wg_events.c.stream_version == version
    )
    with store.engine.connect() as connection:
        data = connection.execute(query).scalar_one()
    return json.loads(data) if isinstance(data, str) else dict(data)


def test_a_log_an_older_wgstore_wrote_reads_as_the_members_and_decide_steps_on(
    store: EventStore,
) -> None:
    context = WorkerGroupContext(num_workers=1, train_fn="examples.train:train_fn")
    # as an older wgstore appended them: bare strings (the same text, as shown above)
    store.append(
        run_stream("r1"),
        [
            RunCreated(
                run_id="r1",
                scaling_config=ScalingConfig(num_workers=1),
                failure_config=FailureConfig(),
                context=context,
            ),
            ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING", group_id=G1),
            _decision("RETRY", "start"),
            _transition("SCHEDULING", "RESTARTING"),
        ],
        expected_version=NO_STREAM,
    )
    store.append(
        group_stream(G1),
        [
            WorkerGroupStartRequested(group_id=G1, run_id="r1", attempt=1, context=context),
            WorkerGroupStartFailed(
                stage=StartStage.PLACEMENT_GROUP,
                error=ErrorInfo(type="PlacementGroupTimeoutError", message="no room"),
            ),
        ],
        expected_version=NO_STREAM,
    )

    run = project_run(store.read_stream(run_stream("r1")))

    assert run.controller_state is ControllerState.RESTARTING
    assert [(t.from_state, t.to_state) for t in run.transitions] == [
        (ControllerState.INITIALIZING, ControllerState.SCHEDULING),
        (ControllerState.SCHEDULING, ControllerState.RESTARTING),
    ]
    assert all(type(t.to_state) is ControllerState for t in run.transitions)
    assert run.decisions[0].decision == RetryDecision.RETRY
    assert run.failures_of(FailureKind.CONTROLLER) == 1  # start and controller share a limit

    decision = decide(run, worker_group_state(store, G1), run.updated_at)
    assert decision.to_state is ControllerState.RESCHEDULING
    store.append(run_stream("r1"), list(decision.run_events), expected_version=run.version)

    # and what the enums wrote is the text bare strings wrote
    assert _stored(store, run_stream("r1"), run.version + 1) == {
        "from_state": "RESTARTING",
        "to_state": "RESCHEDULING",
        "reason": "attempt 2",
        "group_id": attempt_group_id("r1", 2),
        "resume_checkpoint": None,
    }
    again = project_run(store.read_stream(run_stream("r1")))
    assert again.controller_state is ControllerState.RESCHEDULING
