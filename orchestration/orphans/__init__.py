"""Runs whose driver or controller is gone.

- :mod:`.gc`: ``collect_garbage`` ends them and releases their Ray resources.
- :mod:`.resume`: ``resume_orphan`` continues one from the log alone.
- :mod:`.supervise`: ``supervise`` resumes every resumable one, by itself, within a policy.
"""
