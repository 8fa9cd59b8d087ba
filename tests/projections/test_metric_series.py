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
    assert behind == [MetricPoint(1, 1, 1.0), MetricPoint(2, 1, 0.5)]

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
    assert metric_series(store, "rt", "loss") == [MetricPoint(1, 1, 1.0)]
    run.group("rt-g2", checkpoint="/ckpt/rt/2")  # the run stream does not move
    lag = read_models_behind(store)
    assert lag is not None and lag.run_ids == frozenset() and lag.group_ids == {"rt-g2"}
    assert runs_moved(store, lag) == {"rt"}
    assert metric_series(store, "rt", "loss") == [MetricPoint(1, 1, 1.0), MetricPoint(2, 1, 0.5)]
