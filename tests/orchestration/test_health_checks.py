"""Ray Train's health-check rules, as both pollers keep them (``polling/health.py``), without Ray.

The pollers on Ray and in memory are checked against each other by tests/orchestration/
test_runtime_contract.py; these tests pin the rules themselves.
"""

from __future__ import annotations

from wgstore.events.worker_group import ErrorInfo
from wgstore.orchestration.polling.health import HealthChecks
from wgstore.orchestration.polling.recorder import PREEMPTED_NOTE
from wgstore.projections.state import WorkerStatus

NAMES = {0: "w-0", 1: "w-1"}


def test_a_missing_worker_is_failed_as_gone_and_one_the_log_knows_stopped_keeps_its_status() -> (
    None
):
    stopped = WorkerStatus(running=False, return_value=7)
    health = HealthChecks(NAMES, 5.0, known={1: stopped}, missing=[0, 1])

    gone = health.statuses()[0]
    assert not gone.running and gone.error is not None
    assert gone.error.type == "WorkerHealthCheckFailedError"
    assert "Worker actor w-0 is gone." in gone.error.message
    assert health.statuses()[1] == stopped
    assert health.finished
    assert health.to_poll() == []


def test_an_outstanding_poll_is_not_sent_again_and_an_answer_frees_the_worker() -> None:
    health = HealthChecks(NAMES, 5.0)
    assert health.to_poll() == [0, 1]

    health.sent(0, at=10.0)
    assert health.to_poll() == [1]
    health.answered(0, WorkerStatus(running=True))
    assert health.to_poll() == [0, 1]

    health.answered(1, WorkerStatus(running=False, return_value="done"))
    assert health.to_poll() == [0]
    assert not health.finished


def test_a_poll_outstanding_past_the_timeout_marks_the_worker_yet_a_late_answer_counts() -> None:
    health = HealthChecks(NAMES, 5.0)
    health.sent(0, at=10.0)
    health.check_timeouts(now=15.0)  # exactly the timeout: not past it
    assert health.statuses()[0] == WorkerStatus(running=True)

    health.check_timeouts(now=15.5)
    hanging = health.statuses()[0]
    assert hanging.running and hanging.error is not None
    assert hanging.error.type == "WorkerHealthCheckTimeoutError"
    assert "more than 5 seconds" in hanging.error.message and "Worker: w-0" in hanging.error.message
    assert health.to_poll() == [1]  # still outstanding: not sent again

    health.answered(0, WorkerStatus(running=False, return_value=3))
    assert health.statuses()[0] == WorkerStatus(running=False, return_value=3)


def test_a_poll_that_raised_fails_the_worker_with_its_error_and_a_preemption_says_so() -> None:
    health = HealthChecks(NAMES, 5.0)
    health.sent(0, at=1.0)
    health.died(0, "RayActorError: the actor died", "Traceback ...")
    health.died(1, "RayActorError: the node is gone", preempted=True)

    died = health.statuses()[0]
    assert not died.running and died.error is not None
    assert died.error.message.startswith("A worker health check failed.\nWorker: w-0\n")
    assert died.error.traceback == "Traceback ..."
    assert PREEMPTED_NOTE not in died.error.message
    preempted = health.statuses()[1].error
    assert preempted is not None and preempted.message.endswith(PREEMPTED_NOTE)
    assert health.finished and health.to_poll() == []
    health.check_timeouts(now=100.0)  # a dead worker's poll is no longer outstanding
    assert not health.statuses()[0].running


def test_statuses_are_a_copy_and_a_train_error_is_kept_as_answered() -> None:
    health = HealthChecks(NAMES, 5.0)
    error = ErrorInfo(type="ValueError", message="bad batch", traceback="")
    health.answered(1, WorkerStatus(running=False, error=error))
    statuses = health.statuses()
    statuses[0] = WorkerStatus(running=False)
    assert health.statuses()[0].running
    assert health.statuses()[1].error == error


def test_a_rank_only_the_log_knows_is_reported_as_known_and_never_polled() -> None:
    health = HealthChecks({0: "w-0"}, 5.0, known={3: WorkerStatus(running=True)})
    assert health.to_poll() == [0]
    assert health.statuses()[3] == WorkerStatus(running=True)
