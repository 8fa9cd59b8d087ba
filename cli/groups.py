"""``wgstore groups`` and ``wgstore state``: worker groups as the log tells them, now or back then.

``state`` folds the log (through :mod:`wgstore.projections`). ``groups`` reads the SQL read
model ``wg_worker_groups`` when it is up to date with the log, and folds the log otherwise (or
with ``--from-log``), so it is right even when nobody keeps the read models current.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import sqlalchemy as sa
import typer
from rich.table import Table
from rich.text import Text

from wgstore.cli.common import (
    DEFAULT_URL,
    UrlOption,
    UsageProblem,
    database_errors,
    format_time,
    json_line,
    opened,
    out_console,
    parse_time,
    resolve_group,
)
from wgstore.cli.render import metrics_text
from wgstore.events import EventStore
from wgstore.events.streams import GROUP_STREAM_PREFIX, group_id_of
from wgstore.projections import (
    ProjectionError,
    StreamNotFoundError,
    WorkerGroupState,
    WorkerGroupStatus,
    worker_group_state,
)

__all__ = [
    "groups_command",
    "iter_groups",
    "state_command",
    "state_json",
    "summaries_from_log",
    "summaries_from_read_models",
    "worker_rows",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATUS_STYLES = {
    "REQUESTED": "dim",
    "STARTING": "cyan",
    "RUNNING": "green",
    "SHUTTING_DOWN": "yellow",
    "SHUT_DOWN": "bold",
    "START_FAILED": "bold red",
}
OUTCOME_STYLES = {"finished": "green", "errored": "bold red", "aborted": "yellow"}


def iter_groups(store: EventStore) -> Iterator[tuple[str, WorkerGroupState | ProjectionError]]:
    """Every worker group in the log, oldest first, with its state (or why it cannot be folded)."""
    for stream_id, _version in store.streams(GROUP_STREAM_PREFIX):
        group_id = group_id_of(stream_id) or stream_id
        try:
            yield group_id, worker_group_state(store, group_id)
        except ProjectionError as error:
            yield group_id, error


def _duration(summary: dict[str, Any]) -> str:
    end = summary["shut_down_at"] or summary["updated_at"]
    if end is None or summary["requested_at"] is None:
        return ""
    seconds = (end - summary["requested_at"]).total_seconds()
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def state_json(state: WorkerGroupState) -> dict[str, Any]:
    """The state as JSON-ready data, with its derived values (outcome, error, counts) added."""
    data: dict[str, Any] = msgspec.to_builtins(state, str_keys=True)
    outcome = state.outcome
    error = state.error
    data.update(
        outcome=None if outcome is None else outcome.value,
        num_workers=state.num_workers,
        reports_total=state.reports_total,
        error=None if error is None else msgspec.to_builtins(error),
        worker_errors={str(rank): str(err) for rank, err in state.errors.items()},
    )
    return data


_SUMMARY_KEYS = (
    "group_id",
    "run_id",
    "attempt",
    "status",
    "outcome",
    "num_workers",
    "running_workers",
    "requested_at",
    "updated_at",
    "shut_down_at",
    "train_fn",
    "reports",
    "error",
)


def _group_summary(group_id: str, state: WorkerGroupState) -> dict[str, Any]:
    outcome = state.outcome
    error = state.error
    running = state.poll_status.num_running if state.poll_status else None
    return {
        "group_id": group_id,
        "run_id": state.run_id,
        "attempt": state.attempt,
        "status": state.status.value,
        "outcome": None if outcome is None else outcome.value,
        "num_workers": state.num_workers,
        "running_workers": running,
        "requested_at": state.requested_at,
        "updated_at": state.updated_at,
        "shut_down_at": state.shut_down_at,
        "train_fn": state.context.train_fn,
        "reports": state.reports_total,
        "error": None if error is None else str(error),
    }


def _unreadable(group_id: str, error: str) -> dict[str, Any]:
    summary: dict[str, Any] = dict.fromkeys(_SUMMARY_KEYS)
    summary.update(group_id=group_id, status="UNREADABLE", error=error)
    return summary


def summaries_from_log(store: EventStore) -> list[dict[str, Any]]:
    """One summary per group, folded from the log (always right, slower on a big log)."""
    result = []
    for group_id, state in iter_groups(store):
        if isinstance(state, ProjectionError):
            result.append(_unreadable(group_id, str(state)))
        else:
            result.append(_group_summary(group_id, state))
    return result


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    moment: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def summaries_from_read_models(store: EventStore) -> list[dict[str, Any]] | None:
    """One summary per group from ``wg_worker_groups``; None when the read models are behind."""
    from wgstore.projections import READ_MODELS_SUBSCRIPTION
    from wgstore.projections.read_models import wg_worker_groups as table

    if store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint() < store.head():
        return None
    with database_errors(store.url), store.engine.connect() as connection:
        rows = list(connection.execute(sa.select(table)).mappings())
        connection.rollback()
    result = []
    for row in rows:
        if row["projection_error"] is not None:
            result.append(_unreadable(row["group_id"], row["projection_error"]))
            continue
        error = f"{row['error_type']}: {row['error_message']}" if row["error_type"] else None
        result.append(
            {
                "group_id": row["group_id"],
                "run_id": row["run_id"],
                "attempt": row["attempt"],
                "status": row["status"],
                "outcome": row["outcome"],
                "num_workers": row["num_workers"],
                "running_workers": row["running_workers"],
                "requested_at": _utc(row["requested_at"]),
                "updated_at": _utc(row["updated_at"]),
                "shut_down_at": _utc(row["shut_down_at"]),
                "train_fn": row["train_fn"],
                "reports": row["reports_total"],
                "error": error,
            }
        )
    return result


def _status_text(status: str, outcome: str | None) -> Text:
    text = Text(status, style=STATUS_STYLES.get(status, ""))
    if outcome:
        text.append(f" ({outcome})", style=OUTCOME_STYLES.get(outcome, ""))
    return text


def groups_command(
    url: UrlOption = DEFAULT_URL,
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status", help="Only groups in this status, e.g. RUNNING (repeat for more)."
        ),
    ] = None,
    run: Annotated[str | None, typer.Option("--run", "-r", help="Only groups of this run.")] = None,
    since: Annotated[
        str | None, typer.Option(help="Only groups requested since: ISO time or 10m, 2h, 3d.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per group.")] = False,
    from_log: Annotated[
        bool,
        typer.Option(
            "--from-log",
            help="Fold every group from the log even when the read models are current.",
        ),
    ] = False,
) -> None:
    """List the worker groups, oldest first, with status, outcome and error.

    Reads the SQL read models when they are up to date with the log, else folds the log.
    """
    known = [s.value for s in WorkerGroupStatus]
    wanted = {s.upper().replace("-", "_") for s in status or []}
    unknown = sorted(wanted - set(known))
    if unknown:
        raise UsageProblem(f"unknown status {', '.join(unknown)}; use one of {', '.join(known)}")
    start: datetime | None = parse_time(since) if since else None
    with opened(url) as store:
        summaries = None if from_log else summaries_from_read_models(store)
        if summaries is None:
            summaries = summaries_from_log(store)
    summaries.sort(key=lambda g: (g["requested_at"] or _EPOCH, g["group_id"]))
    filtered = wanted or run or start
    table = Table("group", "run", "try", "status", "workers", "requested", "took", "error")
    shown = 0
    for summary in summaries:
        readable = summary["status"] != "UNREADABLE"
        if filtered and not readable:
            continue
        if wanted and summary["status"] not in wanted:
            continue
        if run and summary["run_id"] != run:
            continue
        if start and summary["requested_at"] < start:
            continue
        shown += 1
        if as_json:
            typer.echo(json_line(summary))
            continue
        running, workers = summary["running_workers"], summary["num_workers"]
        table.add_row(
            summary["group_id"],
            summary["run_id"] or "",
            "" if summary["attempt"] is None else str(summary["attempt"]),
            _status_text(summary["status"], summary["outcome"]),
            ""
            if workers is None
            else (f"{workers}" if running is None else f"{running}/{workers} running"),
            format_time(summary["requested_at"]) if readable else "",
            _duration(summary),
            Text(summary["error"] or "", style="red"),
        )
    if not as_json:
        if shown:
            out_console().print(table)
        else:
            out_console().print(
                "no worker groups match" if filtered else "no worker groups in the log"
            )


def workers_table(state: WorkerGroupState) -> Table:
    """One row per worker: rank, node, pid, status, reports, latest metrics, error."""
    table = Table("rank", "node", "pid", "status", "reports", "latest metrics", "error")
    for row in worker_rows(state):
        table.add_row(
            str(row["rank"]),
            row["node"],
            str(row["pid"]),
            Text(row["status"], style=WORKER_STYLES.get(row["status"], "")),
            str(row["reports"]),
            metrics_text(row["metrics"]),
            Text(row["error"], style="red"),
        )
    return table


def first_line(error: Any) -> str:
    """The first line of an error (tables); ``wgstore state GROUP --errors`` prints it whole."""
    text = str(error).strip()
    line, _, rest = text.partition("\n")
    return f"{line} ..." if rest.strip() else line


def print_errors(state: WorkerGroupState) -> None:
    """Every error of the group, whole: the start failure and each worker's, with tracebacks."""
    console = out_console()
    found = False
    if state.start_failure is not None:
        found = True
        failure = state.start_failure
        console.print(Text(f"start failed at stage {failure.stage}", style="bold red"))
        console.print(str(failure.error), markup=False, highlight=False)
        if failure.error.traceback:
            console.print(failure.error.traceback.rstrip(), markup=False, highlight=False)
    for rank, error in sorted(state.errors.items()):
        found = True
        console.print(Text(f"rank {rank}", style="bold red"))
        console.print(str(error), markup=False, highlight=False)
        if error.traceback:
            console.print(error.traceback.rstrip(), markup=False, highlight=False)
    if not found:
        console.print(f"worker group {state.group_id} has no errors", style="dim")


def worker_rows(state: WorkerGroupState) -> list[dict[str, Any]]:
    """One dict per worker: placement, status at the latest poll, reports and latest metrics."""
    rows = []
    statuses = state.poll_status.worker_statuses if state.poll_status else {}
    for worker in state.workers:
        status = statuses.get(worker.world_rank)
        if status is None:
            label = "started"
        elif status.error is not None:
            label = "error"
        elif status.running:
            label = "running"
        else:
            label = "finished"
        rows.append(
            {
                "rank": worker.world_rank,
                "node": f"{worker.node_rank} {worker.node_ip}",
                "pid": worker.pid,
                "status": label,
                "error": "" if status is None or status.error is None else first_line(status.error),
                "reports": state.report_counts.get(worker.world_rank, 0),
                "metrics": dict(state.latest_metrics.get(worker.world_rank, {})),
            }
        )
    return rows


WORKER_STYLES = {"running": "green", "finished": "bold", "error": "bold red", "started": "cyan"}


def print_state(state: WorkerGroupState) -> None:
    """Print a worker group's state: a summary, then one line per worker."""
    console = out_console()
    outcome = state.outcome
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    ctx = state.context
    facts.add_row("group", state.group_id)
    facts.add_row("run", f"{state.run_id} (attempt {state.attempt})")
    facts.add_row(
        "status", _status_text(state.status.value, None if outcome is None else outcome.value)
    )
    facts.add_row(
        "as of",
        f"version {state.version}, position {state.position}, {format_time(state.updated_at)}",
    )
    facts.add_row("train_fn", f"{ctx.train_fn} {json_line(dict(ctx.train_fn_config))}")
    resources = ", ".join(f"{k}={v:g}" for k, v in ctx.resources_per_worker.items())
    facts.add_row("workers", f"{state.num_workers} x {{{resources}}}, {ctx.placement_strategy}")
    facts.add_row("requested", format_time(state.requested_at))
    if state.started_at:
        facts.add_row(
            "started", f"{format_time(state.started_at)} (startup {state.startup_s or 0:.2f}s)"
        )
    if state.polls_total:
        facts.add_row(
            "polls",
            f"{state.polls_total} ({state.recorded_polls} recorded), last #{state.last_poll_seq} "
            f"at {format_time(state.last_polled_at)}",
        )
    if state.reports_total:
        facts.add_row("reports", str(state.reports_total))
    if state.latest_checkpoint:
        facts.add_row("checkpoint", state.latest_checkpoint)
    if state.start_failure is not None:
        failure = state.start_failure
        facts.add_row(
            "start failed", Text(f"at stage {failure.stage}: {failure.error}", style="bold red")
        )
    if state.shutdown_reason is not None:
        facts.add_row(
            "shutdown",
            f"{state.shutdown_reason} (asked {format_time(state.shutdown_requested_at)})",
        )
    if state.shut_down_at:
        facts.add_row(
            "shut down",
            f"{format_time(state.shut_down_at)} in {state.shutdown_duration_s or 0:.2f}s",
        )
    if state.released:
        facts.add_row("released", ", ".join(state.released))
    console.print(facts)
    if state.workers:
        console.print(workers_table(state))


def state_command(
    group: Annotated[str, typer.Argument(help="A worker group id or a unique prefix of one.")],
    url: UrlOption = DEFAULT_URL,
    version: Annotated[
        int | None, typer.Option(min=1, help="The state right after this version of the stream.")
    ] = None,
    at: Annotated[
        str | None, typer.Option(help="The state at this moment: ISO time, or 10m, 2h ago.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The whole state as one JSON object.")
    ] = False,
    errors: Annotated[
        bool,
        typer.Option(
            "--errors",
            help="Print every error whole, with its traceback (tables show the first line).",
        ),
    ] = False,
) -> None:
    """Show a worker group's state: now, after stream version N, or at a moment (time travel)."""
    if version is not None and at is not None:
        raise UsageProblem("give --version or --at, not both")
    moment = parse_time(at) if at else None
    with opened(url) as store:
        group_id = resolve_group(store, group)
        try:
            state = worker_group_state(store, group_id, version=version, at=moment)
        except StreamNotFoundError as error:
            raise UsageProblem(str(error)) from None
    if as_json:
        typer.echo(json_line(state_json(state)))
    elif errors:
        print_errors(state)
    else:
        print_state(state)
