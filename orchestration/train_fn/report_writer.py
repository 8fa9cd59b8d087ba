"""The worker's own connection to the store: ``report()`` appends ``WorkerReported`` itself.

So that a report is in the log when ``report()`` returns (a worker killed right after loses
nothing), each worker actor writes its reports to the store directly instead of queueing them
for the executor's next poll. The executor hands the store URL (a SQLite path made absolute)
and the metadata to :meth:`WgstoreWorker.init_train_context`; :class:`ReportWriter` then:

- checks at once, without touching the database, that a SQLite file exists on this node (a
  worker on a node that cannot see the file fails the start at ``init_train_context`` instead of
  creating an empty database);
- opens the store in a background thread (importing SQLAlchemy and connecting takes a moment),
  started by ``init_train_context`` and awaited when the train function is armed
  (:meth:`wait_ready`), so the open overlaps the rest of the start, every worker starts training
  with its store open (the first ``report()`` costs what the others cost), and a store a worker
  cannot open fails the start, not the training;
- appends each report with a derived event id (uuid5 of group, rank and report index), so a
  retry after a lost reply or a transient error is stored once, and retries transient store
  errors for up to ``retry_s`` before raising :class:`ReportNotStoredError` to the train function.

Kept light at import (Ray worker processes import it): ``wgstore.events`` is imported in the
background thread.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = ["ReportWriter", "absolute_store_url", "report_event_id"]

# the same namespace as wgstore.orchestration.executor.commands.COMMAND_NAMESPACE (checked by a test),
# written out so that this module does not import the event package
_NAMESPACE = uuid.UUID("6f1d8f52-3c1e-4f4e-9a51-7f0c2b9d8e11")


def report_event_id(group_id: str, rank: int, index: int) -> uuid.UUID:
    """The id of the ``WorkerReported`` event of report ``index`` of ``rank``."""
    return uuid.uuid5(_NAMESPACE, f"{group_id}:report:{rank}:{index}")


def _sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///...`` URL (None for other backends)."""
    if not url.startswith("sqlite"):
        return None
    _, _, rest = url.partition(":///")
    return rest.split("?", 1)[0]


def absolute_store_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute (workers run in other folders)."""
    path = _sqlite_path(url)
    if path is None or path in ("", ":memory:") or os.path.isabs(path):
        return url
    head, _, rest = url.partition(":///")
    query = rest[len(path) :]
    return f"{head}:///{os.path.abspath(path)}{query}"


def _transient(error: BaseException) -> bool:
    from wgstore.events.errors import StoreUnavailableError

    return isinstance(error, StoreUnavailableError | ConnectionError | TimeoutError)


class ReportWriter:
    """Appends one worker's reports to the store.

    Args:
        url: the store URL (SQLite paths absolute).
        group_id: the group; reports go to its stream ``worker-group-<group_id>``.
        world_rank: this worker's rank.
        metadata: metadata for every report (``causation_id`` of the start and the like).
        hmac_key: the store's MAC key (see ``EventStore.open``), or None.
        retry_s: how long transient store errors are retried before ``report()`` raises.

    Raises:
        ReportNotStoredError: the URL is a SQLite file this node cannot see.
    """

    def __init__(
        self,
        url: str,
        *,
        group_id: str,
        world_rank: int,
        metadata: Mapping[str, Any],
        hmac_key: bytes | None = None,
        retry_s: float = 30.0,
    ) -> None:
        path = _sqlite_path(url)
        if path is not None and (path in ("", ":memory:") or not os.path.isfile(path)):
            from wgstore.orchestration.errors import ReportNotStoredError

            raise ReportNotStoredError(
                f"worker {world_rank} of group {group_id} cannot see the SQLite store {path!r} "
                f"on host {socket.gethostname()}: workers write their reports to the store "
                "themselves, so a SQLite file must be on a filesystem every node can read "
                "(one machine, or a shared mount); on a multi-node cluster use PostgreSQL"
            )
        self.url = url
        self.group_id = group_id
        self.world_rank = world_rank
        self.metadata = {**dict(metadata), "source": "worker", "world_rank": world_rank}
        self.retry_s = retry_s
        self._hmac_key = hmac_key
        self._store: Any = None
        self._run_seen = 0  # the run stream's version read so far (preemption)
        self._open_error: BaseException | None = None
        self._opened = threading.Event()
        threading.Thread(target=self._open, name="wgstore-report-store", daemon=True).start()

    def _open(self) -> None:
        deadline = time.monotonic() + self.retry_s
        try:
            from wgstore.events import EventStore
            from wgstore.events.engine import create_store_engine

            while True:
                try:
                    # the executor opened this store at the schema's head already: skip the
                    # migration check (it imports Alembic, most of a worker's cost to open)
                    store = EventStore(
                        create_store_engine(self.url), url=self.url, hmac_key=self._hmac_key
                    )
                    try:
                        store.head()  # reachable, and the log table is there
                    except BaseException:
                        store.close()
                        raise
                    self._store = store
                    return
                except Exception as error:
                    if not _transient(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        except BaseException as error:  # noqa: BLE001 - handed to the first report()
            self._open_error = error
        finally:
            self._opened.set()

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Wait until the store is open.

        Raises:
            ReportNotStoredError: it could not be opened (the cause is chained), or not in time.
        """
        # nothing is imported before the opening thread is done: two threads importing the
        # event package at once can deadlock on its module locks
        if not self._opened.wait(timeout_s):
            from wgstore.orchestration.errors import ReportNotStoredError

            raise ReportNotStoredError(
                f"worker {self.world_rank} of group {self.group_id} could not open the store "
                f"within {timeout_s}s"
            )
        if self._store is None:
            from wgstore.orchestration.errors import ReportNotStoredError

            raise ReportNotStoredError(
                f"worker {self.world_rank} of group {self.group_id} cannot open the store its "
                f"reports go to: {type(self._open_error).__name__}: {self._open_error}"
            ) from self._open_error

    def preemption(self, run_id: str) -> Any:
        """The latest ``PreemptionNoticed`` of this group in run ``run_id``'s stream, or
        ``None``; the stream is read from where the last call left off. A store that cannot be
        read now is ``None`` (the next call reads again)."""
        self._opened.wait()  # before any import (see wait_ready)
        if self._store is None:
            return None
        from wgstore.events.run import PreemptionNoticed
        from wgstore.events.streams import run_stream

        try:
            records = list(
                self._store.read_stream(run_stream(run_id), from_version=self._run_seen + 1)
            )
        except Exception:  # noqa: BLE001 - a notice read later is as good
            return None
        notice = None
        for record in records:
            self._run_seen = record.version
            event = record.event
            if isinstance(event, PreemptionNoticed) and event.group_id == self.group_id:
                notice = event
        return notice

    def append(self, index: int, metrics: Mapping[str, Any], checkpoint: str | None) -> None:
        """Store report ``index``; returns once it is in the log.

        Raises:
            ReportNotStoredError: the store could not be opened or kept failing for ``retry_s``,
                or refused the report (the cause is chained).
        """
        self._opened.wait()  # before any import (see wait_ready)
        from wgstore.orchestration.errors import ReportNotStoredError

        if self._store is None:
            raise ReportNotStoredError(
                f"report {index} of worker {self.world_rank} (group {self.group_id}) was not "
                f"stored: the store could not be opened: {self._open_error}"
            ) from self._open_error
        from wgstore.events import NewEvent
        from wgstore.events.streams import group_stream
        from wgstore.events.worker_group import WorkerReported

        event = NewEvent(
            WorkerReported(
                world_rank=self.world_rank, index=index, metrics=metrics, checkpoint=checkpoint
            ),
            event_id=report_event_id(self.group_id, self.world_rank, index),
            metadata=self.metadata,
        )
        stream = group_stream(self.group_id)
        deadline = time.monotonic() + self.retry_s
        pause = 0.05
        while True:
            try:
                self._store.append(stream, [event])
                return
            except Exception as error:
                if not _transient(error) or time.monotonic() + pause > deadline:
                    raise ReportNotStoredError(
                        f"report {index} of worker {self.world_rank} (group {self.group_id}) "
                        f"was not stored: {type(error).__name__}: {error}"
                    ) from error
                time.sleep(pause)
                pause = min(1.0, pause * 2)

    def close(self) -> None:
        """Close the store connection (if it was opened)."""
        if self._opened.is_set() and self._store is not None:
            self._store.close()
