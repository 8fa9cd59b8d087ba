"""One registry that maps stable event type names to classes, and upcasters for old payloads.

Names are explicit and never derived from module paths, so moving a class never orphans stored
events. A payload stored at schema version ``n`` is upcast step by step (``n -> n+1 -> ...``) to
the class's current version before it is decoded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from wgstore.events.errors import RegistrationError, UnknownEventTypeError

__all__ = ["REGISTRY", "EventRegistry", "EventTypeInfo", "event_type", "upcaster"]

T = TypeVar("T", bound=type)
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class EventTypeInfo:
    """A registered event type: its stable name, current schema version and class."""

    name: str
    version: int
    cls: type


class EventRegistry:
    """Maps event type names to classes and back, and holds the upcasters."""

    def __init__(self) -> None:
        self._by_name: dict[str, EventTypeInfo] = {}
        self._by_class: dict[type, EventTypeInfo] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}

    def register(self, cls: type, name: str, version: int = 1) -> EventTypeInfo:
        """Register ``cls`` under ``name`` at schema ``version``.

        Raises:
            TypeError: the class is not a frozen dataclass, or the name or version is invalid.
            RegistrationError: the name is already registered to another class.
        """
        if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise TypeError(
                f"event type {name!r}: {cls.__qualname__} must be a frozen dataclass; "
                "decorate it with @dataclass(frozen=True) below @event_type(...)"
            )
        if not name or not isinstance(name, str):
            raise TypeError("event type names must be non-empty strings, e.g. 'CheckpointPinned'")
        if not isinstance(version, int) or version < 1:
            raise TypeError(f"event type {name!r}: version must be an int >= 1, got {version!r}")
        existing = self._by_name.get(name)
        if existing is not None and existing.cls is not cls:
            if (
                existing.cls.__qualname__ == cls.__qualname__
                and existing.cls.__module__ == cls.__module__
            ):
                # The same class defined again (a module reloaded): the newest definition wins.
                del self._by_class[existing.cls]
            else:
                raise RegistrationError(
                    f"event type {name!r} is already registered to "
                    f"{existing.cls.__module__}.{existing.cls.__qualname__}; "
                    "choose another name for "
                    f"{cls.__module__}.{cls.__qualname__}"
                )
        info = EventTypeInfo(name=name, version=version, cls=cls)
        self._by_name[name] = info
        self._by_class[cls] = info
        return info

    def add_upcaster(self, name: str, from_version: int, fn: Upcaster) -> None:
        """Register ``fn`` to turn a ``name`` payload at ``from_version`` into ``from_version + 1``."""
        key = (name, from_version)
        if key in self._upcasters:
            raise RegistrationError(
                f"an upcaster for {name!r} from version {from_version} already exists; register "
                "one upcaster per (type, version)"
            )
        self._upcasters[key] = fn

    def upcaster_for(self, name: str, from_version: int) -> Upcaster | None:
        """The upcaster from ``from_version`` of ``name``, or None."""
        return self._upcasters.get((name, from_version))

    def by_name(self, name: str) -> EventTypeInfo:
        """The registered type called ``name``.

        Raises:
            UnknownEventTypeError: nothing is registered under that name.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownEventTypeError(
                f"no event type is registered as {name!r}: import the module that defines it "
                "(decorated with @event_type) before reading or appending"
            ) from None

    def by_class(self, cls: type) -> EventTypeInfo:
        """The registration of ``cls``.

        Raises:
            UnknownEventTypeError: the class is not registered.
        """
        try:
            return self._by_class[cls]
        except KeyError:
            raise UnknownEventTypeError(
                f"{cls.__module__}.{cls.__qualname__} is not a registered event type: decorate "
                "it with @event_type('SomeName', version=1) from wgstore.events"
            ) from None

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._by_name)


REGISTRY = EventRegistry()
"""The registry used by default by the store, the codec and the decorators."""


def event_type(
    name: str, version: int = 1, *, registry: EventRegistry | None = None
) -> Callable[[T], T]:
    """Register a frozen dataclass as an event type under a stable ``name``.

    Example::

        @event_type("CheckpointPinned", version=1)
        @dataclass(frozen=True)
        class CheckpointPinned:
            path: str
    """

    def decorate(cls: T) -> T:
        (registry or REGISTRY).register(cls, name, version)
        return cls

    return decorate


def upcaster(
    name: str, from_version: int, *, registry: EventRegistry | None = None
) -> Callable[[Upcaster], Upcaster]:
    """Register a function that turns a payload of ``from_version`` into ``from_version + 1``."""

    def decorate(fn: Upcaster) -> Upcaster:
        (registry or REGISTRY).add_upcaster(name, from_version, fn)
        return fn

    return decorate
