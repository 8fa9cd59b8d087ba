"""``--help`` that shows what to type, not Python types, in paragraphs that wrap to the
terminal (applied to every command by the root group)."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["plain_help", "reflowed"]


def reflowed(text: str | None) -> str | None:
    """A command's help as paragraphs of one line each, for Rich to wrap to the terminal.

    Typer (0.29, ``rich_markup_mode="rich"``) joins the lines of a docstring's first paragraph
    but keeps the line breaks of the others, so at 80 columns a paragraph wrapped at 96 in the
    source broke every line twice, mid-sentence. A paragraph that starts with ``\b`` (Click's
    "keep as it is") is left alone."""
    if text is None:
        return None
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def plain_help(command: Any) -> None:
    """``--help`` shows what to type, not Python types: no ``<bool>`` after a flag, and a name
    (``--since SINCE``) instead of ``<str>`` after an option that takes a value; its help text
    is :func:`reflowed`."""
    command.help = reflowed(command.help)
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") == "argument":
            param.display_type_rich = lambda ctx: None  # its name is already in the first column
            continue
        if getattr(param, "param_type_name", "") != "option" or param.metavar is not None:
            continue
        param.metavar = "" if param.is_flag else (param.name or "value").upper()
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    make_help_option = command.get_help_option
    if getattr(make_help_option, "_wgstore_plain", False):
        return

    def plain_help_option(ctx: Any) -> Any:
        option = make_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    plain_help_option._wgstore_plain = True  # type: ignore[attr-defined]
    command.get_help_option = plain_help_option
