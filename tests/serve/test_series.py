"""A run page's metric series and states without folding the whole stream: ``group_metric_series`` and
``state_and_series`` (read models + the log after them) against ``timeline_data`` and
``worker_group_state`` (the log folded), on a real SQLite file and a real PostgreSQL; and the
group stream read once per run page, whatever the read models hold."""

from __future__ import annotations

from typing import Any

from serve_scenarios import errored_run, live_run, report

from wgstore.events import EventStore
from wgstore.events.streams import group_stream
from wgstore.events.worker_group import WorkerReported
from wgstore.projections import catch_up_read_models, worker_group_state
from wgstore.projections.timeline import (
    MAX_POINTS,
    group_metric_series,
    group_timeline,
    state_and_series,
    timeline_data,
)
from wgstore.serve.views import group_page, run_page


def _agree(store: Any, group_id: str) -> None:
    folded = timeline_data(store, group_id)["metrics"]
    assert group_metric_series(store, group_id) == folded
    state, series = state_and_series(store, group_id)
    assert series == folded
    assert state == worker_group_state(store, group_id, use_snapshots=False)
    assert group_timeline(store, group_id).state == state


def test_series_from_the_read_models_and_the_log_after_them_equal_the_folded_ones(
    writer: Any,
) -> None:
    group = live_run(writer, "run-ser1", reports=3)
    # a metric only some reports have, a text and a bool (not charted), an int
    report(writer, group, 0, 4, loss=0.2, acc=0.4, note="<b>text</b>", flag=True, eval=9)
    _agree(writer, group)  # no read model: everything from the log
    catch_up_read_models(writer)
    _agree(writer, group)  # everything from wg_reports
    stream = group_stream(group)
    steps = {"step": 40, "epoch": 2.5}
    writer.append(stream, [WorkerReported(world_rank=1, index=4, metrics=_m(steps, eval=8.5))])
    writer.append(
        stream, [WorkerReported(world_rank=0, index=5, metrics={"loss": 0.1, "step": True})]
    )
    _agree(writer, group)  # wg_reports, then the two reports after them
    # each point: [index, value, epoch ms, the report's step, its epoch] (no number: None)
    assert group_metric_series(writer, group)["eval"] == {
        "0": [[4, 9.0, _t(writer, group, 0, 4), None, None]],
        "1": [[4, 8.5, _t(writer, group, 1, 4), 40.0, 2.5]],
    }
    catch_up_read_models(writer)
    _agree(writer, group)  # the steps from wg_reports as from the log
    assert group_metric_series(writer, group)["loss"]["1"][-1][3:] == [40.0, 2.5]


def _m(steps: dict[str, Any], **metrics: Any) -> dict[str, Any]:
    return {"loss": 0.3, "acc": 0.4, **metrics, **steps}


def _t(store: Any, group_id: str, rank: int, index: int) -> float:
    for record in store.read_stream(group_stream(group_id)):
        event = record.event
        if isinstance(event, WorkerReported) and (event.world_rank, event.index) == (rank, index):
            return record.recorded_at.timestamp() * 1000.0
    raise AssertionError(f"no report {rank}/{index}")


def test_long_series_are_thinned_alike_from_the_read_models_and_the_log(writer: Any) -> None:
    group = live_run(writer, "run-long1", reports=1)
    stream = group_stream(group)

    def reports(first: int, last: int) -> None:
        events = [
            WorkerReported(
                world_rank=rank,
                index=step,
                metrics={"loss": 1 / step} | ({"eval": step / 7} if step % 10 == 0 else {}),
            )
            for step in range(first, last)
            for rank in (0, 1)
        ]
        for start in range(0, len(events), 500):
            writer.append(stream, events[start : start + 500])

    reports(2, MAX_POINTS)
    catch_up_read_models(writer)
    reports(MAX_POINTS, MAX_POINTS + 700)  # past the thinning, partly after the read models
    series = group_metric_series(writer, group)
    assert len(series["loss"]["0"]) == MAX_POINTS
    assert series["loss"]["0"][-1][0] == MAX_POINTS + 699
    assert len(series["eval"]["1"]) == (MAX_POINTS + 699) // 10  # every one: not thinned away
    _agree(writer, group)


def test_series_thinned_in_sql_before_and_after_a_tail_equal_the_folded_ones(writer: Any) -> None:
    group = live_run(writer, "run-long2", reports=1)
    stream = group_stream(group)

    def reports(first: int, last: int, **extra: Any) -> None:
        events = [
            WorkerReported(
                world_rank=rank,
                index=step,
                metrics={"loss": 1 / step, "step": step, "ok": step % 2 == 0}
                | ({"eval": step / 7} if step % 3 == rank else {})
                | extra,
            )
            for step in range(first, last)
            for rank in (0, 1)
        ]
        for start in range(0, len(events), 1000):
            writer.append(stream, events[start : start + 1000])

    last = 2 * MAX_POINTS + 333
    reports(2, last)
    catch_up_read_models(writer)
    _agree(writer, group)  # every series longer than MAX_POINTS, thinned in SQL alone
    reports(last, last + 5, late=0.5)  # a tail: moves the grid; "late" only in the tail
    _agree(writer, group)
    series = group_metric_series(writer, group)
    assert len(series["loss"]["1"]) == MAX_POINTS and series["loss"]["1"][-1][0] == last + 4
    assert series["late"]["0"] == timeline_data(writer, group)["metrics"]["late"]["0"]
    assert "ok" not in series


def test_a_run_page_reads_its_group_stream_once_and_only_the_unfolded_tail(
    writer: Any, store_url: str
) -> None:
    group = live_run(writer, "run-once1", reports=40)
    errored_run(writer, "run-other2")
    with EventStore.open(store_url, read_only=True, migrate=False) as reader:
        reads: list[tuple[str, int]] = []
        read_stream = reader.read_stream

        def counted(stream_id: str, from_version: int = 1, to_version: int | None = None) -> Any:
            reads.append((stream_id, from_version))
            return read_stream(stream_id, from_version, to_version)

        reader.read_stream = counted  # type: ignore[method-assign]
        before = run_page(reader, "run-once1")
        assert [r for r in reads if r[0] == group_stream(group)] == [(group_stream(group), 1)]
        version = writer.stream_version(group_stream(group))
        catch_up_read_models(writer)
        report(writer, group, 0, 41, loss=0.01, acc=4.1)
        reads.clear()
        after = run_page(reader, "run-once1")
        assert [r for r in reads if r[0] == group_stream(group)] == [
            (group_stream(group), version + 1)
        ]
        assert len(after["metrics"]["loss"][0]["points"]) == 41
        assert after["latest"][0]["reports"] == 41 and after["latest"][0]["metrics"]["acc"] == 4.1
        assert after["metrics"]["acc"][1] == before["metrics"]["acc"][1]  # rank 1: unchanged
        reads.clear()
        page = group_page(reader, group)
        assert [r for r in reads if r[0] == group_stream(group)] == [(group_stream(group), 1)]
        assert page["metrics"] == timeline_data(reader, group)["metrics"]
        assert page["state"]["reports_total"] == 81
