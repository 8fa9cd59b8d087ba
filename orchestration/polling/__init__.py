"""Polling running workers with Ray Train's health-check semantics, and recording the polls.

- :mod:`.recorder`: poll results and the pure recorder that turns them into
  ``WorkerGroupPolled`` events (and the notes a poll's error carries, e.g. a preemption).
- :mod:`.health`: Ray Train's health-check rules over one group's polls (pure; both runtimes' pollers
  keep them).
- :mod:`.poller`: polling one group's actors on Ray (the only Ray module here).

Which groups to poll and when is the executor's (``executor.group_polls``,
``executor.poll_times``).
"""
