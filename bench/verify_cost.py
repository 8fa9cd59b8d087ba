"""What ``wgstore verify`` costs on a large log, phase by phase (issue 41, item 4).

Fills a log with bench/rebuild.py's workload (``--groups`` worker groups of 4 workers, each with
``--reports`` report steps of 4 reports and a poll, a run stream each; 20 x 1,000 is ~100,000
events), catches the read models up, then times in this process the phases: the hash chains
(``store.verify()``), the read of every stream as its readers read it (``check_folds``, where the
installed wgstore has it) and, with ``--read-models``, the read models against a rebuild; and in a
fresh process ``wgstore verify --no-read-models`` (and the whole ``wgstore verify``).

    .venv/bin/python bench/verify_cost.py fill sqlite:////tmp/v.db --groups 20 --reports 1000
    .venv/bin/python bench/verify_cost.py time sqlite:////tmp/v.db --repeat 3

``fill`` and ``time`` are separate so one log can be timed by two installs (before and after a
change): copy the SQLite file, or fill a second Postgres schema. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

WGSTORE = [sys.executable, "-m", "wgstore.cli"]


def fill(url: str, groups: int, reports: int) -> None:
    """Record the workload and catch the read models up."""
    from rebuild import fill as record

    from wgstore.events import EventStore
    from wgstore.projections import catch_up_read_models as catch_up

    events = record(url, groups, reports)
    with EventStore.open(url) as store:
        catch_up(store)
    print(json.dumps({"events": events}))


def _phases(url: str, read_models: bool) -> dict[str, float]:
    from wgstore.events import EventStore
    from wgstore.projections.views import read_model_problems

    times: dict[str, float] = {}
    with EventStore.open(url, migrate=False) as store:
        started = time.perf_counter()
        assert store.verify().ok
        times["chains_s"] = time.perf_counter() - started
        try:
            from wgstore.projections.fold_check import check_folds
        except ImportError:  # a wgstore from before the fold check
            pass
        else:
            started = time.perf_counter()
            assert check_folds(store).ok
            times["folds_s"] = time.perf_counter() - started
        if read_models:
            started = time.perf_counter()
            assert read_model_problems(store)[0] == []
            times["read_models_s"] = time.perf_counter() - started
    return times


def _command(url: str, *extra: str) -> float:
    started = time.perf_counter()
    subprocess.run([*WGSTORE, "verify", "--url", url, *extra], check=True, capture_output=True)
    return time.perf_counter() - started


def measure(url: str, repeat: int, read_models: bool) -> dict[str, Any]:
    """The medians of ``repeat`` rounds."""
    rounds: list[dict[str, float]] = []
    for _ in range(repeat):
        one = _phases(url, read_models)
        one["verify_no_read_models_s"] = _command(url, "--no-read-models")
        if read_models:
            one["verify_s"] = _command(url)
        rounds.append(one)
    medians = {name: round(statistics.median(r[name] for r in rounds), 2) for name in rounds[0]}
    return {"load": round(os.getloadavg()[0], 1), **medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["fill", "time"])
    parser.add_argument("url")
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--reports", type=int, default=1000, help="report steps per group")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--read-models",
        action="store_true",
        help="also time the read models against a rebuild, and the whole `wgstore verify` (the "
        "rebuild is most of it: minutes at 100,000 events on a loaded machine)",
    )
    args = parser.parse_args()
    if args.action == "fill":
        fill(args.url, args.groups, args.reports)
    else:
        print(json.dumps(measure(args.url, args.repeat, args.read_models)))


if __name__ == "__main__":
    main()
