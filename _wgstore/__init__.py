"""wgstore: an event-sourced state store for Ray worker groups.

The log is the truth: every step that builds a worker group and every lifecycle transition is
an immutable event in one append-only table (SQLite or PostgreSQL). Subpackages:

- :mod:`wgstore.events`: event types, the :class:`~wgstore.events.EventStore`, subscriptions.
- :mod:`wgstore.projections`: pure folds, time travel, snapshots, SQL read models.
- :mod:`wgstore.orchestration`: worker groups on Ray, commands and the executor.
- :mod:`wgstore.cli`: the ``wgstore`` command.
"""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    # importlib.metadata costs ~0.1 s; Ray workers import wgstore and rarely need the version.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("wgstore")
        except PackageNotFoundError:  # pragma: no cover - a source tree without install
            value = "0.0.0"
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module 'wgstore' has no attribute {name!r}")
