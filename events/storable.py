"""Values that read back exactly: what an append checks before it accepts an encoded event.

JSON and the two databases change some values on the way back: NaN and ±inf become null (and
then break every reader), PostgreSQL's ``jsonb`` turns -0.0 into 0.0 and floats >= 1e16 into
ints, and untyped (``Any``/``dict``) positions give sets back as lists and bytes as base64
text. Rather than store what cannot come back, the append refuses it with an
:class:`EventEncodeError` naming the value's path and how to fix it, the same way on both
backends. Lone surrogates, NUL characters and nesting too deep to encode are refused too.

Cost: event classes whose field types cannot hold such values (no float, no ``Any``) skip the
check; the others pay one typed decode and an equality test (``bench/encode.py``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Literal

import msgspec
import msgspec.inspect as msgspec_inspect

from wgstore.events.errors import EventEncodeError
from wgstore.events.registry import EventTypeInfo

__all__ = ["EventChecker", "check_storable", "encode_json", "exact_json", "has_nul"]

_encoder = msgspec.json.Encoder(order="sorted")

# Numbers whose JSON text PostgreSQL's jsonb would read back changed: -0.0 (numeric has no
# negative zero) and floats written with a positive exponent, i.e. >= 1e16 (numeric drops the
# fraction, so they come back as ints). Any-typed positions are caught by the decoder's float
# hook; typed float fields by this pattern. A hit only triggers the exact check below.
_NEGATIVE_ZERO = b"-0.0"
_EXPONENT_FLOAT = re.compile(rb"[:,\[]-?[0-9](?:\.[0-9]+)?e[0-9]")
_FLOAT_AS_INT = 1e16
_MISSING = object()


class _ReadsBackAsInt(Exception):
    """A float >= 1e16 met while decoding: jsonb would give it back as an int."""


def _storable_float(text: str) -> float:
    if "e" in text and "e-" not in text:
        raise _ReadsBackAsInt
    return float(text)


_plain_decoder = msgspec.json.Decoder(float_hook=_storable_float)


def check_storable(value: Any, what: str) -> None:
    """Refuse, as an append would, a plain value that would not read back exactly.

    For values bound for an untyped (``Any``/``dict``) event field, checked early: e.g. the
    metrics a worker reports, long before the executor appends them. ``what`` names the value
    in the message.

    Raises:
        EventEncodeError: NaN/inf, -0.0, a float >= 1e16, a set, bytes, a lone surrogate, a NUL
            character or nesting too deep, anywhere in ``value``.
    """
    exact_json(value, what)


def has_nul(text: bytes) -> bool:
    """True when JSON ``text`` holds a NUL character (which msgspec writes as ``\\u0000``).

    Looks for a backslash first (most payloads escape nothing), with ``find``: ``in`` on bytes
    first tries the operand as an int and pays for the TypeError (~0.3 µs in all, against
    ~0.08 here for a 360-byte event).
    """
    return text.find(b"\\") >= 0 and text.find(b"\\u0000") >= 0


def exact_json(value: Any, what: str) -> bytes:
    """``value`` as JSON text that reads back exactly as ``value``, or an EventEncodeError."""
    text = encode_json(value, what)
    if has_nul(text):
        raise EventEncodeError(
            f"{what}: a string contains a NUL character (\\x00), which the database cannot "
            "store; remove it before appending"
        )
    try:
        try:
            restored = _plain_decoder.decode(text)
            changed = restored != value or text.find(_NEGATIVE_ZERO) >= 0
        except _ReadsBackAsInt:
            restored, changed = msgspec.json.decode(text), True
    except RecursionError:
        raise _too_deep(what) from None
    if changed:
        _refuse_changed_value(what, value, restored, what)
    return text


def encode_json(value: Any, what: str, *, event: bool = False) -> bytes:
    """``value`` as JSON, every encoder failure an :class:`EventEncodeError` naming ``what``."""
    try:
        return _encoder.encode(value)
    except RecursionError:
        raise _too_deep(what) from None
    except UnicodeEncodeError as error:
        bad = error.object[error.start : error.end] if isinstance(error.object, str) else "?"
        try:
            where = _find_text(value, what, bad) or what
        except RecursionError:
            where = what
        raise EventEncodeError(
            f"{where}: a string contains {bad!r}, a lone UTF-16 surrogate that is not valid "
            "Unicode text and cannot be stored; decode the text properly (e.g. bytes.decode() "
            "with errors='replace') before appending"
        ) from None
    except (TypeError, msgspec.EncodeError, OverflowError) as error:
        if not event:
            message = (
                f"{what} cannot be stored as JSON ({error}); use str, int, float, bool, None, "
                "lists and dicts with string keys"
            )
        else:
            message = (
                f"{what}: a field cannot be stored as JSON ({error}). Event fields must be "
                "str, int, float, bool, None, datetime, UUID, enums, tuples, dicts with string "
                "keys or nested dataclasses of those."
            )
        raise EventEncodeError(message) from error


def _find_text(value: Any, path: str, bad: str) -> str | None:
    """The path of the first string (or dict key) in ``value`` that contains ``bad``."""
    if isinstance(value, str):
        return path if bad in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and bad in key:
                return f"{path} (a key)"
            found = _find_text(item, f"{path}[{key!r}]", bad)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            found = _find_text(item, f"{path}[{index}]", bad)
            if found is not None:
                return found
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            found = _find_text(getattr(value, field.name), f"{path}.{field.name}", bad)
            if found is not None:
                return found
    return None


def _too_deep(what: str) -> EventEncodeError:
    return EventEncodeError(
        f"{what}: the value is nested too deeply (about 1000 levels or more) to store and read "
        "back; flatten it, or store it as a string"
    )


def _refuse_changed_value(what: str, value: Any, restored: Any, root: str) -> None:
    """Raise naming the first part of ``value`` that would not read back as it was written.

    Returns quietly when nothing would change (a list stored for a tuple field, say).
    """
    try:
        problem = _changed_part(value, restored, root)
    except RecursionError:
        raise _too_deep(what) from None
    if problem is not None:
        raise EventEncodeError(
            f"{problem}. Nothing was stored: every value must read back exactly as it was "
            "appended, on SQLite and on PostgreSQL alike"
        )


def _changed_part(value: Any, restored: Any, path: str) -> str | None:
    """Describe the first part of ``value`` that would read back changed, or None."""
    kind = type(value)
    if kind is float:
        if math.isnan(value) or math.isinf(value):
            return (
                f"{path} is {value!r}; JSON has no NaN or infinity (it would read back as null "
                "and break every reader): store None, or the text 'nan' / 'inf' in a str field"
            )
        if value == 0.0 and math.copysign(1.0, value) < 0:
            return f"{path} is -0.0, which PostgreSQL reads back as 0.0: store 0.0"
        if abs(value) >= _FLOAT_AS_INT:
            return (
                f"{path} is {value!r}; PostgreSQL reads floats of 1e16 and more back as "
                "integers: store it as an int, a str, or in smaller units"
            )
        return None
    if kind in (str, int, bool) or value is None:
        return None
    if isinstance(value, dict):
        other = restored if isinstance(restored, dict) else {}
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has the key {key!r}, which would read back as text: use str keys"
            found = _changed_part(item, other.get(key, _MISSING), f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        items = restored if isinstance(restored, list | tuple) else ()
        for index, item in enumerate(value):
            back = items[index] if index < len(items) else _MISSING
            found = _changed_part(item, back, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(value, set | frozenset):
        if not isinstance(restored, set | frozenset):
            return (
                f"{path} is a {kind.__name__}, which reads back as a list here: store a sorted "
                "list, or declare the field frozenset[...]"
            )
        return _first_changed(sorted(value, key=repr), path)
    if isinstance(value, bytes | bytearray | memoryview):
        if not isinstance(restored, bytes | bytearray | memoryview):
            return (
                f"{path} is {kind.__name__}, which reads back as base64 text here: store text, "
                "or declare the field bytes"
            )
        return None
    if dataclasses.is_dataclass(value) or hasattr(kind, "__struct_fields__"):
        names = (
            [f.name for f in dataclasses.fields(value)]
            if dataclasses.is_dataclass(value)
            else list(kind.__struct_fields__)
        )
        for name in names:
            back = getattr(restored, name, _MISSING)
            if isinstance(restored, dict):
                back = restored.get(name, _MISSING)
            found = _changed_part(getattr(value, name), back, f"{path}.{name}")
            if found is not None:
                return found
        return None
    if restored is not _MISSING and restored != value:
        return (
            f"{path} is a {kind.__name__} ({value!r}), which reads back as "
            f"{type(restored).__name__} {restored!r} here: convert it yourself, or declare the "
            f"field as {kind.__name__}"
        )
    return None


def _first_changed(items: list[Any], path: str) -> str | None:
    for item in items:
        found = _changed_part(item, _MISSING, f"{path} item")
        if found is not None:
            return found
    return None


def _holds(node: Any, kinds: tuple[type, ...], seen: set[int]) -> bool:
    """True when the msgspec type tree ``node`` contains a node of one of ``kinds``."""
    if isinstance(node, kinds):
        return True
    if id(node) in seen or not hasattr(node, "__struct_fields__"):
        return False
    seen.add(id(node))
    for name in node.__struct_fields__:
        value = getattr(node, name)
        for child in value if isinstance(value, tuple) else (value,):
            if isinstance(child, msgspec_inspect.Field):
                child = child.type
            if isinstance(child, msgspec_inspect.Type) and _holds(child, kinds, seen):
                return True
    return False


class EventChecker:
    """Checks that events of one class read back exactly as they were appended."""

    def __init__(self, cls: type, typed_floats: bool) -> None:
        self.cls = cls
        self.decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
            cls, float_hook=_storable_float
        )
        self.typed_floats = typed_floats

    @classmethod
    def for_class(cls, event_class: type) -> EventChecker | Literal[False]:
        """A checker, or False when no value of the class's field types can change."""
        try:
            info = msgspec_inspect.type_info(event_class)
        except Exception:  # noqa: BLE001 - an annotation msgspec cannot read: check every time
            return cls(event_class, True)
        if not _holds(info, _CHANGEABLE, set()):
            return False
        return cls(event_class, _holds(info, (msgspec_inspect.FloatType,), set()))

    def check(self, info: EventTypeInfo, event: Any, data: bytes) -> None:
        """Raise :class:`EventEncodeError` when ``data`` would not read back as ``event``."""
        try:
            try:
                restored: Any = self.decoder.decode(data)
                changed = (
                    restored != event
                    or data.find(_NEGATIVE_ZERO) >= 0  # find: see has_nul
                    or (self.typed_floats and _EXPONENT_FLOAT.search(data) is not None)
                )
            except _ReadsBackAsInt:
                restored, changed = msgspec.json.decode(data, type=self.cls), True
        except msgspec.ValidationError as error:
            _refuse_changed_value(info.name, event, _MISSING, info.name)
            raise EventEncodeError(
                f"{info.name}: a field holds a value of another type than declared, so the "
                f"event would not read back ({error}); give each field its declared type"
            ) from None
        except RecursionError:
            raise _too_deep(info.name) from None
        if changed:
            _refuse_changed_value(info.name, event, restored, info.name)


_CHANGEABLE = (msgspec_inspect.FloatType, msgspec_inspect.AnyType, msgspec_inspect.CustomType)
