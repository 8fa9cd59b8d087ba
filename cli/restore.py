"""``wgstore restore RUN``: an archived run's events back in the live log, at their positions
(:func:`wgstore.projections.archiving.restore_run`)."""

from __future__ import annotations

from typing import Annotated

import typer

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    check_url,
    json_line,
    opened,
    out_console,
)
from wgstore.events import EventStore
from wgstore.events.engine import mask_url
from wgstore.events.streams import run_stream

__all__ = ["restore_command"]


def _resolve_for_restore(
    store: EventStore, given: str, archived: dict[str, str]
) -> tuple[str, bool]:
    """The full id of the run ``given`` names (its id or a unique prefix), and whether it is in
    the archive (else it is live).

    Raises:
        UsageProblem: no run, or more than one, live or archived.
    """
    given = given.strip()
    if not given:
        raise UsageProblem("give a run id (or a unique prefix of one)")
    if given in archived:
        return given, True
    if store.stream_version(run_stream(given)):
        return given, False
    found = {run_id: True for run_id in archived if run_id.startswith(given)}
    for stream_id, _ in store.streams(run_stream(given)):
        run_id = stream_id.removeprefix(run_stream(""))
        found.setdefault(run_id, False)
    if len(found) == 1:
        return next(iter(found.items()))
    if found:
        shown = ", ".join(sorted(found)[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageProblem(f"{given!r} matches {len(found)} runs ({shown}); give more of the id")
    raise UsageProblem(
        f"no run id starts with {given!r}, live or archived, in {mask_url(store.url)}: "
        "`wgstore runs` lists the live runs; the archive has a folder per run under its events/"
    )


def restore_command(
    run: Annotated[
        str, typer.Argument(metavar="RUN", help="The archived run's id (or a unique prefix).")
    ],
    url: UrlOption = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Put an archived run's events back into the live log, at their positions, with its read
    models (checked against the archive's manifest first).

    A run that is live already is left as it is (exit 0).
    """
    check_url(url)
    from wgstore.events.archive_log import archived_run_ids
    from wgstore.events.errors import InvalidArgumentError
    from wgstore.projections.archiving import restore_run

    with opened(url, read_only=False) as store:
        archived = archived_run_ids(store)
        run_id, in_archive = _resolve_for_restore(store, run, archived)
        restored = 0
        if in_archive:
            try:
                restored = restore_run(store, run_id)
            except InvalidArgumentError:
                raise
            except ValueError as error:  # a manifest or file not as the log recorded it
                raise CliError(f"cannot restore run {run_id}: {error}") from None
    if as_json:
        typer.echo(
            json_line(
                {
                    "run_id": run_id,
                    "restored": restored,
                    "batch_id": archived.get(run_id),
                    "was_live": not in_archive,
                }
            )
        )
    elif not in_archive:
        out_console().print(
            f"run {run_id} is live (not archived): nothing to restore", markup=False
        )
    else:
        out_console().print(
            f"restored run {run_id}: {restored:,} event(s) back in the live log "
            f"(from batch {archived[run_id]})",
            markup=False,
        )
