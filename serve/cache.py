"""Answers shared by the pages that ask the same question at the same log head.

After an append every open page of a run asks for that run at once; the first request computes
the answer and the others, waiting on the same key, get its bytes. An answer is kept while the
log's head is unchanged, for at most ``ttl_s`` (durations and orphaned runs move with the clock).
A page says which head it saw (``?head=N``): any kept answer at that head or later serves it
(:meth:`AnswerCache.at_least`), without a thread or a look at the log.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AnswerCache"]


@dataclass(frozen=True, slots=True)
class _Answer:
    head: int
    at: float
    body: bytes


class AnswerCache:
    """At most ``size`` answers, by key (a path and its query), each for one log head."""

    def __init__(self, *, ttl_s: float = 5.0, size: int = 256) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self.computed = 0
        """How many answers were computed (the others were shared)."""
        self._answers: OrderedDict[str, _Answer] = OrderedDict()
        self._flights: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def _fresh(self, key: str, head: int) -> bytes | None:
        answer = self._answers.get(key)
        if answer is None or answer.head != head or time.monotonic() - answer.at > self.ttl_s:
            return None
        self._answers.move_to_end(key)
        return answer.body

    def at_least(self, key: str, head: int) -> bytes | None:
        """The kept answer to ``key`` computed at ``head`` or later (within ``ttl_s``), or None.

        For a live page that asks for what an ``append`` message at ``head`` announced: any
        answer that already holds that head will do, with no look at the log."""
        with self._lock:
            answer = self._answers.get(key)
            if answer is None or answer.head < head or time.monotonic() - answer.at > self.ttl_s:
                return None
            self._answers.move_to_end(key)
            return answer.body

    def get(self, key: str, head: int, compute: Callable[[], bytes]) -> bytes:
        """The answer to ``key`` at ``head``: kept, or computed once by ``compute`` (callers
        asking meanwhile wait for it). An exception from ``compute`` is raised, not kept."""
        with self._lock:
            body = self._fresh(key, head)
            if body is not None:
                return body
            flight = self._flights.setdefault(key, threading.Lock())
        with flight:
            with self._lock:
                body = self._fresh(key, head)
            if body is not None:
                return body
            started = time.monotonic()
            body = compute()
            with self._lock:
                self.computed += 1
                self._answers[key] = _Answer(head, started, body)
                self._answers.move_to_end(key)
                while len(self._answers) > self.size:
                    self._answers.popitem(last=False)
                self._flights.pop(key, None)
        return body
