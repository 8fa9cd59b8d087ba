"""``metric_series``: one metric of a run, from ``wg_reports`` when the read models are current,
from the run's streams when they are behind; the same answer either way."""

from __future__ import annotations

from typing import Any

import pytest

from tests.projections.run_scenarios import finished_after_a_retry
from wgstore.projections import StreamNotFoundError, catch_up_read_models
from wgstore.projections.metric_series import MetricPoint, metric_series


def test_the_series_is_the_same_from_the_log_and_from_the_read_models(store: Any) -> None:
    finished_after_a_retry(store, "fin")  # attempt 1 reports loss 1.0, attempt 2 loss 0.5
    finished_after_a_retry(store, "other")
    behind = metric_series(store, "fin", "loss")  # the read models have seen nothing yet
    assert behind == [MetricPoint(1, 1, 1.0), MetricPoint(2, 1, 0.5)]
    with pytest.raises(StreamNotFoundError):
        metric_series(store, "missing", "loss")  # read from the log: no such run

    catch_up_read_models(store)
    assert metric_series(store, "fin", "loss") == behind
    assert metric_series(store, "fin", "loss", world_rank=1) == behind
    assert metric_series(store, "fin", "accuracy") == []  # never reported
    assert metric_series(store, "missing", "loss") == []  # read from wg_reports: no rows

    finished_after_a_retry(store, "later")  # behind again: the log answers, and is right
    assert metric_series(store, "later", "loss") == behind
