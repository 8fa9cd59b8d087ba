"""The event log: event types, the registry, the codec, ``EventStore`` and subscriptions.

Works without Ray installed. Importing this package registers the built-in event types of
the ``worker-group-*`` and ``run-*`` streams, and of what Ray's export events say about a
cluster (``ray-node-*``, ``ray-job-*``: :mod:`wgstore.events.ray_cluster`).
"""

from typing import TYPE_CHECKING

from wgstore._lazy import lazy_getattr
from wgstore.events import archive, ray_cluster, run, worker_group
from wgstore.events.codec import Codec
from wgstore.events.errors import (
    ArchivedStreamError,
    ConcurrencyError,
    DuplicateEventError,
    EventDecodeError,
    EventEncodeError,
    EventStoreError,
    FencedError,
    ImmutableEventError,
    InvalidArgumentError,
    SchemaVersionError,
    StoreFullError,
    StoreUnavailableError,
    UnknownEventTypeError,
    WgstoreError,
)
from wgstore.events.records import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    AppendRequest,
    Fence,
    NewEvent,
    RecordedEvent,
    UnknownEvent,
)
from wgstore.events.registry import REGISTRY, EventRegistry, event_type, upcaster

if TYPE_CHECKING:
    from wgstore.events.store import EventStore, VerifyReport
    from wgstore.events.subscriptions import Subscription, SubscriptionConflictError

# The store pulls in SQLAlchemy (~0.4 s): load it on first use, so code that only needs the
# event types (a Ray worker, say) imports fast.
_LAZY = {
    "EventStore": "wgstore.events.store",
    "VerifyReport": "wgstore.events.store",
    "Subscription": "wgstore.events.subscriptions",
    "SubscriptionConflictError": "wgstore.events.subscriptions",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "ANY",
    "NO_STREAM",
    "REGISTRY",
    "STREAM_EXISTS",
    "AppendRequest",
    "ArchivedStreamError",
    "Codec",
    "ConcurrencyError",
    "DuplicateEventError",
    "EventDecodeError",
    "EventEncodeError",
    "EventRegistry",
    "EventStore",
    "EventStoreError",
    "Fence",
    "FencedError",
    "ImmutableEventError",
    "InvalidArgumentError",
    "NewEvent",
    "RecordedEvent",
    "SchemaVersionError",
    "StoreFullError",
    "StoreUnavailableError",
    "Subscription",
    "SubscriptionConflictError",
    "UnknownEvent",
    "UnknownEventTypeError",
    "VerifyReport",
    "WgstoreError",
    "archive",
    "event_type",
    "ray_cluster",
    "run",
    "upcaster",
    "worker_group",
]
