"""Metric points numbered per series when projected (``wg_report_series``, ``wg_report_points``),
and the run page's series read from them: against the numbering the log alone gives, on a real
SQLite file and a real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from projection_builders import Stream, append_stream

from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.projections import catch_up_read_models, rebuild_read_models
from wgstore.projections import timeline as timeline_module
from wgstore.projections.projector import read_model_rows
from wgstore.projections.read_models import wg_report_points, wg_report_series
from wgstore.projections.timeline import group_metric_series, state_and_series, timeline_data


def _points_from_log(store: Any, group_id: str) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """Each series' (report index, value) in stream order, from the log alone."""
    series: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for record in store.read_stream(group_stream(group_id)):
        event = record.event
        if isinstance(event, WorkerReported):
            for key, value in event.metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    series.setdefault((key, event.world_rank), []).append(
                        (event.index, float(value))
                    )
    return series


def _points_in_table(store: Any, group_id: str) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """The same from ``wg_report_points``, checking that each series' ``pos`` runs 0, 1, ..."""
    table = wg_report_points
    series: dict[tuple[str, int], list[tuple[int, float]]] = {}
    with store.engine.connect() as connection:
        rows = connection.execute(
            sa.select(table.c.metric, table.c.world_rank, table.c.pos, table.c.report_index)
            .add_columns(table.c.value)
            .where(table.c.group_id == group_id)
            .order_by(table.c.metric, table.c.world_rank, table.c.pos)
        ).all()
        counts = {
            (row.metric, row.world_rank): row.points
            for row in connection.execute(
                sa.select(wg_report_series).where(wg_report_series.c.group_id == group_id)
            )
        }
    for metric, rank, pos, index, value in rows:
        points = series.setdefault((metric, rank), [])
        assert pos == len(points), (metric, rank, pos)
        points.append((index, value))
    assert counts == {key: len(points) for key, points in series.items()}
    return series


def _mixed(group_id: str) -> Stream:
    """Two ranks reporting a number each time (loss), a metric only some reports carry (eval),
    one that is text in one report (loss of rank 0, report 3), bools and text (never points)."""
    stream = Stream(group_id, num_workers=2)
    stream.running().polled()
    stream.reported(0, loss=1.0, flag=True, note="<b>x</b>", step=1)
    stream.reported(1, loss=2.0, step=1)
    stream.reported(0, loss=0.5, eval=3, step=2)
    stream.reported(1, loss=1.5, flag=False, step=2)
    stream.reported(0, loss="diverged", eval=2.5, step=3)
    stream.reported(1, loss=1.0, step=3)
    stream.reported(0, loss=0.25, flag=False, step=4)
    stream.reported(1, loss=0.75, eval=-1, step=4, **{"": 0.5})  # a metric named ""
    return stream


@pytest.mark.parametrize("batch_size", [1, 3, 500])
def test_each_numeric_metric_is_numbered_in_its_series_in_stream_order(
    store: Any, batch_size: int
) -> None:
    append_stream(store, _mixed("g1"))
    catch_up_read_models(store, batch_size=batch_size)  # a series goes on across batches
    points = _points_in_table(store, "g1")
    assert points == _points_from_log(store, "g1")
    assert points[("loss", 0)] == [(1, 1.0), (2, 0.5), (4, 0.25)]  # report 3's text: no point
    assert points[("eval", 0)] == [(2, 3.0), (3, 2.5)] and points[("eval", 1)] == [(4, -1.0)]
    assert points[("step", 1)] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert {metric for metric, _ in points} == {"loss", "eval", "step", ""}  # no flag, no note


def test_reports_appended_after_a_catch_up_continue_each_series_and_a_rebuild_agrees(
    store: Any,
) -> None:
    stream = _mixed("g1")
    append_stream(store, stream)
    catch_up_read_models(store)
    more = [
        WorkerReported(world_rank=0, index=5, metrics={"loss": 0.125, "late": 7}),
        WorkerReported(world_rank=1, index=5, metrics={"eval": True, "late": 1.5}),
    ]
    store.append(stream.stream_id, more)
    assert group_metric_series(store, "g1") == timeline_data(store, "g1")["metrics"]  # a tail
    catch_up_read_models(store)
    assert _points_in_table(store, "g1") == _points_from_log(store, "g1")
    assert group_metric_series(store, "g1") == timeline_data(store, "g1")["metrics"]
    with store.engine.connect() as connection:
        kept = read_model_rows(connection)
    rebuild_read_models(store)
    with store.engine.connect() as connection:
        assert read_model_rows(connection) == kept


@pytest.mark.parametrize("tail", [0, 1, 2, 5, 13])
def test_thinned_series_from_the_points_and_a_tail_equal_the_log_alone(
    store: Any, monkeypatch: pytest.MonkeyPatch, tail: int
) -> None:
    monkeypatch.setattr(timeline_module, "MAX_POINTS", 7)  # thinning at a size a test can see
    stream = Stream("g1", num_workers=2)
    stream.running().polled()
    for step in range(1, 24):
        for rank in (0, 1):
            extra = {"eval": step * 1.5} if step % 4 == rank else {}
            stream.reported(rank, loss=1 / step, ok=step % 2 == 0, **extra)
    append_stream(store, stream)
    catch_up_read_models(store)
    late = [
        WorkerReported(
            world_rank=step % 2,
            index=100 + step,
            metrics={"loss": float(step)} | ({"late": step} if step % 3 == 0 else {}),
        )
        for step in range(tail)
    ]
    if late:
        store.append(stream.stream_id, late)  # not projected: read from the log
    folded = timeline_data(store, "g1")["metrics"]
    assert group_metric_series(store, "g1") == folded
    assert state_and_series(store, "g1")[1] == folded
    assert "ok" not in folded and len(folded["loss"]["0"]) == 7
    last = [100 + step for step in range(tail) if step % 2 == 0] or [23]
    assert folded["loss"]["0"][-1][0] == last[-1]  # the last point is always kept


def test_a_request_reads_only_the_points_it_keeps(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline_module, "MAX_POINTS", 10)
    stream = Stream("g1", num_workers=1)
    stream.running().polled()
    for step in range(1, 301):
        stream.reported(0, loss=1 / step, acc=step / 300)
    append_stream(store, stream)
    catch_up_read_models(store)
    queries: list[tuple[str, Any]] = []
    fetch = timeline_module.fetch

    def counted(store: Any, sql: str, params: Any = ()) -> list[Any]:
        queries.append((sql, params))
        return fetch(store, sql, params)

    monkeypatch.setattr(timeline_module, "fetch", counted)
    series = group_metric_series(store, "g1")
    assert [len(series["loss"]["0"]), len(series["acc"]["0"])] == [10, 10]
    assert not any("wg_reports" in sql for sql, _ in queries)
    rows = sum(len(found) for found in (fetch(store, sql, p) for sql, p in queries))
    assert rows == 2 + 2 * 10  # the version and counts (a row a series), then 10 points a series
