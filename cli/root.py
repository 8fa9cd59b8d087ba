"""The root command group: the one place where errors become a red line and an exit code.

A :class:`CliError`, any :class:`~wgstore.events.WgstoreError` and a ``ValueError`` from
parsing become one red line on stderr and a non-zero exit, never a traceback. Exit codes:

- 0: done (for ``verify`` / ``db check``: no problem found);
- 1: the store or its data is not as expected (database missing, unreachable, not migrated,
  a broken hash chain, a refused SQL statement);
- 2: the command line is wrong (bad URL, bad time, unknown or ambiguous group id, bad option);
- 130: interrupted with Ctrl-C.
"""

from __future__ import annotations

from typing import Any, NoReturn

import typer
from rich.text import Text
from typer.core import TyperGroup

from wgstore.cli.common import err_console
from wgstore.cli.errors import CliError
from wgstore.cli.help import plain_help
from wgstore.events import InvalidArgumentError, WgstoreError

__all__ = ["WgstoreGroup", "fail"]


def fail(message: str, exit_code: int) -> NoReturn:
    """Print ``message`` as one red line on stderr and exit with ``exit_code``."""
    err_console().print(Text(f"error: {message}", style="bold red"))
    raise typer.Exit(exit_code)


class WgstoreGroup(TyperGroup):
    """The root command group: the one place where errors become a red line and an exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """A Typer group whose ``--help`` (and every subcommand's) shows no Python types."""
        super().__init__(*args, **kwargs)
        plain_help(self)

    def invoke(self, ctx: Any) -> Any:
        """Run the chosen command, turning expected errors into a message and an exit code."""
        try:
            return super().invoke(ctx)
        except CliError as error:
            fail(str(error), error.exit_code)
        except InvalidArgumentError as error:  # a version, position or id from the command line
            fail(str(error), 2)
        except WgstoreError as error:
            fail(str(error), 1)
        except ValueError as error:
            fail(str(error), 2)
        except OverflowError as error:  # a number too large for a date or a database integer
            fail(f"a number on the command line is too large ({error})", 2)
        except ConnectionError as error:  # e.g. Ray is not at RAY_ADDRESS
            fail(f"cannot connect: {error}", 1)
        except KeyboardInterrupt:
            err_console().print(Text("interrupted", style="yellow"))
            raise typer.Exit(130) from None
