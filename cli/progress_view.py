"""What a run shows while it trains: a live table of its current group on a terminal, progress
lines (:func:`wgstore.projections.progress.progress_line`, every few seconds when they changed)
in a pipe or a log file, then the group's final table. Used by :mod:`wgstore.cli.live_run`.
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live

from wgstore.cli.common import out_console
from wgstore.cli.group_view import live_view
from wgstore.projections import WorkerGroupState
from wgstore.projections.progress import progress_line

__all__ = ["PROGRESS_EVERY_S", "Progress"]

PROGRESS_EVERY_S = 2.0
"""Seconds between progress lines when stdout is not a terminal (only when something changed)."""


class _ProgressLines:
    """A progress line every ``every_s`` seconds when it changed: what a pipe or a log file
    gets instead of the live table (Rich draws that only on a terminal)."""

    def __init__(
        self, console: Console, every_s: float = PROGRESS_EVERY_S, prefix: str = ""
    ) -> None:
        self._console = console
        self._every_s = every_s
        self._prefix = prefix
        self._lock = threading.Lock()
        self._latest = ""
        self._printed = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wgstore-progress", daemon=True)

    def __enter__(self) -> _ProgressLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def update(self, state: WorkerGroupState) -> None:
        line = self._prefix + progress_line(state)
        with self._lock:
            self._latest = line

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            with self._lock:
                line = self._latest
            if line and line != self._printed:
                self._console.print(line, markup=False, highlight=False, soft_wrap=True)
                self._printed = line


class Progress:
    """What a run shows while it trains: the live table of the current group on a terminal,
    progress lines (:class:`_ProgressLines`) in a pipe or a log file, or when ``lines``; then
    the group's final table (:meth:`finish`)."""

    def __init__(self, *, lines: bool = False, prefix: str = "") -> None:
        self._console = out_console()
        self._lines: _ProgressLines | None = None
        self._live: Live | None = None
        if lines or not self._console.is_terminal:
            self._lines = _ProgressLines(self._console, prefix=prefix)
        else:
            self._live = Live(console=self._console, refresh_per_second=4, transient=False)
        self._last = 0.0

    def __enter__(self) -> Progress:
        if self._lines is not None:
            self._lines.__enter__()
        else:
            assert self._live is not None
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lines is not None:
            self._lines.__exit__(*exc)
        elif self._live is not None:
            self._live.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, state: WorkerGroupState) -> None:
        """Show ``state`` (the table at most every 0.1 s, and its terminal state)."""
        if self._lines is not None:
            self._lines.update(state)
            return
        assert self._live is not None
        now = time.monotonic()
        if now - self._last >= 0.1 or state.is_terminal:
            self._live.update(live_view(state))
            self._last = now

    def finish(self, state: WorkerGroupState) -> None:
        """Show the group's final table: in place of the live one, or once after the lines."""
        if self._live is not None:
            self._live.update(live_view(state))
        else:
            self.__exit__(None, None, None)  # the last line first, then the table
            self._lines = None
            self._console.print(live_view(state))
