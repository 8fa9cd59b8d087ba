"""``metric_series``: one metric of a run, from ``wg_reports`` when the read models have applied
the run's events, from the run's streams when they lag on it; the same answer either way."""

from __future__ import annotations

from typing import Any

from tests.projections.run_scenarios import Run, finished_after_a_retry
from wgstore.projections import catch_up_read_models
from wgstore.projections.behind import read_models_behind, runs_moved
from wgstore.projections.metric_series import MetricPoint, metric_series


def test_the_series_is_the_same_from_the_log_and_from_the_read_models(store: Any) -> None:
    finished_after_a_retry(store, "fin")  # attempt 1 reports loss 1.0, attempt 2 loss 0.5
    finished_after_a_retry(store, "other")
    behind = metric_series(store, "fin", "loss")  # the read models have seen nothing yet
    # attempt 2's report 1 is plotted after attempt 1's last (report 1): at 1 + 1 + 1
    assert behind == [MetricPoint(1, 1, 1.0, 1.0), MetricPoint(2, 1, 0.5, 3.0)]

    catch_up_read_models(store)
    assert metric_series(store, "fin", "loss") == behind
    assert metric_series(store, "fin", "loss", world_rank=1) == behind
    assert metric_series(store, "fin", "accuracy") == []  # never reported
    assert metric_series(store, "missing", "loss") == []  # read from wg_reports: no rows

    finished_after_a_retry(store, "later")  # behind again, on "later" only
    lag = read_models_behind(store)
    assert lag is not None and runs_moved(store, lag) == {"later"}
    assert metric_series(store, "later", "loss") == behind  # from its streams
    assert metric_series(store, "fin", "loss") == behind  # from the read models still


def test_a_run_whose_new_attempt_the_read_models_do_not_know_is_read_from_the_log(
    store: Any,
) -> None:
    """A Ray Train run's next attempt: its group stream starts while the run stream stays as
    projected. The group's start request names the run, so the run counts as moved."""
    run = Run(store, "rt", context=None).to("SCHEDULING").to("RUNNING")
    run.group("rt-g1", checkpoint="/ckpt/rt/1")
    catch_up_read_models(store)
    assert metric_series(store, "rt", "loss") == [MetricPoint(1, 1, 1.0, 1.0)]
    run.group("rt-g2", checkpoint="/ckpt/rt/2")  # the run stream does not move
    lag = read_models_behind(store)
    assert lag is not None and lag.run_ids == frozenset() and lag.group_ids == {"rt-g2"}
    assert runs_moved(store, lag) == {"rt"}
    assert metric_series(store, "rt", "loss") == [
        MetricPoint(1, 1, 1.0, 1.0),
        MetricPoint(2, 1, 0.5, 3.0),
    ]


def _reported_values(store: Any, run_id: str) -> Run:
    """One attempt whose rank 0 reports ``value`` as every kind of JSON value, or not at all."""
    from datetime import UTC, datetime

    from tests.projections.projection_builders import Stream, append_stream

    run = Run(store, run_id, context=None).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    stream = Stream(f"{run_id}-g1", run_id=run_id, start=datetime.now(UTC)).running()
    for value in VALUES:
        stream.reported(0, value=value, other=1)
    stream.reported(0, other=2)  # no "value": left out
    stream.reported(1, value="rank 1")
    append_stream(store, stream)
    return run


VALUES = [1, 1.0, 0.1, -2.5e-8, 10**20, True, None, "text", [1, "a"], {"nested": {"x": 1}}]


def test_each_value_comes_back_as_reported_from_the_read_models_as_from_the_log(
    store: Any,
) -> None:
    """PostgreSQL picks the one metric out of each report in SQL (``metrics -> name``): an int
    stays an int, a float a float, and text, booleans, null and nested values come back as
    they were reported, as from the log."""
    _reported_values(store, "kinds")
    from_log = metric_series(store, "kinds", "value")
    catch_up_read_models(store)
    from_read_models = metric_series(store, "kinds", "value")
    expected = [
        MetricPoint(1, index, value, float(index)) for index, value in enumerate(VALUES, start=1)
    ]
    for got in (from_log, from_read_models):
        assert got == expected
        assert [type(point.value) for point in got] == [type(value) for value in VALUES]
    assert metric_series(store, "kinds", "value", world_rank=1) == [
        MetricPoint(1, 1, "rank 1", 1.0)
    ]
    assert metric_series(store, "kinds", "other") == [
        *(MetricPoint(1, index, 1, float(index)) for index in range(1, len(VALUES) + 1)),
        MetricPoint(1, len(VALUES) + 1, 2, float(len(VALUES) + 1)),
    ]
    assert metric_series(store, "kinds", "never") == []


def test_a_current_answer_is_one_statement(store: Any) -> None:
    """The read models' lag and the series in one statement (one round trip on PostgreSQL);
    one more only when the read models lag (which streams moved)."""
    import sqlalchemy as sa

    finished_after_a_retry(store, "fin")
    catch_up_read_models(store)
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's read transaction
            statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        assert len(metric_series(store, "fin", "loss")) == 2
        assert len(statements) == 1
        statements.clear()
        assert metric_series(store, "nobody", "loss") == []
        assert len(statements) == 1
        finished_after_a_retry(store, "later")  # the read models lag, not on "fin"
        statements.clear()
        assert len(metric_series(store, "fin", "loss")) == 2
        assert len(statements) == 3  # the series with the lag, the moved streams, their runs
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)


def _resumed(store: Any, run_id: str, *, with_step: bool) -> None:
    """A run whose attempt 1 reports steps 1-20 and whose attempt 2, resumed from the
    checkpoint of step 12, reports steps 13-39: each attempt's report index starts at 0, as
    Ray Train's and wgstore's do."""
    from datetime import UTC, datetime

    from tests.projections.projection_builders import Stream, append_stream
    from wgstore.events.worker_group import WorkerReported

    run = Run(store, run_id, context=None).to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    for number, steps in ((1, range(1, 21)), (2, range(13, 40))):
        stream = Stream(
            f"{run_id}-g{number}", run_id=run_id, attempt=number, start=datetime.now(UTC)
        )
        stream.running()
        for index, step in enumerate(steps):
            metrics = {"loss": 1 / step} | ({"step": step} if with_step else {})
            stream.add(WorkerReported(world_rank=0, index=index, metrics=metrics))
        append_stream(store, stream)
        if number == 1:
            run.to("RESTARTING").to("SCHEDULING").to("RUNNING", f"{run_id}-g2")


def test_a_resumed_run_is_plotted_at_the_steps_it_reported(store: Any) -> None:
    """Attempt 2 of a resumed run reports steps 13-39 from report index 0: it is plotted at
    those steps, not from x = 0 on top of attempt 1 (issue 41, item 11)."""
    _resumed(store, "steps", with_step=True)
    for _ in ("log", "read models"):
        points = metric_series(store, "steps", "loss")
        assert [(p.attempt, p.index, p.step) for p in points] == [
            *((1, index, float(step)) for index, step in enumerate(range(1, 21))),
            *((2, index, float(step)) for index, step in enumerate(range(13, 40))),
        ]
        catch_up_read_models(store)


def test_without_a_step_each_attempt_continues_where_the_one_before_stopped(store: Any) -> None:
    _resumed(store, "plain", with_step=False)
    for _ in ("log", "read models"):
        points = metric_series(store, "plain", "loss")
        assert [(p.attempt, p.index, p.step) for p in points] == [
            *((1, index, float(index)) for index in range(20)),
            *((2, index, float(20 + index)) for index in range(27)),
        ]
        catch_up_read_models(store)
