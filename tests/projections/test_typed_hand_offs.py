"""The fold's and the projector's hand-offs have types the checker sees, and those types say
what the tables and states say: each read-model row type has its table's columns as keys (with
the columns' types), each fold's change type the state's fields."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from tests.projections.projection_builders import Stream, stopped
from wgstore.events.schema import READ_MODEL_TABLES, wg_runs
from wgstore.projections.run_state import RunChanges, RunState
from wgstore.projections.state import (
    WorkerGroupChanges,
    WorkerGroupFold,
    WorkerGroupState,
    project_worker_group,
)
from wgstore.projections.table_rows import PARTIAL_ROW_TYPES, ROW_TYPES, RunsRow, RunSummaryRow

_TABLES = {table.name: table for table in READ_MODEL_TABLES}


def _column_types(table: sa.Table) -> dict[str, tuple[type | None, bool]]:
    """Each column: its Python type (None for JSON, typed by what the projector puts there)
    and whether it is nullable."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    found: dict[str, tuple[type | None, bool]] = {}
    for column in table.columns:
        json = isinstance(column.type.dialect_impl(dialect), sa.JSON)
        found[column.name] = (None if json else column.type.python_type, bool(column.nullable))
    return found


def _split_optional(hint: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``T | None``, ``(hint, False)`` otherwise."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        optional = len(args) < len(get_args(hint))
        return (args[0] if len(args) == 1 else Union[tuple(args)]), optional  # noqa: UP007
    return hint, False


def _check_row_type(row_type: type, table: sa.Table, *, keys: set[str]) -> None:
    columns = _column_types(table)
    hints = get_type_hints(row_type)
    assert set(hints) == keys
    for name in keys:
        python_type, nullable = columns[name]
        value_type, optional = _split_optional(hints[name])
        assert optional == nullable, f"{row_type.__name__}.{name}: nullable is {nullable}"
        if python_type is not None:
            assert value_type is python_type, (
                f"{row_type.__name__}.{name} is {value_type}, its column holds {python_type}"
            )


@pytest.mark.parametrize("table", READ_MODEL_TABLES, ids=lambda t: t.name)
def test_each_read_model_table_has_a_row_type_with_its_columns_and_their_types(
    table: sa.Table,
) -> None:
    row_type = ROW_TYPES[table.name]
    assert row_type.__required_keys__ == frozenset(table.columns.keys())  # type: ignore[attr-defined]
    _check_row_type(row_type, table, keys=set(table.columns.keys()))


def test_every_row_type_is_of_a_read_model_table() -> None:
    assert set(ROW_TYPES) == {table.name for table in READ_MODEL_TABLES}


@pytest.mark.parametrize("row_type", list(PARTIAL_ROW_TYPES), ids=lambda t: t.__name__)
def test_a_partial_row_type_names_columns_of_its_table_its_key_included(row_type: type) -> None:
    table = _TABLES[PARTIAL_ROW_TYPES[row_type]]
    keys = set(get_type_hints(row_type))
    assert keys <= set(table.columns.keys())
    assert {c.name for c in table.primary_key.columns} <= keys
    _check_row_type(row_type, table, keys=keys)


def test_a_run_summary_row_is_a_runs_row_and_what_is_read_beside_it() -> None:
    extra = set(get_type_hints(RunSummaryRow)) - set(get_type_hints(RunsRow))
    assert extra == {"lease_holder", "lease_expires_at", "groups_updated_at"}
    assert not extra & set(wg_runs.columns.keys())


def test_the_comparison_refuses_a_row_type_missing_a_column_or_of_another_type() -> None:
    Short = typing.TypedDict("Short", {"run_id": str})  # noqa: UP013
    with pytest.raises(AssertionError):
        _check_row_type(Short, wg_runs, keys=set(wg_runs.columns.keys()))
    Wrong = typing.TypedDict("Wrong", {"run_id": int})  # noqa: UP013
    with pytest.raises(AssertionError, match="run_id"):
        _check_row_type(Wrong, wg_runs, keys={"run_id"})


@pytest.mark.parametrize(
    ("changes", "state"),
    [(WorkerGroupChanges, WorkerGroupState), (RunChanges, RunState)],
    ids=["worker-group", "run"],
)
def test_a_folds_change_type_has_every_field_of_its_state_with_its_type(
    changes: type, state: type
) -> None:
    fields = get_type_hints(state)
    assert [f.name for f in dataclasses.fields(state)] == list(get_type_hints(changes))
    assert get_type_hints(changes) == {name: fields[name] for name in get_type_hints(changes)}
    assert changes.__required_keys__ == frozenset()  # type: ignore[attr-defined]


def test_the_folds_view_answers_as_the_frozen_state_does() -> None:
    stream = Stream().running().polled(stopped(1)).reported(0, loss=1.0).reported(1, loss=2.0)
    fold = WorkerGroupFold()
    for event in stream.events:
        fold.apply(event)
    state = project_worker_group(stream.events)
    view = fold.view
    assert view is not None and type(view) is not WorkerGroupState
    for name, member in vars(WorkerGroupState).items():
        if isinstance(member, property):
            assert getattr(view, name) == getattr(state, name), name
    assert view.worker(1) == state.worker(1)
