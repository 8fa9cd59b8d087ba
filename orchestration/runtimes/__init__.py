"""Everything that touches the cluster, behind one small interface.

- :mod:`.protocol`: :class:`~.protocol.WorkerGroupRuntime`, what the executor asks of a cluster.
- :mod:`.ray_runtime`: it on Ray (detached, named actors and placement groups), over
  :mod:`.ray_resources` and the actor classes in :mod:`.actors`.
- :mod:`.fake_runtime`: it in memory, scripted, with faults (the executor's tests).
- Pure helpers both share: :mod:`.resource_names`, :mod:`.ranks`, :mod:`.feasibility`,
  :mod:`.environment`; and :mod:`.quiet_ray` for the driver's terminal.
"""
