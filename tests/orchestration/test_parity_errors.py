"""``WorkerGroupPollStatus.get_error_string()`` against Ray 2.60's own, case by case.

Each case is built twice, as Ray's exceptions in Ray's ``WorkerStatus`` and as wgstore's
``ErrorInfo`` in wgstore's ``WorkerStatus``, the way each side records that failure; the strings
must be equal. Ray's classes are imported from site-packages (no Ray cluster is needed).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

ray_poll = pytest.importorskip("ray.train.v2._internal.execution.worker_group.poll")
ray_exc = pytest.importorskip("ray.train.v2._internal.exceptions")

from wgstore.events.worker_group import ErrorInfo  # noqa: E402
from wgstore.projections.state import WorkerGroupPollStatus, WorkerStatus  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One worker's failure: ``kind`` is ``user`` (the train function raised), ``failed`` (its
    poll raised: the actor died) or ``hung`` (its poll hung past the health-check timeout)."""

    kind: str
    text: str
    running: bool = False


def _traceback(message: str, depth: int = 1) -> str:
    frames = "".join(
        f'  File "/home/user/train.py", line {10 + i}, in step_{i}\n    step_{i + 1}(x)\n'
        for i in range(depth)
    )
    return f"Traceback (most recent call last):\n{frames}ValueError: {message}\n"


def _ray_error(case: Case) -> Exception:
    if case.kind == "user":
        return ray_exc.UserExceptionWithTraceback(ValueError(case.text), _traceback(case.text))
    if case.kind == "failed":
        return ray_exc.WorkerHealthCheckFailedError(
            "A worker health check failed.", failure=RuntimeError(case.text)
        )
    return ray_exc.WorkerHealthCheckTimeoutError(case.text)


def _wgstore_error(case: Case) -> ErrorInfo:
    if case.kind == "user":
        return ErrorInfo(type="ValueError", message=case.text, traceback=_traceback(case.text))
    if case.kind == "failed":
        # the poller puts the failure's text into the message (Ray appends it in __str__)
        return ErrorInfo(
            type="WorkerHealthCheckFailedError",
            message=f"A worker health check failed.\n{case.text}",
            traceback="Traceback (most recent call last):\n  (remote)\nRuntimeError: x\n",
        )
    return ErrorInfo(
        type="WorkerHealthCheckTimeoutError",
        message=str(ray_exc.WorkerHealthCheckTimeoutError(case.text)),
    )


LONG = "x" * 1200
CASES: dict[str, dict[int, Case | None]] = {
    "no worker failed": {0: None, 1: None},
    "one rank raised in the train function": {0: None, 1: Case("user", "bad batch")},
    "ranks with the same error up to numbers share one line": {
        0: Case("user", "rank 0 failed at step 3"),
        1: Case("user", "rank 1 failed at step 3"),
        2: Case("user", "rank 2 failed at step 0x1f"),
    },
    "different errors get one entry each, in rank order": {
        0: Case("user", "disk full"),
        1: Case("user", "bad batch"),
        2: Case("user", "disk full"),
    },
    "a long train-function error is cut to its first and last 500 characters": {
        0: Case("user", LONG)
    },
    "an error of exactly the limit (1000 characters) is cut": {0: Case("user", "y" * 889)},
    "an error one character under the limit is whole": {0: Case("user", "z" * 888)},
    "a long health-check failure is shown whole": {0: Case("failed", LONG)},
    "a long error of a still running worker is shown whole": {0: Case("hung", LONG, running=True)},
    "a dead actor and a user error side by side": {
        0: Case("failed", "actor 0 died"),
        1: Case("failed", "actor 1 died"),
        2: Case("user", "bad batch"),
    },
    "a hung poll next to finished ranks": {
        0: None,
        1: Case("hung", "A worker health check has been hanging for 600 seconds.", running=True),
    },
    "a long train-function error grouped across ranks is cut once": {
        0: Case("user", LONG + " rank 0"),
        1: Case("user", LONG + " rank 1"),
    },
}


def _ray_status(case: dict[int, Case | None]) -> object:
    return ray_poll.WorkerGroupPollStatus(
        worker_statuses={
            rank: ray_poll.WorkerStatus(
                running=c.running if c else False, error=_ray_error(c) if c else None
            )
            for rank, c in case.items()
        }
    )


def _wgstore_status(case: dict[int, Case | None]) -> WorkerGroupPollStatus:
    return WorkerGroupPollStatus(
        {
            rank: WorkerStatus(
                running=c.running if c else False, error=_wgstore_error(c) if c else None
            )
            for rank, c in case.items()
        }
    )


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_error_string_is_the_one_ray_prints(case: dict[int, Case | None]) -> None:
    ours = _wgstore_status(case).get_error_string()
    assert ours == _ray_status(case).get_error_string()


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_failed_ranks_and_finished_flag_are_ray_s(case: dict[int, Case | None]) -> None:
    ours, theirs = _wgstore_status(case), _ray_status(case)
    assert set(ours.errors) == set(theirs.errors)
    assert ours.finished == bool(theirs.finished)


def test_errors_keep_type_message_and_traceback_while_the_string_shows_the_traceback() -> None:
    status = _wgstore_status({0: Case("user", "bad batch"), 1: Case("user", "bad batch")})
    error = status.errors[1]
    assert (error.type, error.message) == ("ValueError", "bad batch")
    assert error.traceback.startswith("Traceback (most recent call last):")
    assert status.get_error_string() == "[Rank 0,1 Error Snippet]:\n" + _traceback("bad batch")


def test_an_error_recorded_without_a_traceback_shows_type_and_message() -> None:
    status = WorkerGroupPollStatus(
        {0: WorkerStatus(False, ErrorInfo(type="OSError", message="disk"))}
    )
    assert status.get_error_string() == "[Rank 0 Error Snippet]:\nOSError: disk"
