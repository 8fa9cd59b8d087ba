"""``--help`` that shows what to type, not Python types (applied to every command by the root group)."""

from __future__ import annotations

from typing import Any

__all__ = ["plain_help"]


def plain_help(command: Any) -> None:
    """``--help`` shows what to type, not Python types: no ``<bool>`` after a flag, and a name
    (``--since SINCE``) instead of ``<str>`` after an option that takes a value."""
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
