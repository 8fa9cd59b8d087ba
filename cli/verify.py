"""``wgstore verify``: recompute the hash chains, and check the read models against the log."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    opened,
    out_console,
    resolve_group,
)
from wgstore.events import EventStore, EventStoreError, VerifyReport
from wgstore.events.hashing import HMAC_KEY_ENV
from wgstore.events.streams import group_stream
from wgstore.projections.fold_check import check_folds
from wgstore.projections.views import read_model_problems, unknown_types

__all__ = ["verify_command"]


def verify_command(
    url: UrlOption = DEFAULT_URL,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="Check only this worker group's stream.")
    ] = None,
    stream: Annotated[
        str | None, typer.Option("--stream", "-s", help="Check only this stream.")
    ] = None,
    with_read_models: Annotated[
        bool,
        typer.Option(
            "--read-models/--no-read-models", help="Also compare the read models with a rebuild."
        ),
    ] = True,
    digest: Annotated[
        bool,
        typer.Option(
            "--digest",
            help="Check the hash chains, then print only the digest of the log's head "
            "(keep it elsewhere; `--against` checks it later).",
        ),
    ] = False,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            metavar="DIGEST",
            help="Also prove the log still extends this digest: nothing at or before it was "
            "cut off, moved or rewritten.",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            envvar=HMAC_KEY_ENV,
            show_envvar=True,
            help="The HMAC key the writers used: every event's MAC must match it "
            "(prefer the environment variable: a command line is visible to other users).",
        ),
    ] = None,
    without_archive_files: Annotated[
        bool,
        typer.Option(
            "--without-archive-files",
            help="Do not read the archive's files (`wgstore archive`): cross each archived "
            "range by its manifest alone (where it meets the live log), the manifest checked "
            "against its signed LogArchived event.",
        ),
    ] = False,
) -> None:
    """Recompute every hash chain, read every stream as its readers do, and check the read
    models; exit 1 naming each problem. Archived events are checked from the archive's files
    (or, with --without-archive-files, by their manifests)."""
    console = out_console()
    if digest and (group or stream):
        raise UsageProblem("a digest covers the whole log: drop --group/--stream with --digest")
    if digest and against:
        raise UsageProblem("--digest prints a new digest, --against checks an old one: pick one")
    with opened(url) as store:
        if group:
            stream = group_stream(resolve_group(store, group))
        if against is not None and stream is not None:
            raise UsageProblem(
                "a digest covers the whole log: drop --group/--stream with --against"
            )
        report = store.verify(
            stream,
            against=against,
            hmac_key=key or None,
            archive_files=not without_archive_files,
        )
        # Hash failures first, each on its own line: nothing later (a read model rebuild that
        # stops at an event that no longer decodes) can hide them.
        for problem in report.problems:
            console.print(Text(f"FAIL  {problem}", style="red"))
        problems = list(report.problems)
        if digest:
            if report.ok:
                console.print(report.digest, highlight=False, markup=False)
                return
            raise CliError(f"verify found {len(problems)} problem(s); each is listed above")
        streams = len(store.streams()) if stream is None else 1
        if report.ok:
            console.print(
                f"[green]ok[/]  hash chains: {report.checked - report.archived} events in "
                f"{streams} stream(s)"
            )
            _print_archive(console, report)
            if against is not None:
                console.print(f"[green]ok[/]  the log extends the digest {against.strip()}")
            if key or store.has_hmac_key:
                console.print("[green]ok[/]  every event's MAC matches the key")
        for note in report.notes:
            console.print(Text.assemble(("note", "yellow"), f" {note}"))
        if report.untyped_macs:
            console.print(
                f"[yellow]note[/] {report.untyped_macs} event(s) carry the MAC of wgstore before "
                "2026-12-07: it covers every field, but numbers by value alone, so it does not "
                "tell an integer from an equal float (3 from 3.0) (docs/verify.md, K6)"
            )
        if report.legacy_macs:
            console.print(
                f"[yellow]note[/] {report.legacy_macs} event(s) carry the MAC of an older wgstore: "
                "it covers their content, not their time, version or position (docs/verify.md)"
            )
        unknown = unknown_types(store, stream)
        if unknown:
            counts = ", ".join(f"{name} x{count}" for name, count in unknown.items())
            console.print(
                f"[yellow]note[/] {sum(unknown.values())} event(s) of types this wgstore does not "
                f"know ({counts}): hashes checked; shown raw by `wgstore events`, stepped over "
                "by the folds and the read models (not a problem)"
            )
        problems += _fold_problems(console, store, stream)
        if stream is None and with_read_models:
            try:
                model_problems, behind = read_model_problems(store)
            except EventStoreError as error:
                model_problems, behind = [f"the read models could not be checked: {error}"], 0
            problems += model_problems
            if not model_problems:
                console.print("[green]ok[/]  read models match a rebuild from the log")
            if behind:
                console.print(
                    f"[yellow]note[/] the read models are {behind} event(s) behind the log "
                    "(not a problem; `wgstore projections catch-up` applies them)"
                )
    for problem in problems[len(report.problems) :]:
        console.print(Text(f"FAIL  {problem}", style="red"))
    if problems:
        raise CliError(f"verify found {len(problems)} problem(s); each is listed above")


def _print_archive(console: Console, report: VerifyReport) -> None:
    """The archive's line of an ok report: events read from its files, or batches crossed by
    their manifests."""
    if not report.archive_batches:
        return
    if report.archived:
        console.print(
            f"[green]ok[/]  archive: {report.archived} archived event(s) of "
            f"{report.archive_batches} batch(es) checked from their files, where they stood in "
            "the log"
        )
    else:
        console.print(
            f"[green]ok[/]  archive: {report.archive_batches} batch(es) checked by their "
            "manifests alone (their files not read)"
        )


def _fold_problems(console: Console, store: EventStore, stream: str | None) -> list[str]:
    """Read every stream (or ``stream``) as its readers do: each one they cannot read is a
    problem (returned, printed with the others); what was read is said on one line."""
    check = check_folds(store, stream)
    if check.ok:
        console.print(
            f"[green]ok[/]  every stream reads as its readers read it: {check.folded} worker "
            f"group and run stream(s) folded, {check.decoded} other stream(s) decoded"
        )
    if check.not_runs:
        named = ", ".join(repr(sid) for sid in check.not_runs[:5])
        more = f" and {len(check.not_runs) - 5} more" if len(check.not_runs) > 5 else ""
        console.print(
            f"[yellow]note[/] {len(check.not_runs)} run-* stream(s) begin with an event type "
            f"this wgstore does not know, so they are not runs to its readers: decoded, not "
            f"folded ({named}{more})"
        )
    return [str(unreadable) for unreadable in check.unreadable]
