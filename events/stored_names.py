"""One way to name a stored event type, or a field of a stored payload, in SQL.

Readers that query ``wg_events`` themselves instead of the read models (the serve follower's live
query, ``/metrics``, the views' type filters) name an event type by its registered name and a
field by its key in the stored JSON ``data``. Written as string literals (``'WorkerReported'``,
``data->>'checkpoint'``), a renamed class or field makes such a query silently match nothing.
Here both come from the event class: :func:`type_name` asks the registry, and :func:`field_name`
and :func:`json_field` check the field against the class's fields, raising when it is not one.
Callers name them at import (module constants), so a rename fails when the module is imported,
and in every test that imports it.

A payload is stored as msgspec encodes the frozen dataclass: one key per field, under the
field's own name (no renaming), which is what makes the field's name its key.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from wgstore.events.errors import InvalidArgumentError
from wgstore.events.registry import REGISTRY

if TYPE_CHECKING:
    import sqlalchemy as sa

# SQLAlchemy loads when json_field is called, not at import: the folds import this module, and
# a process that only folds events (a Ray Train controller) must not pay for SQLAlchemy.

__all__ = ["field_name", "json_field", "type_name"]


def type_name(cls: type) -> str:
    """The ``wg_events.event_type`` that events of class ``cls`` are stored under.

    Raises:
        UnknownEventTypeError: ``cls`` is not a registered event type.
    """
    return REGISTRY.by_class(cls).name


def field_name(cls: type, name: str) -> str:
    """``name``, checked to be a field of event class ``cls``: the key of ``wg_events.data``
    that field is stored under.

    Raises:
        UnknownEventTypeError: ``cls`` is not a registered event type.
        InvalidArgumentError: ``cls`` has no field ``name``.
    """
    info = REGISTRY.by_class(cls)
    names = [f.name for f in dataclasses.fields(info.cls)]
    if name not in names:
        raise InvalidArgumentError(
            f"{info.name} has no field {name!r} (its fields: {', '.join(names)}); name a field "
            "of the class as it is now"
        )
    return name


def json_field(cls: type, name: str, *, postgres: bool) -> sa.ColumnElement[Any]:
    """The field ``name`` of a ``cls`` event's stored ``data``, as SQL text (``NULL`` when the
    payload has no such key or holds JSON ``null``): ``data->>'name'`` on PostgreSQL,
    ``json_extract(data, '$.name')`` on SQLite.

    Raises:
        UnknownEventTypeError: ``cls`` is not a registered event type.
        InvalidArgumentError: ``cls`` has no field ``name``.
    """
    import sqlalchemy as sa

    key = field_name(cls, name)
    if postgres:
        return sa.literal_column(f"data->>'{key}'")
    return sa.literal_column(f"json_extract(data, '$.{key}')")
