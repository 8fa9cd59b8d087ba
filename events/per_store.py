"""One helper object per store object in a process, made on first use, gone with the store."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from wgstore.events.store import EventStore

__all__ = ["PerStore"]

T = TypeVar("T")


class PerStore(Generic[T]):
    """``per_store(store)``: the ``T`` of ``store`` (``make(store)`` the first time), kept only
    as long as the store object lives (a lease renewer, the projector's memory: things of one
    store object that outlive one call)."""

    def __init__(self, make: Callable[[EventStore], T]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[EventStore, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, store: EventStore) -> T:
        with self._lock:
            made = self._made.get(store)
            if made is None:
                made = self._made[store] = self._make(store)
            return made
