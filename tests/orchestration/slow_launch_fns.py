"""A train function whose module takes 30 s to import: a worker group that runs it is still
starting (its workers importing it) for 30 s after its workers exist, a window a test can hit
however fast this machine starts Ray actors (it keeps idle workers ready). 10 s were missed once
on a loaded machine (the test saw the sync actor only after the start had ended); the test
interrupts the start and its workers are killed, so the longer window costs it nothing."""

from __future__ import annotations

import time
from typing import Any

from examples.train import sleepy_fn as _sleepy_fn

time.sleep(30.0)


def sleepy_fn(config: dict[str, Any]) -> None:
    """``examples.train.sleepy_fn``, from a module that was slow to import."""
    _sleepy_fn(config)
