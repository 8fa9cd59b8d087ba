"""Where a chart puts each reported value (``plot_steps``, ``chart_series``): at the step the
user reported (a ``step`` metric, else ``epoch``), else at a run-wide report index, each attempt
continuing where the one before it stopped. Pure: no store."""

from __future__ import annotations

from wgstore.projections.metric_series import PlotLine, chart_series, plot_steps, report_steps


def test_a_reports_step_and_epoch_are_its_numeric_metrics_of_those_names() -> None:
    assert report_steps({"step": 3, "epoch": 0.5, "loss": 1}) == (3.0, 0.5)
    assert report_steps({"step": True, "epoch": "1"}) == (None, None)  # no numbers
    assert report_steps({}) == (None, None)


def test_every_point_with_a_step_is_plotted_at_it() -> None:
    lines = [
        PlotLine(1, 0, [(0, 1.0, 0.0), (1, 2.0, 0.0)]),
        PlotLine(2, 0, [(0, 13.0, 1.0), (1, 14.0, 1.0)]),
    ]
    assert plot_steps(lines) == ("step", [[1.0, 2.0], [13.0, 14.0]])


def test_without_a_step_on_every_point_the_epoch_then_the_report_index() -> None:
    epochs = [PlotLine(1, 0, [(0, None, 0.0), (1, 5.0, 1.0)])]
    assert plot_steps(epochs) == ("epoch", [[0.0, 1.0]])
    mixed = [PlotLine(1, 0, [(0, 1.0, None), (1, None, 1.0)])]
    assert plot_steps(mixed) == ("report", [[0.0, 1.0]])


def test_on_the_report_axis_each_attempt_of_a_rank_continues_after_the_last() -> None:
    lines = [
        PlotLine(1, 0, [(0, None, None), (1, None, None), (2, None, None)]),
        PlotLine(1, 1, [(0, None, None)]),
        PlotLine(2, 0, [(0, None, None), (1, None, None)]),
        PlotLine(2, 1, [(0, None, None)]),
        PlotLine(3, 0, [(4, None, None)]),
    ]
    axis, xs = plot_steps(lines)
    assert axis == "report"
    assert xs == [[0, 1, 2], [0], [3, 4], [1], [9]]


def test_a_runs_charts_shift_alike_whatever_each_metric_reported() -> None:
    """``eval`` was reported only at attempt 1's first report: its attempt 2 still starts
    where attempt 1's reports (of any metric) ended."""
    attempt1 = {
        "loss": {"0": [[0, 1.0, 10.0, None, None], [1, 0.9, 11.0, None, None]]},
        "eval": {"0": [[0, 0.5, 10.0, None, None]]},
    }
    attempt2 = {
        "loss": {"0": [[0, 0.8, 20.0, None, None]]},
        "eval": {"0": [[0, 0.6, 20.0, None, None]]},
    }
    charts = chart_series([(1, attempt1), (2, attempt2)])
    assert list(charts) == ["eval", "loss"]
    assert [(s["attempt"], s["x"], s["points"]) for s in charts["eval"]] == [
        (1, "report", [[0.0, 0.5, 10.0, 0]]),
        (2, "report", [[2.0, 0.6, 20.0, 0]]),
    ]
    assert [s["points"] for s in charts["loss"]] == [
        [[0.0, 1.0, 10.0, 0], [1.0, 0.9, 11.0, 1]],
        [[2.0, 0.8, 20.0, 0]],
    ]
