"""Where the Postgres server's time goes per appended event, by statement (issue 44).

Starts a private server (bench/private_postgres.py) with ``pg_stat_statements`` loaded and
``track = all`` (the shared server's settings are not touched; the private one takes the shared
server's durability and memory: ``fsync`` and ``synchronous_commit`` on, 128 MB of shared
buffers, autovacuum off), then runs bench/fleet.py against it once per configuration with
``--statements``: the statements are counted over the fleet's measured window only (reset at
its start, read at its end), beside the server backends' CPU per event from ``/proc``.

    .venv/bin/python bench/pg_profile.py                       # 100 x 8 and 1,000 x 8
    .venv/bin/python bench/pg_profile.py --runs 100 --stagger-s 0 --json --out prof.json

Prints, per configuration, the top-level statements (a client's call: ``SELECT wg_append(...)``,
a lease renewal, a read model's catch-up) and the nested ones (inside ``wg_append`` and the
triggers) with their calls per 1,000 events and microseconds of execution per event.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from private_postgres import private_server  # bench/ is not a package

FLEET = Path(__file__).resolve().with_name("fleet.py")
SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.max": "10000",
    "shared_buffers": "128MB",
    "autovacuum": "off",
    "max_connections": "200",
}


def profile(server_url: str, runs: int, args: argparse.Namespace) -> dict[str, Any]:
    """One fleet configuration against the private server, with its statements."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            sys.executable, str(FLEET), "--backend", "postgres", "--url", server_url,
            "--runs", str(runs), "--workers", str(args.workers), "--interval", str(args.interval),
            "--duration", str(args.duration), "--procs", str(args.procs),
            "--statements", str(args.top), "--json", "--out", out.name,
        ]  # fmt: skip
        if args.stagger_s is not None:
            command += ["--stagger-s", str(args.stagger_s)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        return dict(json.loads(Path(out.name).read_text()))


def _print(report: dict[str, Any]) -> None:
    c, statements = report["config"], report["statements"]
    print(
        f"\n{c['runs']} runs x {c['workers']} workers, every {c['interval_s']} s, stagger "
        f"{c['stagger_s']} s: {statements['events']} events, {report['events_per_s']} events/s, "
        f"report p99 {report['report_ms']['p99']} ms, load {report['load_start']} -> "
        f"{report['load_end']}"
    )
    print(
        f"server CPU {statements['server_cpu_us_per_event']} us/event; top-level execution "
        f"{statements['toplevel_exec_us_per_event']} us/event in "
        f"{statements['toplevel_calls_per_event']} statements/event"
    )
    for part in ("toplevel", "nested"):
        print(f"  {part}: calls/1000 ev   us/ev   share   ms/call   query")
        for row in statements[part]:
            print(
                f"  {row['calls_per_1000_events']:>18} {row['exec_us_per_event']:>7} "
                f"{row['share'] or 0:>7.1%} {row['ms_per_call'] or 0:>9.3f}   {row['query'][:110]}"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, action="append", help="runs of each configuration (default 100, 1000)"
    )
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--stagger-s", type=float, help="as bench/fleet.py's (0: the start storm)")
    parser.add_argument("--top", type=int, default=12, help="statements listed of each kind")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the reports as JSON to this file")
    args = parser.parse_args(argv)
    reports = []
    with private_server(SETTINGS) as server:
        import psycopg

        with psycopg.connect(server.conninfo, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for runs in args.runs or [100, 1000]:
            report = profile(server.url, runs, args)
            reports.append(report)
            if not args.json:
                _print(report)
    if args.json:
        print(json.dumps(reports, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
