"""Runs: attempts of a worker group under a failure policy, and the controller that drives them.

- :mod:`.decide`: the controller's decisions as a pure function of the run, its group and the
  cluster; :mod:`.scaling`: how many workers of an elastic run fit (pure).
- :mod:`.controller`: :class:`~.controller.RunController`, the thin loop around ``decide``;
  :mod:`.cluster_probe`: what the Ray cluster offers it now.
- :mod:`.training`: ``start_run``, ``resume_run``, ``run_training`` (what ``wgstore run``
  calls), with :mod:`.inputs` (a new run's inputs, checked first) and :mod:`.outcome`.
"""
