"""Properties of the folds over generated valid lifecycles (no database)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from projection_builders import Stream, lifecycles

from wgstore.projections import (
    TRANSITIONS,
    fold_poll_history,
    project_worker_group,
)
from wgstore.projections.snapshots import decode_state, encode_state
from wgstore.projections.state import evolve


@settings(max_examples=150, deadline=None)
@given(lifecycles(), st.data())
def test_folding_a_prefix_then_the_rest_equals_folding_everything(
    stream: Stream, data: st.DataObject
) -> None:
    events = stream.events
    k = data.draw(st.integers(1, len(events)))
    prefix = project_worker_group(events[:k])
    assert project_worker_group(events[k:], prefix) == project_worker_group(events)


@settings(max_examples=150, deadline=None)
@given(lifecycles(), st.data())
def test_a_snapshot_plus_the_tail_equals_the_full_fold(stream: Stream, data: st.DataObject) -> None:
    events = stream.events
    k = data.draw(st.integers(1, len(events)))
    snapshot = decode_state(encode_state(project_worker_group(events[:k])))
    assert project_worker_group(events[k:], snapshot) == project_worker_group(events)


@settings(max_examples=100, deadline=None)
@given(lifecycles())
def test_each_state_is_at_the_version_folded_and_moves_only_along_the_table(
    stream: Stream,
) -> None:
    state = None
    for k, event in enumerate(stream.events, start=1):
        new = evolve(state, event)
        assert new.version == k
        if state is not None and new.status is not state.status:
            assert new.status in TRANSITIONS[state.status]
        assert new.polls_total >= new.recorded_polls
        state = new


@settings(max_examples=100, deadline=None)
@given(lifecycles())
def test_the_poll_history_has_one_record_per_poll_ending_at_the_state(stream: Stream) -> None:
    history = fold_poll_history(stream.events)
    state = project_worker_group(stream.events)
    assert len(history) == state.recorded_polls
    assert [r.poll_seq for r in history] == sorted({r.poll_seq for r in history})
    if history:
        assert history[-1].status == state.poll_status
        assert sum(r.polls for r in history) == state.polls_total
