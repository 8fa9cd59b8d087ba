"""The one place that turns events into stored JSON and back.

Encoding and typed decoding use msgspec: decoding straight into the frozen dataclass validates
the payload and is faster than ``json.loads``. Old payloads are upcast as plain dicts first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from wgstore.events.errors import EventDecodeError, EventEncodeError, UnknownEventTypeError
from wgstore.events.records import UnknownEvent
from wgstore.events.registry import REGISTRY, EventRegistry, EventTypeInfo
from wgstore.events.storable import EventChecker, encode_json, exact_json, has_nul

__all__ = ["DECODE_ERRORS", "Codec", "canonical_json", "unknown_event"]

DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError)
"""What decoding a payload into its event class raises when the payload does not fit it:
msgspec's errors, or the class's own checks."""


def canonical_json(value: Any) -> str:
    """JSON text with sorted keys and no spaces, the form metadata is stored in.

    Raises:
        EventEncodeError: the value cannot be stored as JSON, or would read back changed.
    """
    return exact_json(value, "metadata").decode()


class Codec:
    """Encodes events to JSON text and decodes stored JSON into typed events."""

    def __init__(self, registry: EventRegistry | None = None) -> None:
        self.registry = registry or REGISTRY
        self._decoders: dict[type, msgspec.json.Decoder[Any]] = {}
        self._checkers: dict[type, EventChecker | Literal[False]] = {}

    def encode(self, event: Any) -> tuple[EventTypeInfo, str]:
        """Return the event's registration and its payload as JSON text.

        Raises:
            UnknownEventTypeError: the event's class is not registered.
            EventEncodeError: a field cannot be stored as JSON, or would not read back exactly
                (see :mod:`wgstore.events.storable`).
        """
        info = self.registry.by_class(type(event))
        data = encode_json(event, info.name, event=True)
        if has_nul(data):
            raise EventEncodeError(
                f"{info.name}: a string field contains a NUL character (\\x00), which the "
                "database cannot store; remove it before appending"
            )
        checker = self._checkers.get(info.cls)
        if checker is None:
            checker = self._checkers[info.cls] = EventChecker.for_class(info.cls)
        if checker is not False:
            checker.check(info, event, data)
        return info, data.decode()

    def decode(
        self,
        type_name: str,
        schema_version: int,
        data: str | bytes,
        *,
        stream_id: str,
        position: int,
    ) -> Any:
        """Decode stored JSON into its event type, upcasting older payloads first.

        A type no class is registered for decodes to an :class:`UnknownEvent` holding the raw
        payload: a reader never fails on events another program added to the log.

        Raises:
            EventDecodeError: the payload does not fit its (registered) type, or was stored by
                newer code.
        """
        try:
            info = self.registry.by_name(type_name)
        except UnknownEventTypeError:
            return unknown_event(type_name, schema_version, data)
        try:
            if schema_version == info.version:
                return self._decoder(info.cls).decode(data)
            payload = self._upcast(info, schema_version, msgspec.json.decode(data))
            return msgspec.convert(payload, info.cls)
        except DECODE_ERRORS as error:
            raise EventDecodeError(
                f"{type_name} (schema version {schema_version}) no longer decodes: {error}. "
                "Register an upcaster for the old schema with @upcaster(...).",
                stream_id=stream_id,
                position=position,
            ) from error
        except _SchemaTooNew as error:
            raise EventDecodeError(str(error), stream_id=stream_id, position=position) from None
        except _UpcasterFailed as error:
            raise EventDecodeError(
                str(error), stream_id=stream_id, position=position
            ) from error.__cause__

    def current_decoder(
        self, type_name: str, schema_version: int
    ) -> Callable[[str | bytes], Any] | None:
        """The bare msgspec decode function of ``type_name`` stored at ``schema_version``.

        For readers that decode many rows: one lookup per type instead of one per row. ``None``
        when the payload needs :meth:`decode`'s other paths (an unregistered type, or an older
        or newer schema version). The function raises :data:`DECODE_ERRORS`; call
        :meth:`decode` on the same row to get the :class:`EventDecodeError` instead.
        """
        try:
            info = self.registry.by_name(type_name)
        except UnknownEventTypeError:
            return None
        if schema_version != info.version:
            return None
        return self._decoder(info.cls).decode

    def _decoder(self, cls: type) -> msgspec.json.Decoder[Any]:
        decoder = self._decoders.get(cls)
        if decoder is None:
            decoder = self._decoders[cls] = msgspec.json.Decoder(cls)
        return decoder

    def _upcast(self, info: EventTypeInfo, version: int, payload: dict[str, Any]) -> dict[str, Any]:
        if version > info.version:
            raise _SchemaTooNew(
                f"{info.name} was stored at schema version {version}, but this code knows "
                f"versions up to {info.version}: upgrade wgstore (or the module defining "
                f"{info.name}) to read it"
            )
        while version < info.version:
            step = self.registry.upcaster_for(info.name, version)
            if step is None:
                raise ValueError(
                    f"no upcaster for {info.name} from version {version} to {version + 1}"
                )
            try:
                payload = step(payload)
            except Exception as error:  # a user's function: whatever it raises, name it
                raise _UpcasterFailed(
                    f"the upcaster of {info.name} from schema version {version} to "
                    f"{version + 1} failed ({type(error).__name__}: {error}); fix it: it gets "
                    "the stored payload as a dict and returns the next version's dict"
                ) from error
            version += 1
        return payload


def unknown_event(type_name: str, schema_version: int, data: str | bytes) -> UnknownEvent:
    """The placeholder for a stored event of an unregistered type: its payload as stored."""
    try:
        payload: Any = msgspec.json.decode(data)
    except msgspec.DecodeError:  # only SQLite can hold non-JSON text; keep it as it is
        payload = data.decode(errors="replace") if isinstance(data, bytes) else data
    return UnknownEvent(type=type_name, schema_version=schema_version, data=payload)


class _SchemaTooNew(Exception):
    pass


class _UpcasterFailed(Exception):
    pass
