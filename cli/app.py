"""The ``wgstore`` command: the Typer app that gathers every subcommand, and ``main``."""

from __future__ import annotations

from typing import Annotated

import typer

from wgstore.cli import (
    archive,
    db,
    events,
    executor,
    export,
    gc,
    groups,
    history,
    ingest,
    projections,
    report,
    restore,
    resume,
    run,
    runs,
    serve,
    sql,
    state,
    supervise,
    verify,
)
from wgstore.cli.common import ROOT_URL_KEY, URL_ENV
from wgstore.cli.root import WgstoreGroup

__all__ = ["app", "main"]

app = typer.Typer(
    name="wgstore",
    cls=WgstoreGroup,
    help=(
        "Audit, replay and run Ray worker groups recorded in a wgstore event log.\n\n"
        "Every command reads --url or WGSTORE_URL (default: sqlite:///wgstore.db, the file "
        "`wgstore run` writes in the current folder)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def root_options(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help=(
                "The store, for the command that follows (the same as its own --url; "
                f"default: {URL_ENV}, else sqlite:///wgstore.db)."
            ),
        ),
    ] = None,
) -> None:
    """Options given before the command: ``wgstore --url URL groups``."""
    if url is not None:
        ctx.meta[ROOT_URL_KEY] = url


app.command("run")(run.run_command)
app.command("executor")(executor.executor_command)
app.add_typer(db.db_app, name="db")
app.command("events")(events.events_command)
app.command("verify")(verify.verify_command)
app.command("sql")(sql.sql_command)
app.command("groups")(groups.groups_command)
app.command("state")(state.state_command)
app.command("runs")(runs.runs_command)
app.command("replay")(history.replay_command)
app.command("polls")(history.polls_command)
app.add_typer(projections.projections_app, name="projections")
app.command("export")(export.export_command)
app.command("report")(report.report_command)
app.command("gc")(gc.gc_command)
app.command("archive")(archive.archive_command)
app.command("restore")(restore.restore_command)
app.command("resume")(resume.resume_command)
app.command("supervise")(supervise.supervise_command)
app.command("serve")(serve.serve_command)
app.add_typer(ingest.ingest_app, name="ingest")


def main() -> None:
    """Entry point of the ``wgstore`` console script."""
    app(prog_name="wgstore")
