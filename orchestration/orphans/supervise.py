"""``supervise``: resume every orphaned, resumable run, by itself, within a policy.

A long-running loop over the log (``wgstore supervise``). Every ``interval_s`` it lists the
orphaned runs (:func:`~wgstore.orchestration.orphans.gc.orphaned_runs`: not ended, and the process that
must hold the lease is gone) and, for each one it may resume:

1. it takes the run's lease itself (so two supervisors never resume one run twice: the second
   finds the lease held and leaves the run alone);
2. it starts ``wgstore resume RUN --lease-from HOLDER:EPOCH`` as a process of its own (the new
   driver), which takes the lease over from it and records ``RunResumed(by="supervisor <id>")``.

A run is skipped, with one log line, when it cannot be resumed (the reason), when its name does
not match ``runs`` (a glob), or when supervisors resumed it ``max_resumes`` times already
(counted from its ``RunResumed`` events, so the count survives the supervisor). With ``dry_run``
it only says what it would do. Problems with the store or the cluster are logged once each and
retried with backoff; ``stop`` (SIGTERM in the command) ends the loop between passes. The
drivers it started go on: each holds its run's lease.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from wgstore.events import EventStore
from wgstore.events.leases import acquire_lease
from wgstore.orchestration.orphans.gc import orphaned_runs
from wgstore.projections.run_state import RunState, resume_problem

__all__ = ["SUPERVISOR", "Decision", "plan", "start_resume", "supervise"]

log = logging.getLogger("wgstore.supervise")

SUPERVISOR = "supervisor"

HANDOFF_LEASE_S = 60.0
"""How long the supervisor holds a run's lease for the resume process it starts, which takes it
over (``--lease-from``) once it runs. A resume that never starts lets it lapse: the run is
orphaned again after this long and the next pass may try again (within ``max_resumes``)."""
"""``RunResumed.by`` of a supervisor's resumes starts with this."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What a supervisor does with one orphaned run: ``resume`` or ``skip`` (and why)."""

    run_id: str
    action: str
    reason: str


def _supervisor_resumes(run: RunState) -> int:
    return sum(1 for resumed in run.resumes if resumed.by.startswith(SUPERVISOR))


def plan(
    store: EventStore, *, max_resumes: int, runs: str | None, now: datetime | None = None
) -> list[Decision]:
    """What a pass would do with each orphaned run (pure apart from reading the log)."""
    decisions = []
    for run, _expired in orphaned_runs(store, now):
        problem = resume_problem(run)
        if problem is not None:
            decisions.append(Decision(run.run_id, "skip", f"not resumable: {problem}"))
        elif runs is not None and not fnmatch.fnmatchcase(run.name or "", runs):
            decisions.append(Decision(run.run_id, "skip", f"its name does not match {runs!r}"))
        elif _supervisor_resumes(run) >= max_resumes:
            decisions.append(Decision(run.run_id, "skip", f"resumed {max_resumes} time(s) already"))
        else:
            decisions.append(Decision(run.run_id, "resume", "orphaned: its driver is gone"))
    return decisions


def start_resume(url: str, run_id: str, holder: str, epoch: int) -> subprocess.Popen[bytes]:
    """Start the new driver: ``wgstore resume`` in a process (and session) of its own."""
    command = [
        sys.executable,
        "-m",
        "wgstore.cli",
        "resume",
        run_id,
        "--url",
        url,
        "--lease-from",
        f"{holder}:{epoch}",
        "--by",
        holder,
    ]
    return subprocess.Popen(command, start_new_session=True, env=dict(os.environ))


def supervise(
    store: EventStore,
    *,
    stop: threading.Event,
    max_resumes: int = 3,
    runs: str | None = None,
    dry_run: bool = False,
    interval_s: float = 5.0,
    spawn: Callable[[str, str, str, int], object] = start_resume,
    on_decision: Callable[[Decision], None] | None = None,
) -> None:
    """Resume orphaned runs until ``stop`` is set (see the module docstring).

    Args:
        store: the store to watch (its URL is handed to the drivers it starts).
        stop: set it to end the loop (between passes).
        max_resumes: at most this many supervisor resumes per run.
        runs: only runs whose name matches this glob.
        dry_run: only report what would be done.
        interval_s: seconds between passes.
        spawn: starts a driver: ``spawn(url, run_id, holder, epoch)`` (tests pass their own).
        on_decision: called with each decision (the command prints them).
    """
    holder = f"{SUPERVISOR} {uuid.uuid4().hex[:12]}"
    backoff = interval_s
    last_problem = ""
    while not stop.is_set():
        try:
            decisions = plan(store, max_resumes=max_resumes, runs=runs)
            for decision in decisions:
                if decision.action == "resume" and not dry_run:
                    decision = _resume(store, decision, holder, spawn)
                if on_decision is not None:
                    on_decision(decision)
                log.info("%s %s: %s", decision.action, decision.run_id, decision.reason)
            backoff, last_problem = interval_s, ""
        except Exception as error:  # noqa: BLE001 - the store or cluster away: retried
            problem = f"{type(error).__name__}: {error}"
            if problem != last_problem:
                log.warning("supervisor: %s (retrying)", problem)
            last_problem = problem
            backoff = min(backoff * 2, 60.0)
        stop.wait(backoff)


def _resume(
    store: EventStore,
    decision: Decision,
    holder: str,
    spawn: Callable[[str, str, str, int], object],
) -> Decision:
    run_id = decision.run_id
    run_lease = acquire_lease(store, run_id, holder, HANDOFF_LEASE_S, now=datetime.now(UTC))
    if run_lease is None:
        return Decision(run_id, "skip", "another process took it (a second supervisor?)")
    spawn(store.url, run_id, holder, run_lease.epoch)
    return Decision(run_id, "resumed", decision.reason)
