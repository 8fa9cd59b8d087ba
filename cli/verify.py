"""``wgstore verify``: recompute the hash chains, and check the read models against the log."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import sqlalchemy as sa
import typer
from rich.text import Text
from sqlalchemy.dialects import postgresql

from wgstore.cli.common import (
    DEFAULT_URL,
    CliError,
    UrlOption,
    UsageProblem,
    database_errors,
    opened,
    out_console,
    resolve_group,
)
from wgstore.events import EventStore, EventStoreError
from wgstore.events.hashing import HMAC_KEY_ENV
from wgstore.events.streams import GROUP_STREAM_PREFIX, group_stream

__all__ = ["read_model_problems", "unknown_types", "verify_command"]


_MAX_PER_TABLE = 20


def _normalizers(table: sa.Table) -> list[Callable[[Any], Any]]:
    """Per column, a function that makes SQLite and Postgres values of it compare equal."""
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]

    def as_time(value: Any) -> Any:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
        return value

    def as_json(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def as_bool(value: Any) -> Any:
        return None if value is None else bool(value)

    result: list[Callable[[Any], Any]] = []
    for column in table.columns:
        if isinstance(column.type, sa.DateTime):
            result.append(as_time)
        elif isinstance(column.type.dialect_impl(pg), postgresql.JSONB):
            result.append(as_json)
        elif isinstance(column.type, sa.Boolean):
            result.append(as_bool)
        else:
            result.append(lambda value: value)
    return result


def _keyed(table: sa.Table, rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    normalize = _normalizers(table)
    names = [column.name for column in table.columns]
    key_at = [names.index(column.name) for column in table.primary_key.columns]
    keyed = {}
    for row in rows:
        clean = tuple(fn(value) for fn, value in zip(normalize, row, strict=True))
        keyed[tuple(clean[i] for i in key_at)] = clean
    return keyed


def _compare(
    table: sa.Table, actual: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]
) -> list[str]:
    names = [column.name for column in table.columns]
    have, want = _keyed(table, actual), _keyed(table, expected)
    problems = []
    for key in sorted(set(have) | set(want), key=str):
        label = f"{table.name} row {', '.join(map(str, key))}"
        if key not in have:
            problems.append(f"{label} is missing from the read model (a rebuild has it)")
        elif key not in want:
            problems.append(f"{label} is in the read model but not in a rebuild")
        else:
            for name, mine, theirs in zip(names, have[key], want[key], strict=True):
                if mine != theirs:
                    problems.append(
                        f"{label}: {name} is {mine!r} in the read model, {theirs!r} in a rebuild"
                    )
    if len(problems) > _MAX_PER_TABLE:
        problems = [
            *problems[:_MAX_PER_TABLE],
            f"{table.name}: ... and {len(problems) - _MAX_PER_TABLE} more",
        ]
    return problems


def read_model_problems(store: EventStore) -> tuple[list[str], int]:
    """Compare the read models with a rebuild from the log into a scratch SQLite file.

    The rebuild covers the events up to the read models' checkpoint, so read models that are
    merely behind the log are not a problem. The store itself is only read.

    Returns:
        The differences (empty when none) and how many events the read models are behind.
    """
    from wgstore.projections import READ_MODELS_SUBSCRIPTION
    from wgstore.projections.projector import apply_read_model_batch, read_model_rows
    from wgstore.projections.read_models import READ_MODEL_TABLES

    checkpoint = store.subscription(READ_MODELS_SUBSCRIPTION).checkpoint()
    with database_errors(store.url), store.engine.connect() as connection:
        behind = int(
            connection.execute(
                sa.text("SELECT count(*) FROM wg_events WHERE position > :c"), {"c": checkpoint}
            ).scalar_one()
        )
        connection.rollback()
    with tempfile.TemporaryDirectory(prefix="wgstore-verify-") as folder:
        scratch = EventStore.open(f"sqlite:///{Path(folder) / 'rebuild.db'}", synchronous="OFF")
        try:
            with scratch.engine.begin() as connection:
                batch: list[Any] = []
                for record in store.read_all(streams=GROUP_STREAM_PREFIX):
                    if record.position > checkpoint:
                        break
                    batch.append(record)
                    if len(batch) == 500:
                        apply_read_model_batch(store, connection, batch)
                        batch = []
                if batch:
                    apply_read_model_batch(store, connection, batch)
                expected = read_model_rows(connection)
        finally:
            scratch.close()
    with database_errors(store.url), store.engine.connect() as connection:
        actual = read_model_rows(connection)
        connection.rollback()
    problems: list[str] = []
    for table in READ_MODEL_TABLES:
        problems += _compare(table, actual[table.name], expected[table.name])
    return problems, behind


def unknown_types(store: EventStore, stream: str | None = None) -> dict[str, int]:
    """How many events of each stored type that is not registered here (all, or one stream's)."""
    from wgstore.events import REGISTRY

    where, params = ("WHERE stream_id = :s", {"s": stream}) if stream is not None else ("", {})
    with database_errors(store.url), store.engine.connect() as connection:
        rows = connection.execute(
            sa.text(f"SELECT event_type, count(*) FROM wg_events {where} GROUP BY event_type"),
            params,
        ).all()
        connection.rollback()
    known = set(REGISTRY.names())
    return {name: int(count) for name, count in sorted(rows) if name not in known}


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
) -> None:
    """Recompute every hash chain and check the read models; exit 1 naming each problem."""
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
        report = store.verify(stream, against=against, hmac_key=key or None)
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
                f"[green]ok[/]  hash chains: {report.checked} events in {streams} stream(s)"
            )
            if against is not None:
                console.print(f"[green]ok[/]  the log extends the digest {against.strip()}")
            if key or store.has_hmac_key:
                console.print("[green]ok[/]  every event's MAC matches the key")
        unknown = unknown_types(store, stream)
        if unknown:
            counts = ", ".join(f"{name} x{count}" for name, count in unknown.items())
            console.print(
                f"[yellow]note[/] {sum(unknown.values())} event(s) of types this wgstore does not "
                f"know ({counts}): hashes checked; shown raw by `wgstore events`, stepped over "
                "by the folds and the read models (not a problem)"
            )
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
