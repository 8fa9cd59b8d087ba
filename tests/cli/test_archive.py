"""``wgstore archive``, ``wgstore restore`` and ``supervise --archive-to`` (issue 43), on both
backends, with real Parquet files under the test's folder: a dry run writes nothing and says
what would move and what stays; the real run empties the live list of the ended runs and
restore brings one back; an unwritable location fails in one line with the log as it was and no
file left; --vacuum gives SQLite's freed pages back; supervise's helper archives when due."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "archive"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))

from archived_runs import ENDED, LIVE, fleet
from run_scenarios import finished_after_a_retry

from wgstore.cli.archive_schedule import PeriodicArchive, archive_while_supervising
from wgstore.events import EventStore

RUN_KEYS = {"run_id", "status", "ended_at", "events", "bytes"}


def _rows(url: str) -> int:
    with EventStore.open(url, read_only=True) as store:
        ((count,),) = store.fetch_rows("SELECT count(*) FROM wg_events", ())
    return int(count)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def _live_runs(cli: Callable[..., Any], url: str) -> set[str]:
    """The runs ``wgstore runs --json`` lists as live (archived ones, when listed, are not)."""
    result = cli("runs", "--url", url, "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return {row["run_id"] for row in rows if not row.get("archived")}


def _one_error_line(result: Any) -> str:
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    return str(lines[0])


@pytest.fixture
def fleet_url(store_url: str) -> str:
    """Two finished runs, an aborted one and a running one (archived_runs.fleet)."""
    with EventStore.open(store_url) as store:
        fleet(store)
    return store_url


def test_dry_run_lists_the_ended_runs_and_the_kept_live_one_and_writes_nothing(
    fleet_url: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    before = _rows(fleet_url)
    args = ("archive", "--url", fleet_url, "--to", str(archive), "--ended-before", "0s")
    text = cli(*args, "--dry-run")
    assert text.exit_code == 0, text.output
    for run_id in ENDED:
        assert run_id in text.stdout
    assert LIVE in text.stdout and "not ended (RUNNING)" in text.stdout
    assert "nothing was written" in text.stdout
    shown = cli(*args, "--dry-run", "--json")
    assert shown.exit_code == 0, shown.output
    (line,) = shown.stdout.splitlines()
    plan = json.loads(line)
    assert plan["dry_run"] is True and plan["location"] == str(archive)
    assert sorted(r["run_id"] for r in plan["runs"]) == sorted(ENDED)
    assert all(set(r) == RUN_KEYS and r["events"] > 0 and r["bytes"] > 0 for r in plan["runs"])
    assert {r["status"] for r in plan["runs"]} == {"FINISHED", "ABORTED"}
    assert plan["events"] == sum(r["events"] for r in plan["runs"])
    assert plan["bytes"] == sum(r["bytes"] for r in plan["runs"])
    assert {"run_id": LIVE, "reason": "not ended (RUNNING)"} in plan["kept"]
    # 30d (the default): nothing ended that long ago
    default = json.loads(cli(*args[:5], "--dry-run", "--json").stdout)
    assert default["runs"] == []
    later = {k["run_id"]: k["reason"] for k in default["kept"]}
    assert later.pop(LIVE) == "not ended (RUNNING)"
    assert sorted(later) == sorted(ENDED)
    assert all(reason.endswith(", after --ended-before") for reason in later.values())
    assert _rows(fleet_url) == before
    assert not archive.exists()


def test_archive_empties_the_live_list_of_ended_runs_and_restore_brings_one_back(
    fleet_url: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    args = ("archive", "--url", fleet_url, "--to", str(archive), "--ended-before", "0s")
    plan = json.loads(cli(*args, "--dry-run", "--json").stdout)
    before = _rows(fleet_url)
    done = cli(*args, "--batch-runs", "2", "--json")
    assert done.exit_code == 0, done.output
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["dry_run"] is False
    assert sorted(result["runs"]) == sorted(ENDED)
    assert len(result["batches"]) == 2  # 3 runs, 2 a batch
    assert result["events"] == plan["events"] and result["bytes"] == plan["bytes"]
    assert result["parquet_bytes"] > 0 and result["vacuum"] is None
    assert result["abandoned"] == [] and result["finished"] == []
    assert {"run_id": LIVE, "reason": "not ended (RUNNING)"} in result["kept"]
    # the archived events left; one LogArchived a batch came
    assert _rows(fleet_url) == before - plan["events"] + 2
    assert len([p for p in _files(archive) if p.suffix == ".parquet"]) == len(ENDED)
    assert _live_runs(cli, fleet_url) == {LIVE}
    # a second archive finds nothing more to move
    again = cli(*args)
    assert again.exit_code == 0, again.output
    assert "archived 0 run(s)" in again.stdout

    restored = cli("restore", "fin-a", "--url", fleet_url)
    assert restored.exit_code == 0, restored.output
    fin_a = next(r for r in plan["runs"] if r["run_id"] == "fin-a")
    assert f"restored run fin-a: {fin_a['events']} event(s)" in restored.stdout
    assert _live_runs(cli, fleet_url) == {LIVE, "fin-a"}
    shown = cli("restore", "abt", "--url", fleet_url, "--json")  # a unique prefix
    assert shown.exit_code == 0, shown.output
    abt_a = next(r for r in plan["runs"] if r["run_id"] == "abt-a")
    body = json.loads(shown.stdout)
    assert body["run_id"] == "abt-a" and body["restored"] == abt_a["events"]
    assert body["was_live"] is False and body["batch_id"] in result["batches"]
    live = cli("restore", "fin-a", "--url", fleet_url)
    assert live.exit_code == 0, live.output
    assert "run fin-a is live (not archived): nothing to restore" in live.stdout
    assert json.loads(cli("restore", LIVE, "--url", fleet_url, "--json").stdout) == {
        "run_id": LIVE,
        "restored": 0,
        "batch_id": None,
        "was_live": True,
    }
    unknown = cli("restore", "no-such-run", "--url", fleet_url)
    assert unknown.exit_code == 2
    assert "no run id starts with 'no-such-run'" in _one_error_line(unknown)
    assert _rows(fleet_url) == before - fin_b_events(plan) + 2 + 2  # two RunRestored


def fin_b_events(plan: dict[str, Any]) -> int:
    """The events of the one run still archived at the end (fin-b)."""
    return int(next(r["events"] for r in plan["runs"] if r["run_id"] == "fin-b"))


def _unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "under a file":
        (tmp_path / "a-file").write_text("not a folder\n")
        return tmp_path / "a-file" / "archive"
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize("kind", ["under a file", "read-only folder"])
def test_an_unwritable_location_fails_in_one_line_and_leaves_the_log_and_no_files(
    fleet_url: str, cli: Callable[..., Any], tmp_path: Path, kind: str
) -> None:
    location = _unwritable(tmp_path, kind)
    before = _rows(fleet_url)
    files = _files(tmp_path)
    result = cli(
        "archive", "--url", fleet_url, "--to", str(location), "--ended-before", "0s", "--json"
    )
    assert result.exit_code == 1, result.output
    line = _one_error_line(result)
    assert str(location) in line and "nothing was archived" in line and "--to" in line
    assert result.stdout == ""
    assert _rows(fleet_url) == before
    assert _files(tmp_path) == files
    assert _live_runs(cli, fleet_url) == {*ENDED, LIVE}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--ended-before", "3x"), "--ended-before: '3x' is not a time"),
        (("--runs", "fin-["), "--runs 'fin-[': a [ that is never closed"),
        (("--runs", " "), "--runs is empty"),
        (("--to", " "), "--to is empty"),
        (("--batch-runs", "0"), None),
    ],
    ids=["duration", "glob", "blank glob", "blank location", "batch size"],
)
def test_a_bad_option_is_a_usage_error_in_one_line(
    recorded_sqlite: Any,
    cli: Callable[..., Any],
    tmp_path: Path,
    args: tuple[str, ...],
    says: str | None,
) -> None:
    before = _rows(recorded_sqlite.url)
    result = cli("archive", "--url", recorded_sqlite.url, "--to", str(tmp_path / "a"), *args)
    assert result.exit_code == 2, result.output
    if says is not None:
        assert says in _one_error_line(result)
    assert _rows(recorded_sqlite.url) == before
    assert not (tmp_path / "a").exists()


def test_another_archive_at_the_same_time_is_one_line(
    recorded_sqlite: Any, cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wgstore.projections import archiving

    def busy(*_args: Any, **_kwargs: Any) -> Any:
        raise archiving.ArchiveRunsBusyError("another `wgstore archive` appended a batch")

    monkeypatch.setattr(archiving, "archive_runs", busy)
    result = cli("archive", "--url", recorded_sqlite.url, "--to", str(tmp_path / "a"))
    assert result.exit_code == 1, result.output
    assert "another `wgstore archive`" in _one_error_line(result)


def _sqlite_size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def test_vacuum_gives_sqlite_its_freed_pages_back_and_is_not_needed_on_postgres(
    store_url: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    with EventStore.open(store_url) as store:
        for i in range(40):
            finished_after_a_retry(store, f"fin{i}")
    args = ("archive", "--url", store_url, "--to", str(tmp_path / "archive"))
    if store_url.startswith("postgresql"):
        result = cli(*args, "--ended-before", "0s", "--vacuum")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[-1] == (
            "--vacuum: not needed on PostgreSQL (the archived rows' space is reused by new rows)"
        )
        return
    path = Path(store_url.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as connection:  # everything in the file, the WAL empty
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    full = _sqlite_size(path)
    result = cli(*args, "--ended-before", "0s", "--vacuum", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert len(body["runs"]) == 40
    vacuum = body["vacuum"]
    assert vacuum["backend"] == "sqlite" and vacuum["file"] == str(path)
    assert vacuum["bytes_after"] == _sqlite_size(path) == path.stat().st_size
    assert path.stat().st_size < full / 2, (full, path.stat().st_size)
    text = cli(*args, "--vacuum")  # nothing left to move: the line still says what it did
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[-1].startswith(f"VACUUM {path}: ")


def test_supervise_archives_ended_runs_when_due_and_a_failure_does_not_raise(
    fleet_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = [1000.0]
    schedule = PeriodicArchive(
        str(tmp_path / "archive"), timedelta(0), timedelta(hours=1), clock=lambda: now[0]
    )
    assert schedule.due()
    with EventStore.open(fleet_url) as store:
        outcome = schedule.run(store)
        assert outcome["action"] == "archived", outcome
        assert sorted(outcome["runs"]) == sorted(ENDED)
        assert not schedule.due()
        now[0] += 3599
        assert not schedule.due()
        now[0] += 1
        assert schedule.due()
        assert schedule.run(store)["runs"] == []
    (tmp_path / "a-file").write_text("")
    broken = PeriodicArchive(
        str(tmp_path / "a-file" / "x"), timedelta(0), timedelta(hours=1), clock=lambda: now[0]
    )
    with EventStore.open(fleet_url) as store:
        finished_after_a_retry(store, "fin-c")  # one more ended run, for a location that fails
    archive_while_supervising(fleet_url, broken, 0.1, None, True)  # once; prints, never raises
    failed = json.loads(capsys.readouterr().out)
    assert failed["action"] == "archive failed" and "nothing was archived" in failed["error"]
    assert not broken.due()  # tried again after --archive-every


def test_supervise_once_archives_after_its_pass(
    fleet_url: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    base = ("supervise", "--url", fleet_url, "--once", "--archive-to", str(archive))
    dry = cli(*base, "--archive-after", "0s", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"archive  would move {len(ENDED)} run(s)" in dry.stdout
    assert not archive.exists()
    result = cli(*base, "--archive-after", "0s")
    assert result.exit_code == 0, result.output
    assert "no orphaned runs" in result.stdout
    assert f"archive  moved {len(ENDED)} run(s)" in result.stdout
    assert _live_runs(cli, fleet_url) == {LIVE}
    alone = cli("supervise", "--url", fleet_url, "--once", "--archive-after", "1d")
    assert alone.exit_code == 2
    assert "--archive-after needs --archive-to" in _one_error_line(alone)
    bad = cli(*base, "--archive-every", "soon")
    assert bad.exit_code == 2
    assert "--archive-every: 'soon' is not a duration" in _one_error_line(bad)


def test_drop_archived_after_lists_and_deletes_files_only_with_yes(
    fleet_url: str, cli: Callable[..., Any], tmp_path: Path
) -> None:
    archive = tmp_path / "archive"
    args = ("archive", "--url", fleet_url, "--to", str(archive), "--ended-before", "0s")
    assert cli(*args).exit_code == 0
    parquet = sorted(archive.rglob("*.parquet"))
    assert len(parquet) == len(ENDED)
    # archived a moment ago: a bound of a day keeps them
    kept = json.loads(cli(*args, "--drop-archived-after", "1d", "--yes", "--json").stdout)
    assert kept["dropped"]["batches"] == []
    # a bound of 0s lists the batch; without --yes nothing is deleted
    listed = cli(*args, "--drop-archived-after", "0s")
    assert listed.exit_code == 0 and "give --yes to delete them" in listed.stdout
    assert sorted(archive.rglob("*.parquet")) == parquet
    dropped = json.loads(cli(*args, "--drop-archived-after", "0s", "--yes", "--json").stdout)
    (batch,) = dropped["dropped"]["batches"]
    assert dropped["dropped"]["deleted"] is True and len(batch["files"]) == len(ENDED)
    assert not list(archive.rglob("*.parquet"))
    assert list(archive.glob("manifests/*.json")), "the manifest stays"
    lone = cli("archive", "--url", fleet_url, "--to", str(archive), "--yes")
    assert lone.exit_code == 2 and "--drop-archived-after" in _one_error_line(lone)
    restore = cli("restore", ENDED[0], "--url", fleet_url)
    assert restore.exit_code != 0 and "dropped on purpose" in restore.output
    verified = cli("verify", "--url", fleet_url, "--no-read-models")
    assert verified.exit_code == 0, verified.output
