"""wgstore: an event-sourced state store for Ray worker groups.

The log is the truth: every step that builds a worker group and every lifecycle transition is
an immutable event in one append-only table (SQLite or PostgreSQL). Subpackages:

- :mod:`wgstore.events`: event types, the :class:`~wgstore.events.EventStore`, subscriptions.
- :mod:`wgstore.projections`: pure folds, time travel, snapshots, SQL read models.
- :mod:`wgstore.orchestration`: worker groups on Ray, commands and the executor.
- :mod:`wgstore.cli`: the ``wgstore`` command.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wgstore")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["__version__"]
