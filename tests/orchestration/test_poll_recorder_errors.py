"""The errors the poller records for a dead or hanging worker: Ray Train's words, pinned.

Written for the survivors of ``make mutate`` (issue 15): these texts are stored in the log and
read back by ``decide`` (health-check errors, preemption), so they are part of the log format.
"""

from __future__ import annotations

from wgstore.events.worker_group import ErrorInfo
from wgstore.orchestration.polling.recorder import health_check_failed, health_check_timed_out


def test_a_failed_health_check_is_ray_s_error_with_the_detail_and_no_traceback_by_default() -> None:
    error = health_check_failed("Worker: w\nActorDiedError: gone")
    assert error == ErrorInfo(
        type="WorkerHealthCheckFailedError",
        message="A worker health check failed.\nWorker: w\nActorDiedError: gone",
        traceback="",
    )
    assert error.is_health_check_error
    assert health_check_failed("x", "Traceback ...").traceback == "Traceback ..."


def test_a_hanging_health_check_is_ray_s_timeout_error() -> None:
    error = health_check_timed_out(2.5, "w")
    assert error == ErrorInfo(
        type="WorkerHealthCheckTimeoutError",
        message=(
            "A worker health check has been hanging for more than 2.5 seconds. "
            "Marking the worker as dead.\nWorker: w"
        ),
    )
    assert error.is_health_check_error
