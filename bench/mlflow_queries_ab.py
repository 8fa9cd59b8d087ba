"""A/B of the MLflow comparison's queries: two Pythons (two installs of wgstore, say main's and a
branch's) time the queries on the same data, alternated, each round a process of its own.

Each round runs ``bench/mlflow_compare.py --queries-only --data URL --json`` (MLflow's API and
wgstore's, alternated inside the process, medians of ``--query-repeats``) with one Python, then
the other, the order alternating; the result is the median over rounds of each process's medians:
wall and CPU time of each tool's API call, and MLflow's over wgstore's. Make the data first:

    .venv/bin/python bench/mlflow_compare.py --queries-only --backend postgres --keep
    .venv/bin/python bench/mlflow_queries_ab.py --a /work/main/.venv/bin/python \\
        --b .venv/bin/python --data 'postgresql+psycopg://...?options=-csearch_path%3D...'

The script is this folder's, so both Pythons time the same bench; each imports its own wgstore.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent / "mlflow_compare.py"
QUERIES = ("running_latest", "metric_series", "failed_last_day")
FIELDS = ("wgstore_api_ms", "wgstore_api_cpu_ms", "mlflow_api_ms", "api_ratio", "api_cpu_ratio")


def one_round(python: str, args: argparse.Namespace) -> dict[str, Any]:
    """One process of ``python`` timing the queries; its result (bench/mlflow_compare.py's)."""
    command = [python, str(BENCH), "--queries-only", "--data", args.data, "--json"]
    command += ["--backend", args.backend, "--query-repeats", str(args.query_repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{python} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Alternate the two Pythons ``--rounds`` times each; print and return the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="the first Python (e.g. main's venv)")
    parser.add_argument("--b", required=True, help="the second Python")
    parser.add_argument("--data", required=True, help="a --queries-only --keep's URL")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default=None)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--query-repeats", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.query_repeats < 1:
        parser.error("--rounds and --query-repeats must be >= 1")
    args.backend = args.backend or ("sqlite" if args.data.startswith("sqlite") else "postgres")
    found: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    load = []
    for round_ in range(args.rounds):
        for side in ("a", "b") if round_ % 2 == 0 else ("b", "a"):
            load.append(os.getloadavg()[0])
            found[side].append(one_round(getattr(args, side), args))
    summary = {
        side: {
            name: {
                field: statistics.median(r["queries"][name][field] for r in results)
                for field in FIELDS
            }
            for name in QUERIES
        }
        for side, results in found.items()
    }
    summary["load"] = [min(load), max(load)]
    if args.json:
        print(json.dumps(summary))
        return
    print(
        f"{args.backend}: {args.rounds} rounds of each, {args.query_repeats} calls a query a round,"
        f" 1-min load {min(load):.1f}-{max(load):.1f}; medians over rounds"
    )
    for name in QUERIES:
        for side in ("a", "b"):
            row = summary[side][name]
            print(
                f"  {name:16} {side}: wgstore {row['wgstore_api_ms']:.3f} ms (CPU "
                f"{row['wgstore_api_cpu_ms']:.3f}), MLflow {row['mlflow_api_ms']:.3f} ms; "
                f"MLflow / wgstore {row['api_ratio']:.2f} x (CPU {row['api_cpu_ratio']:.2f} x)"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
