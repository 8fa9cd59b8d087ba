"""The codec's paths that mutation testing (scripts/mutate.py) found untested: upcasting chains,
an old schema with no upcaster, a schema from newer code, payloads that no longer fit, NUL
characters, and unknown types with non-JSON text. Pure: a registry of its own, no database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from wgstore.events.codec import Codec, canonical_json, unknown_event
from wgstore.events.errors import EventDecodeError, EventEncodeError, UnknownEventTypeError
from wgstore.events.records import UnknownEvent
from wgstore.events.registry import REGISTRY, EventRegistry
from wgstore.events.worker_group import WorkerGroupShutdownRequested


@dataclass(frozen=True, slots=True, kw_only=True)
class Pinned:
    path: str
    step: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Plain:
    name: str


def _codec(version: int = 3, *, upcasters: bool = True) -> Codec:
    registry = EventRegistry()
    registry.register(Pinned, "Pinned", version)
    registry.register(Plain, "Plain")
    if upcasters:
        # v1 {"p": ...} -> v2 {"path": ...} -> v3 adds "step"
        registry.add_upcaster("Pinned", 1, lambda d: {"path": d["p"]})
        registry.add_upcaster("Pinned", 2, lambda d: {**d, "step": 7})
    return Codec(registry)


def _decode(codec: Codec, type_name: str, version: int, data: str | bytes) -> Any:
    return codec.decode(type_name, version, data, stream_id="s-1", position=9)


def test_the_current_version_decodes_without_upcasting() -> None:
    codec = _codec()
    assert _decode(codec, "Pinned", 3, '{"path":"/c","step":2}') == Pinned(path="/c", step=2)
    assert _decode(codec, "Pinned", 3, b'{"path":"/d"}') == Pinned(path="/d")  # cached decoder


def test_an_old_payload_is_upcast_through_every_step() -> None:
    codec = _codec()
    assert _decode(codec, "Pinned", 1, '{"p":"/a"}') == Pinned(path="/a", step=7)
    assert _decode(codec, "Pinned", 2, '{"path":"/b"}') == Pinned(path="/b", step=7)


def test_an_old_schema_version_without_an_upcaster_names_the_missing_step() -> None:
    codec = _codec(upcasters=False)
    with pytest.raises(EventDecodeError) as caught:
        _decode(codec, "Pinned", 2, '{"path":"/b"}')
    message = str(caught.value)
    assert "no upcaster for Pinned from version 2 to 3" in message
    assert "Register an upcaster" in message
    assert (caught.value.stream_id, caught.value.position) == ("s-1", 9)
    assert "position 9 in stream 's-1'" in message


def test_a_schema_version_from_newer_code_asks_for_an_upgrade() -> None:
    with pytest.raises(EventDecodeError, match=r"stored at schema version 4, .* up to 3: upgrade"):
        _decode(_codec(), "Pinned", 4, '{"path":"/x"}')


def test_a_payload_that_no_longer_fits_its_type_is_a_decode_error() -> None:
    codec = _codec()
    with pytest.raises(EventDecodeError, match=r"Pinned \(schema version 3\) no longer decodes"):
        _decode(codec, "Pinned", 3, '{"step":1}')
    with pytest.raises(EventDecodeError, match="no longer decodes"):
        _decode(codec, "Pinned", 3, "not json")
    with pytest.raises(EventDecodeError, match="no longer decodes"):
        _decode(codec, "Pinned", 2, '{"path":5}')  # upcast, then it does not fit


def test_an_unregistered_type_decodes_to_its_raw_payload() -> None:
    codec = _codec()
    assert _decode(codec, "Other", 2, '{"a":1}') == UnknownEvent(
        type="Other", schema_version=2, data={"a": 1}
    )


def test_an_unknown_event_keeps_text_that_is_not_json_as_text() -> None:
    assert unknown_event("T", 1, "not json").data == "not json"
    assert unknown_event("T", 1, b"caf\xc3\xa9 \xff").data == "café \ufffd"
    assert unknown_event("T", 1, b"[1,2]").data == [1, 2]


def test_encoding_returns_the_registration_and_sorted_json() -> None:
    codec = _codec()
    info, data = codec.encode(Pinned(step=1, path="/p"))
    assert (info.name, info.version, info.cls) == ("Pinned", 3, Pinned)
    assert data == '{"path":"/p","step":1}'
    assert codec.encode(Plain(name="n")) == (codec.registry.by_name("Plain"), '{"name":"n"}')
    assert codec.encode(Plain(name="m"))[1] == '{"name":"m"}'  # the cached checker again


def test_encoding_an_unregistered_class_is_refused() -> None:
    @dataclass(frozen=True)
    class Stray:
        x: int

    with pytest.raises(UnknownEventTypeError):
        _codec().encode(Stray(x=1))


def test_a_nul_character_is_refused_naming_the_event_type() -> None:
    with pytest.raises(EventEncodeError, match=r"Plain: a string field contains a NUL character"):
        _codec().encode(Plain(name="a\x00b"))


def test_a_codec_without_a_registry_uses_the_global_one() -> None:
    codec = Codec()
    assert codec.registry is REGISTRY
    info, data = codec.encode(WorkerGroupShutdownRequested(reason="r"))
    assert info.name == "WorkerGroupShutdownRequested"
    assert codec.decode(info.name, info.version, data, stream_id="s", position=1) == (
        WorkerGroupShutdownRequested(reason="r")
    )


def test_canonical_json_sorts_keys_without_spaces() -> None:
    assert canonical_json({"b": 1, "a": [1, "x"]}) == '{"a":[1,"x"],"b":1}'


@dataclass(frozen=True, slots=True, kw_only=True)
class Loose:
    value: Any = None


def test_a_field_value_that_would_read_back_changed_is_refused() -> None:
    registry = EventRegistry()
    registry.register(Loose, "Loose")
    codec = Codec(registry)
    assert codec.encode(Loose(value=[1, "a"]))[1] == '{"value":[1,"a"]}'
    with pytest.raises(EventEncodeError, match="is nan; JSON has no NaN"):
        codec.encode(Loose(value=float("nan")))  # would read back as null


def test_an_event_field_that_is_not_json_names_the_allowed_field_types() -> None:
    registry = EventRegistry()
    registry.register(Loose, "Loose")
    with pytest.raises(
        EventEncodeError, match=r"Loose: a field cannot be stored as JSON.*Event fields"
    ):
        Codec(registry).encode(Loose(value=object()))


def test_metadata_that_would_not_read_back_is_refused_naming_metadata() -> None:
    with pytest.raises(EventEncodeError, match=r"^metadata\['a'\] is nan"):
        canonical_json({"a": float("nan")})


def test_an_upcaster_that_raises_is_a_decode_error_naming_the_step_and_the_event() -> None:
    registry = EventRegistry()
    registry.register(Pinned, "Pinned", 2)
    registry.add_upcaster("Pinned", 1, lambda d: {"path": d["missing"]})  # a buggy upcaster
    codec = Codec(registry)
    with pytest.raises(EventDecodeError) as caught:
        _decode(codec, "Pinned", 1, '{"p":"/a"}')
    message = str(caught.value)
    assert "upcaster of Pinned from schema version 1 to 2 failed (KeyError: 'missing')" in message
    assert (caught.value.stream_id, caught.value.position) == ("s-1", 9)
    assert isinstance(caught.value.__cause__, KeyError)


def test_the_bulk_decoder_is_only_for_the_current_schema_of_a_registered_type() -> None:
    codec = _codec()
    decode = codec.current_decoder("Pinned", 3)
    assert decode is not None and decode('{"path":"/c","step":2}') == Pinned(path="/c", step=2)
    # older or newer payloads need the upcasting / refusing paths of Codec.decode
    assert codec.current_decoder("Pinned", 2) is None
    assert codec.current_decoder("Pinned", 4) is None
    assert codec.current_decoder("NeverRegistered", 1) is None
