"""Property tests: encode/decode round trips and upcasting (no database)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from wgstore.events import EventRegistry, event_type, upcaster
from wgstore.events.codec import Codec
from wgstore.events.worker_group import (
    ErrorInfo,
    WorkerGroupPolled,
    WorkerReported,
    WorkerStatusChange,
)

text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    text,
    # What the store accepts: no NaN/inf, no -0.0, nothing >= 1e16 (test_input_refused.py).
    st.floats(min_value=-1e16, max_value=1e16, exclude_min=True, exclude_max=True).filter(
        lambda x: x != 0.0 or math.copysign(1.0, x) > 0
    ),
)
moments = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
errors = st.builds(ErrorInfo, type=text, message=text, traceback=text)
changes = st.builds(
    WorkerStatusChange,
    world_rank=st.integers(0, 1024),
    running=st.booleans(),
    error=st.none() | errors,
)
polls = st.builds(
    WorkerGroupPolled,
    poll_seq=st.integers(0, 10**9),
    polled_at=moments,
    changes=st.lists(changes, max_size=8).map(tuple),
    unchanged_polls=st.integers(0, 10**6),
    unchanged_since=st.none() | moments,
)
reports = st.builds(
    WorkerReported,
    world_rank=st.integers(0, 1024),
    index=st.integers(0, 10**6),
    metrics=st.dictionaries(text, json_scalars, max_size=6),
    checkpoint=st.none() | text,
)


@given(st.one_of(polls, reports))
def test_every_event_decodes_to_what_was_encoded(event: object) -> None:
    codec = Codec()
    info, data = codec.encode(event)
    assert codec.decode(info.name, info.version, data, stream_id="s", position=1) == event


def _registry_with_three_versions() -> EventRegistry:
    registry = EventRegistry()

    @event_type("Resized", version=3, registry=registry)
    @dataclass(frozen=True)
    class Resized:
        num_workers: int
        reason: str

    @upcaster("Resized", from_version=1, registry=registry)
    def _v1_to_v2(data: dict) -> dict:  # v1 called the field "workers"
        return {"num_workers": data["workers"]}

    @upcaster("Resized", from_version=2, registry=registry)
    def _v2_to_v3(data: dict) -> dict:  # v3 added a reason
        return {**data, "reason": "unknown"}

    return registry


@given(st.integers(1, 10_000))
def test_old_payloads_are_upcast_step_by_step_to_the_current_version(workers: int) -> None:
    codec = Codec(_registry_with_three_versions())
    from_v1 = codec.decode("Resized", 1, f'{{"workers": {workers}}}', stream_id="s", position=1)
    from_v2 = codec.decode("Resized", 2, f'{{"num_workers": {workers}}}', stream_id="s", position=1)
    assert from_v1 == from_v2
    assert (from_v1.num_workers, from_v1.reason) == (workers, "unknown")
    current = codec.decode(
        "Resized", 3, f'{{"num_workers": {workers}, "reason": "r"}}', stream_id="s", position=1
    )
    assert current.reason == "r"


def test_registering_a_name_twice_for_different_classes_is_refused() -> None:
    import pytest

    registry = EventRegistry()

    @event_type("Once", registry=registry)
    @dataclass(frozen=True)
    class First:
        a: int

    with pytest.raises(ValueError, match="already registered"):

        @event_type("Once", registry=registry)
        @dataclass(frozen=True)
        class Second:
            a: int


def test_a_class_that_is_not_a_frozen_dataclass_is_refused() -> None:
    import pytest

    with pytest.raises(TypeError, match="frozen dataclass"):

        @event_type("Mutable", registry=EventRegistry())
        @dataclass
        class Mutable:
            a: int
