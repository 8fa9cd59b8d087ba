"""Bad input in the store: refused at append (or at the call) with a clear error from the tree.

Every case runs on both backends and must raise the same class there: values JSON cannot hold
(NaN, infinity), values that would read back changed (-0.0 and floats >= 1e16 on PostgreSQL's
jsonb, sets, bytes), text the databases cannot store (lone surrogates, NUL), nesting too deep to
encode, and ints too large for the database. Nothing is written when an append is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgstore.events import (
    EventEncodeError,
    EventStore,
    InvalidArgumentError,
    NewEvent,
    event_type,
)


@event_type("RefusedInputAny", version=1)
@dataclass(frozen=True)
class AnyValue:
    value: object


@event_type("RefusedInputFloat", version=1)
@dataclass(frozen=True)
class FloatValue:
    value: float


@event_type("RefusedInputText", version=1)
@dataclass(frozen=True)
class TextValue:
    value: str


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    inner = root
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return root


def _nested_dict(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    inner = root
    for _ in range(depth):
        inner["a"] = {}
        inner = inner["a"]
    return root


NAN, INF = float("nan"), float("inf")

# (what is appended, a phrase the message must contain)
REFUSED_APPENDS: list[tuple[str, Any, str]] = [
    ("nan in a float field", FloatValue(value=NAN), "RefusedInputFloat.value is nan"),
    ("+inf in a float field", FloatValue(value=INF), "RefusedInputFloat.value is inf"),
    ("-inf in a float field", FloatValue(value=-INF), "RefusedInputFloat.value is -inf"),
    ("nan in an Any field", AnyValue(value=NAN), "RefusedInputAny.value is nan"),
    ("inf inside a dict", AnyValue(value={"loss": INF}), "value['loss'] is inf"),
    ("nan inside a list", AnyValue(value=[1.0, NAN]), "value[1] is nan"),
    ("nan in metadata", NewEvent(AnyValue(value=1), metadata={"m": NAN}), "metadata['m'] is nan"),
    ("inf in metadata", NewEvent(AnyValue(value=1), metadata={"m": [-INF]}), "metadata['m'][0]"),
    ("-0.0 in a float field", FloatValue(value=-0.0), "-0.0, which PostgreSQL reads back as 0.0"),
    ("-0.0 in an Any field", AnyValue(value={"x": -0.0}), "value['x'] is -0.0"),
    ("-0.0 in metadata", NewEvent(AnyValue(value=1), metadata={"z": -0.0}), "metadata['z']"),
    ("1e16 in an Any field", AnyValue(value=1e16), "back as integers"),
    ("-1.5e300 in a float field", FloatValue(value=-1.5e300), "back as integers"),
    ("1e20 in metadata", NewEvent(AnyValue(value=1), metadata={"b": 1e20}), "metadata['b']"),
    ("a set", AnyValue(value={1, 2}), "set, which reads back as a list"),
    ("a frozenset in a dict", AnyValue(value={"s": frozenset("ab")}), "frozenset"),
    ("bytes", AnyValue(value=b"\x01\x02"), "bytes, which reads back as base64"),
    ("a bytearray in a list", AnyValue(value=[bytearray(b"x")]), "value[0] is bytearray"),
    ("nesting 1000 deep", AnyValue(value=_nested(1000)), "nested too deeply"),
    ("nesting 5000 deep", AnyValue(value=_nested_dict(5000)), "nested too deeply"),
    ("nested metadata", NewEvent(AnyValue(value=1), metadata={"d": _nested(3000)}), "too deeply"),
    ("a lone surrogate in a field", TextValue(value="ok\ud800"), "RefusedInputText.value"),
    ("a surrogate in a dict key", AnyValue(value={"k\udc80": 1}), "(a key)"),
    ("a surrogate in metadata", NewEvent(AnyValue(value=1), metadata={"m": "\udfff"}), "metadata"),
    ("a NUL in metadata", NewEvent(AnyValue(value=1), metadata={"m": "a\x00b"}), "NUL"),
]


@pytest.mark.parametrize(
    ("event", "phrase"),
    [pytest.param(event, phrase, id=name) for name, event, phrase in REFUSED_APPENDS],
)
def test_an_event_that_would_not_read_back_exactly_is_refused_and_nothing_is_written(
    store: EventStore, event: Any, phrase: str
) -> None:
    with pytest.raises(EventEncodeError) as raised:
        store.append("s-1", [AnyValue(value="fine"), event])
    assert phrase in str(raised.value)
    assert store.head() == 0


def _append(stream_id: Any = "s-1", **kwargs: Any) -> Callable[[EventStore], object]:
    return lambda store: store.append(stream_id, [AnyValue(value=1)], **kwargs)


# (a call, a phrase the message must contain)
REFUSED_CALLS: list[tuple[str, Callable[[EventStore], object], str]] = [
    ("append to a stream id with a surrogate", _append("s-\ud800"), "surrogate"),
    ("append to a stream id with a NUL", _append("s-\x00"), "NUL"),
    ("expected_version 2**63", _append(expected_version=2**63), "expected_version="),
    ("expected_version 2**70", _append(expected_version=2**70), "64-bit"),
    ("read_stream of an int", lambda s: list(s.read_stream(123)), "stream_id must be"),
    ("read_stream of a NUL id", lambda s: list(s.read_stream("a\x00")), "NUL"),
    ("read_stream of a surrogate id", lambda s: list(s.read_stream("a\udc00")), "surrogate"),
    ("read_stream to 2**70", lambda s: list(s.read_stream("s-1", to_version=2**70)), "to_version"),
    ("read_stream from 2**64", lambda s: list(s.read_stream("s-1", 2**64)), "from_version"),
    ("read_stream from a str", lambda s: list(s.read_stream("s-1", "1")), "from_version"),
    ("read_all after 2**70", lambda s: list(s.read_all(after=2**70)), "after="),
    ("read_all after -2**64", lambda s: list(s.read_all(after=-(2**64))), "after="),
    ("read_all limit -1", lambda s: list(s.read_all(limit=-1)), "limit"),
    ("read_all of a NUL type", lambda s: list(s.read_all(types=["a\x00"])), "NUL"),
    ("stream_version of an int", lambda s: s.stream_version(7), "stream_id must be"),
    ("stream_version of a NUL id", lambda s: s.stream_version("\x00"), "NUL"),
    ("streams with a NUL prefix", lambda s: s.streams("a\x00"), "NUL"),
    ("streams with a surrogate prefix", lambda s: s.streams("\ud800"), "surrogate"),
]


@pytest.mark.parametrize(
    ("call", "phrase"),
    [pytest.param(call, phrase, id=name) for name, call, phrase in REFUSED_CALLS],
)
def test_a_bad_argument_is_the_same_clear_error_on_both_backends(
    store: EventStore, call: Callable[[EventStore], object], phrase: str
) -> None:
    store.append("s-1", [AnyValue(value=0)])
    with pytest.raises(InvalidArgumentError) as raised:
        call(store)
    assert phrase in str(raised.value)
    assert isinstance(raised.value, ValueError)  # bad arguments stay ValueErrors too
    assert store.head() == 1


def test_values_close_to_the_limits_read_back_exactly(store: EventStore) -> None:
    values = [
        9999999999999998.0,
        -9999999999999998.0,
        0.0,
        5e-324,
        1e-7,
        2**63 - 1,
        -(2**63),
        "-0.0 and 1e16 in text",
        (1, 2.5),
        {"nested": [1.5, None, True, "x"]},
    ]
    store.append("s-1", [AnyValue(value=v) for v in values] + [FloatValue(value=1e15)])
    back = [r.event.value for r in store.read_stream("s-1")]
    assert back[:-1] == [list(v) if isinstance(v, tuple) else v for v in values]
    assert [type(v) for v in back[:-1]] == [
        list if isinstance(v, tuple) else type(v) for v in values
    ]
    assert back[-1] == 1e15 and type(back[-1]) is float


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()  # NaN, infinities, -0.0 and 1e300 included: each is refused or kept
    | _text,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_text, inner, max_size=4)
        | st.frozensets(st.integers(), max_size=2)
        | st.binary(max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json, metadata=st.dictionaries(_text, _json, max_size=3))
def test_every_value_is_either_refused_at_append_or_reads_back_exactly(
    store: EventStore, value: Any, metadata: dict[str, Any]
) -> None:
    head = store.head()
    try:
        [written] = store.append("p", [NewEvent(AnyValue(value=value), metadata=metadata)])
    except EventEncodeError:
        assert store.head() == head
        return
    [back] = store.read_all(after=written.position - 1, limit=1)
    assert _typed(back.event.value) == _typed(value)
    assert _typed({k: back.metadata[k] for k in metadata}) == _typed(metadata)


def _typed(value: Any) -> Any:
    """``value`` with each scalar paired with its type, so 1 and 1.0 (or True) differ."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, float):  # -0.0 == 0.0, so compare the text
        return ("float", repr(value))
    return (type(value).__name__, value)


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ({"loss": NAN}, "report() metrics['loss'] is nan"),
        ({"loss": -0.0}, "report() metrics['loss'] is -0.0"),
        ({"samples": 2e16}, "back as integers"),
        ({"seen": {1, 2}}, "set, which reads back as a list"),
        ({"deep": _nested(2000)}, "nested too deeply"),
        ({"text": "\ud800"}, "surrogate"),
    ],
)
def test_a_value_can_be_checked_early_with_the_rules_of_append(value: Any, phrase: str) -> None:
    from wgstore.events.storable import check_storable

    with pytest.raises(EventEncodeError) as raised:
        check_storable(value, "report() metrics")
    assert phrase in str(raised.value)
    check_storable({"loss": 0.25, "step": 3, "tags": ["a"]}, "report() metrics")
