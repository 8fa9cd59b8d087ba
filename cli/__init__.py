"""The ``wgstore`` command: audit, replay and run worker groups recorded in the event log.

A thin consumer of :mod:`wgstore.events`, :mod:`wgstore.projections` and
:mod:`wgstore.orchestration`: it calls their public functions and formats the results.
"""

from wgstore.cli.app import app, main

__all__ = ["app", "main"]
