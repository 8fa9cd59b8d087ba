"""``wgstore verify``: the hash chains of an untouched log pass; a tampered one names the event."""

from __future__ import annotations

from typing import Any

from wgstore.events.engine import create_store_engine


def _tamper(url: str, stream_id: str, version: int) -> None:
    """Change a stored event behind the log's back, the way an attacker with DDL rights would."""
    engine = create_store_engine(url)
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                connection.exec_driver_sql("ALTER TABLE wg_events DISABLE TRIGGER USER")
                connection.exec_driver_sql(
                    "UPDATE wg_events SET data = jsonb_set(data, '{reason}', '\"nothing to see\"') "
                    f"WHERE stream_id = '{stream_id}' AND stream_version = {version}"
                )
                connection.exec_driver_sql("ALTER TABLE wg_events ENABLE TRIGGER USER")
            else:
                connection.exec_driver_sql("DROP TRIGGER wg_events_no_update")
                connection.exec_driver_sql(
                    "UPDATE wg_events SET data = json_set(data, '$.reason', 'nothing to see') "
                    f"WHERE stream_id = '{stream_id}' AND stream_version = {version}"
                )
    finally:
        engine.dispose()


def test_an_untouched_log_verifies_and_exits_0(cli: Any, recorded: Any) -> None:
    result = cli("verify", "--url", recorded.url)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "hash chains: 28 events in 3 stream(s)" in result.stdout
    assert (
        "ok  every stream reads as its readers read it: 3 worker group and run stream(s) "
        "folded, 0 other stream(s) decoded"
    ) in result.stdout


def test_a_changed_event_fails_verify_naming_stream_and_position(cli: Any, recorded: Any) -> None:
    stream = f"worker-group-{recorded.errored_group}"
    _tamper(recorded.url, stream, 22)
    result = cli("verify", "--url", recorded.url)
    assert result.exit_code == 1
    assert f"stream '{stream}'" in result.stdout
    assert "(version 22, WorkerGroupShutdownRequested) does not match its hash" in result.stdout
    assert "verify found 1 problem(s)" in result.stderr


def test_verify_of_one_group_checks_only_that_stream(cli: Any, recorded: Any) -> None:
    _tamper(recorded.url, f"worker-group-{recorded.errored_group}", 22)
    clean = cli("verify", "--url", recorded.url, "--group", recorded.failed_group[:5])
    assert clean.exit_code == 0
    assert "3 events in 1 stream(s)" in clean.stdout
    broken = cli("verify", "--url", recorded.url, "--group", recorded.errored_group[:5])
    assert broken.exit_code == 1


def test_verify_of_an_unknown_group_exits_2(cli: Any, recorded_sqlite: Any) -> None:
    result = cli("verify", "--url", recorded_sqlite.url, "--group", "nope")
    assert result.exit_code == 2
