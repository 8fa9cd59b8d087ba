"""Waiting in tests: for a condition, with a deadline, never a bare sleep as the proof."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Return once ``condition()`` holds; fail the test if it does not within ``timeout_s``
    (make it generous: the suite must pass on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)
