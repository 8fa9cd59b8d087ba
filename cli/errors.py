"""The CLI's own errors: a problem to report as one red line and an exit code."""

from __future__ import annotations

__all__ = ["CliError", "UsageProblem"]


class CliError(Exception):
    """A problem to report as one line on stderr, exiting with ``exit_code`` (default 1)."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageProblem(CliError):
    """The command line is wrong (exit 2): a bad URL, time, group id or option combination."""

    exit_code = 2
