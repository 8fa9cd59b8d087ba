"""``wgstore archive``: move ended runs out of the live log to Parquet files (issue 43).

It calls :mod:`wgstore.projections.archiving`; ``wgstore restore`` (:mod:`wgstore.cli.restore`)
brings a run back, and ``wgstore supervise --archive-to`` archives on a schedule
(:mod:`wgstore.cli.archive_schedule`).
"""

from __future__ import annotations

import fnmatch
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from wgstore.cli.archive_retention import drop_archived, show_dropped
from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    check_url,
    err_console,
    format_time,
    json_line,
    opened,
    out_console,
    parse_time,
    refuse_blank,
)
from wgstore.events import EventStore, StoreUnavailableError

__all__ = ["archive_command", "check_glob", "open_location", "probe_location"]

# ---------------------------------------------------------------------- checks


def check_glob(glob: str | None, option: str = "--runs") -> str | None:
    """Refuse a blank glob (it would mean "every run") or one with an unclosed ``[``.

    Raises:
        UsageProblem: either.
    """
    if glob is None:
        return None
    refuse_blank(**{option.removeprefix("--"): glob})
    index = 0
    while index < len(glob):
        if glob[index] == "[":
            # as fnmatch reads a set: a ] right after [ or [! is a member, not its end
            end = index + 1
            if glob[end : end + 1] == "!":
                end += 1
            if glob[end : end + 1] == "]":
                end += 1
            close = glob.find("]", end)
            if close < 0:
                raise UsageProblem(
                    f"{option} {glob!r}: a [ that is never closed; close it (fin-[ab]*) or "
                    "write [[] for a literal ["
                )
            index = close
        index += 1
    return glob


def _ended_before(text: str, option: str = "--ended-before") -> datetime:
    try:
        return parse_time(text)
    except UsageProblem as problem:
        raise UsageProblem(f"{option}: {problem}") from None


def open_location(to: str, option: str = "--to") -> Any:
    """The archive location ``to`` (checked: pyarrow and fsspec are there, the URL's filesystem
    is installed); nothing is written."""
    from wgstore.events.archive_files import ArchiveLocation

    if not to.strip():
        raise UsageProblem(f"{option} is empty; give it a folder or an fsspec URL")
    return ArchiveLocation(to)


def probe_location(location: Any) -> None:
    """Write and remove a small file under the location: an unwritable one fails here, before
    any batch is read.

    Raises:
        CliError: the location refused the write.
    """
    name = f".wgstore-write-check-{uuid.uuid4().hex[:12]}"
    try:
        location.write_bytes(name, b"")
        location.remove(name)
    except StoreUnavailableError as error:
        raise CliError(
            f"{error}; nothing was archived: give --to a folder this user can create and write, "
            "or an fsspec URL (s3://...) whose credentials allow writing"
        ) from None


# ---------------------------------------------------------------------- vacuum


def _vacuum(store: EventStore) -> dict[str, Any]:
    """:func:`~wgstore.projections.archiving.vacuum_store`, its failure one line."""
    from wgstore.projections.archiving import vacuum_store

    try:
        return vacuum_store(store)
    except StoreUnavailableError as error:
        raise CliError(
            f"the runs were archived, but {error}; run `wgstore archive --to LOCATION --vacuum` "
            "again when no other process is writing the file"
        ) from None


def _vacuum_line(done: dict[str, Any]) -> str:
    if done["backend"] == "postgresql":
        return "--vacuum: not needed on PostgreSQL (the archived rows' space is reused by new rows)"
    before, after = done["bytes_before"], done["bytes_after"]
    return (
        f"VACUUM {done['file']}: {before:,} -> {after:,} bytes, with its WAL "
        f"({max(before - after, 0):,} returned to the file system)"
    )


# ---------------------------------------------------------------------- wgstore archive


def _ended_at(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def archive_command(
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="LOCATION",
            help="Where the Parquet files go: a folder, or an fsspec URL (s3://bucket/prefix).",
        ),
    ],
    url: UrlOption = DEFAULT_URL,
    ended_before: Annotated[
        str,
        typer.Option(
            "--ended-before",
            metavar="WHEN",
            help=(
                "Only runs that ended before this: a time ago (30d, 2h; 0s: every ended run) "
                "or an ISO time."
            ),
        ),
    ] = "30d",
    runs: Annotated[
        str | None,
        typer.Option("--runs", metavar="ID_GLOB", help="Only runs whose id matches (fin-*)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help=(
                "Only list the runs that would move (their events, and bytes: the octet "
                "lengths of the events' data and metadata in the live log) and those kept, "
                "and why; write nothing."
            ),
        ),
    ] = False,
    batch_runs: Annotated[
        int,
        typer.Option(
            "--batch-runs", min=1, metavar="N", help="Runs per batch (one delete transaction)."
        ),
    ] = 200,
    batch_events: Annotated[
        int,
        typer.Option(
            "--batch-events",
            min=1,
            metavar="N",
            help="Events per batch at most (a bigger run is a batch of its own): appends wait "
            "while a batch's delete runs, so this bounds their wait.",
        ),
    ] = 10_000,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help=(
                "SQLite: VACUUM afterwards, giving the freed pages back to the file system "
                "(prints the file's size before and after). PostgreSQL needs none."
            ),
        ),
    ] = False,
    drop_archived_after: Annotated[
        str | None,
        typer.Option(
            "--drop-archived-after",
            metavar="AGE",
            help="Also the retention bound of the archive itself: list the batches archived "
            "more than AGE ago (365d) whose Parquet files are there; with --yes, delete those "
            "files (their manifests stay, so verify still proves what was there).",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Delete what --drop-archived-after lists.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Move runs that ended (finished, errored or aborted) to Parquet files and out of the live
    log.

    Each batch's files are written, read back and checked before LogArchived names them and one
    transaction deletes the batch's rows: killed anywhere, every event is in the live log or in
    a checked file, and the next `wgstore archive` finishes what was started. Runs not ended
    (running, orphaned, resumable) stay. `wgstore restore RUN` brings a run back.
    """
    check_url(url)
    check_glob(runs)
    before = _ended_before(ended_before)
    location = open_location(to)
    from wgstore.projections.archiving import ArchiveRunsBusyError, archive_runs, plan_archive

    with opened(url, read_only=dry_run) as store:
        plan = plan_archive(store, ended_before=before, runs=runs)
        sizes = plan.sizes
        moving = [
            {
                "run_id": run_id,
                "status": plan.summaries[run_id].status,
                "ended_at": _ended_at(plan.summaries[run_id].ended_at),
                "events": sizes[run_id].events,
                "bytes": sizes[run_id].bytes,
            }
            for run_id in plan.runs
        ]
        kept = [{"run_id": run_id, "reason": reason} for run_id, reason in plan.kept]
        kept += _ended_later(store, plan, runs)
        if yes and drop_archived_after is None:
            raise UsageProblem("--yes confirms --drop-archived-after AGE; give that too")
        if dry_run:
            dropped = (
                drop_archived(store, drop_archived_after, delete=False)
                if drop_archived_after is not None
                else None
            )
            _show_plan(to, before, moving, kept, vacuum, as_json, dropped)
            return
        if plan.runs:
            probe_location(location)
        try:
            result = _archive_with_progress(
                lambda progress: archive_runs(
                    store,
                    to,
                    plan,
                    batch_runs=batch_runs,
                    batch_events=batch_events,
                    progress=progress,
                ),
                len(plan.runs),
                quiet=as_json,
            )
        except ArchiveRunsBusyError as error:
            raise CliError(str(error)) from None
        live_bytes = sum(sizes[run_id].bytes for run_id in result.runs if run_id in sizes)
        dropped = (
            drop_archived(store, drop_archived_after, delete=yes)
            if drop_archived_after is not None
            else None
        )
        vacuumed = _vacuum(store) if vacuum else None
    if as_json:
        typer.echo(
            json_line(
                {
                    "dry_run": False,
                    "location": to,
                    "ended_before": before.isoformat(),
                    "batches": result.batches,
                    "runs": result.runs,
                    "events": result.events,
                    "bytes": live_bytes,
                    "parquet_bytes": result.bytes,
                    "kept": kept,
                    "abandoned": [{"batch_id": b, "reason": r} for b, r in result.abandoned],
                    "finished": result.finished,
                    "vacuum": vacuumed,
                    "dropped": dropped,
                }
            )
        )
        return
    console = out_console()
    console.print(
        f"archived {len(result.runs)} run(s) in {len(result.batches)} batch(es) to {to}: "
        f"{result.events:,} event(s), {live_bytes:,} bytes of the live log "
        f"({result.bytes:,} bytes of Parquet)",
        markup=False,
    )
    if result.finished:
        console.print(
            f"finished {len(result.finished)} batch(es) an interrupted archive had started",
            markup=False,
        )
    for batch_id, reason in result.abandoned:
        console.print(f"abandoned batch {batch_id} (its runs stay live): {reason}", markup=False)
    if kept:
        console.print(
            f"kept {len(kept)} run(s): not ended, orphaned or ended later (--dry-run lists them)",
            markup=False,
        )
    if dropped is not None:
        show_dropped(dropped)
    if vacuumed is not None:
        console.print(_vacuum_line(vacuumed), markup=False)


def _ended_later(store: EventStore, plan: Any, glob: str | None) -> list[dict[str, Any]]:
    """The runs (matching ``glob``) that ended, but not before ``--ended-before``: kept too."""
    from wgstore.projections.run_views import run_summaries

    listed = set(plan.runs) | {run_id for run_id, _ in plan.kept}
    return [
        {"run_id": run.run_id, "reason": f"ended {format_time(run.ended_at)}, after --ended-before"}
        for run in run_summaries(store)
        if run.run_id not in listed
        and run.ended_at is not None
        and (glob is None or fnmatch.fnmatchcase(run.run_id, glob))
    ]


def _archive_with_progress(
    archive: Callable[[Callable[[int, int], None]], Any], total: int, *, quiet: bool
) -> Any:
    """Run ``archive(progress)`` under a Rich progress bar on stderr (runs done of ``total``)."""
    if quiet or total == 0:
        return archive(lambda _done, _total: None)
    columns = (
        TextColumn("archiving"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("runs"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console(), transient=True) as progress:
        task = progress.add_task("archive", total=total)

        def advance(done: int, of: int) -> None:
            progress.update(task, completed=done, total=of)

        return archive(advance)


def _show_plan(
    to: str,
    before: datetime,
    moving: list[dict[str, Any]],
    kept: list[dict[str, Any]],
    vacuum: bool,
    as_json: bool,
    dropped: dict[str, Any] | None = None,
) -> None:
    events = sum(int(r["events"]) for r in moving)
    octets = sum(int(r["bytes"]) for r in moving)
    if as_json:
        typer.echo(
            json_line(
                {
                    "dry_run": True,
                    "location": to,
                    "ended_before": before.isoformat(),
                    "runs": moving,
                    "events": events,
                    "bytes": octets,
                    "kept": kept,
                    "dropped": dropped,
                }
            )
        )
        return
    console = out_console()
    if moving:
        console.print(
            f"would archive {len(moving)} run(s) that ended before {format_time(before)} to "
            f"{to}: {events:,} event(s), {octets:,} bytes of the live log",
            markup=False,
        )
        table = Table("run", "status", "ended", "events", "bytes")
        for row in moving:
            ended = row["ended_at"]
            table.add_row(
                row["run_id"],
                row["status"],
                format_time(datetime.fromisoformat(ended)) if ended else "",
                f"{row['events']:,}",
                f"{row['bytes']:,}",
            )
        console.print(table)
    else:
        console.print(f"no run ended before {format_time(before)}: nothing would move")
    if kept:
        console.print(f"kept {len(kept)} run(s):", markup=False)
        table = Table("run", "why")
        for row in kept:
            table.add_row(row["run_id"], row["reason"])
        console.print(table)
    if dropped is not None:
        show_dropped(dropped)
    if vacuum:
        console.print("--vacuum: not run with --dry-run", markup=False)
    console.print("nothing was written (--dry-run)", markup=False)
