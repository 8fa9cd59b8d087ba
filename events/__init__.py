"""The event log: event types, the registry, the codec, ``EventStore`` and subscriptions.

Works without Ray installed. Importing this package registers the built-in event types of
the ``worker-group-*`` and ``run-*`` streams.
"""

from wgstore.events import run, worker_group
from wgstore.events.codec import Codec
from wgstore.events.errors import (
    ConcurrencyError,
    DuplicateEventError,
    EventDecodeError,
    EventEncodeError,
    EventStoreError,
    ImmutableEventError,
    SchemaVersionError,
    StoreUnavailableError,
    UnknownEventTypeError,
    WgstoreError,
)
from wgstore.events.records import ANY, NO_STREAM, STREAM_EXISTS, NewEvent, RecordedEvent
from wgstore.events.registry import REGISTRY, EventRegistry, event_type, upcaster
from wgstore.events.store import EventStore, VerifyReport
from wgstore.events.subscriptions import Subscription, SubscriptionConflictError

__all__ = [
    "ANY",
    "NO_STREAM",
    "REGISTRY",
    "STREAM_EXISTS",
    "Codec",
    "ConcurrencyError",
    "DuplicateEventError",
    "EventDecodeError",
    "EventEncodeError",
    "EventRegistry",
    "EventStore",
    "EventStoreError",
    "ImmutableEventError",
    "NewEvent",
    "RecordedEvent",
    "SchemaVersionError",
    "StoreUnavailableError",
    "Subscription",
    "SubscriptionConflictError",
    "UnknownEventTypeError",
    "VerifyReport",
    "WgstoreError",
    "event_type",
    "run",
    "upcaster",
    "worker_group",
]
