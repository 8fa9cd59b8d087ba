"""``wgstore verify`` against tampering: every hash failure printed, digests, the HMAC key."""

from __future__ import annotations

from typing import Any

import pytest

from tests.events.test_tamper import _fill, _rehash, _tamper
from wgstore.events import EventStore

KEY = "the writers' key"


def _undecodable(store: EventStore, stream: str, version: int) -> str:
    """A payload edit after which the event no longer decodes (reason must be a string)."""
    value = "'{\"reason\": 7}'" if store.is_postgres else "json_set(data, '$.reason', 7)"
    return (
        f"UPDATE wg_events SET data = {value} "
        f"WHERE stream_id = '{stream}' AND stream_version = {version}"
    )


def test_every_hash_failure_is_printed_also_when_a_tampered_event_no_longer_decodes(
    cli: Any, recorded: Any
) -> None:
    stream = f"worker-group-{recorded.errored_group}"
    caught_up = cli("projections", "catch-up", "--url", recorded.url)
    assert caught_up.exit_code == 0, caught_up.stdout + caught_up.stderr
    with EventStore.open(recorded.url) as store:
        _tamper(
            store,
            _undecodable(store, stream, 22),
            f"UPDATE wg_events SET hash = '{'0' * 64}' "
            f"WHERE stream_id = '{stream}' AND stream_version = 3",
        )
    result = cli("verify", "--url", recorded.url)
    assert result.exit_code == 1
    assert "(version 22, WorkerGroupShutdownRequested) does not match its hash" in result.stdout
    assert "(version 3, " in result.stdout and "does not match its hash" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_digest_printed_by_verify_later_catches_the_log_cut_short(
    cli: Any, store_url: str
) -> None:
    with EventStore.open(store_url) as store:
        _fill(store)
        expected = store.digest()
    printed = cli("verify", "--url", store_url, "--digest")
    assert printed.exit_code == 0, printed.stdout + printed.stderr
    assert printed.stdout.strip() == expected  # only the digest: `D=$(wgstore verify --digest)`
    digest = printed.stdout.strip()

    clean = cli("verify", "--url", store_url, "--against", digest)
    assert clean.exit_code == 0
    assert f"ok  the log extends the digest {digest}" in clean.stdout

    with EventStore.open(store_url) as store:
        _tamper(store, "DELETE FROM wg_events WHERE position = 6")
    assert cli("verify", "--url", store_url).exit_code == 0  # consistent with itself
    cut = cli("verify", "--url", store_url, "--against", digest)
    assert cut.exit_code == 1
    assert "the log ends at position 5, before the digest's position 6" in cut.stdout
    assert "verify found 1 problem(s)" in cut.stderr


def test_verify_digest_of_a_tampered_log_prints_the_problems_and_no_digest(
    cli: Any, store_url: str
) -> None:
    with EventStore.open(store_url) as store:
        _fill(store)
        _tamper(store, "DELETE FROM wg_events WHERE stream_id = 's-2'")
    result = cli("verify", "--url", store_url, "--digest")
    assert result.exit_code == 1
    assert "wgs1:" not in result.stdout
    assert "breaks the log chain" in result.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--digest", "--stream", "s-1"], "a digest covers the whole log"),
        (["--against", "wgs1:6:" + "0" * 64, "--stream", "s-1"], "a digest covers the whole log"),
        (["--digest", "--against", "wgs1:6:" + "0" * 64], "pick one"),
        (["--against", "not-a-digest"], "'not-a-digest' is not a wgstore digest"),
    ],
)
def test_bad_digest_options_print_one_red_line(
    cli: Any, sqlite_url: str, arguments: list[str], message: str
) -> None:
    with EventStore.open(sqlite_url) as store:
        _fill(store)
    result = cli("verify", "--url", sqlite_url, *arguments)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stdout + result.stderr


def test_a_forgery_with_recomputed_hashes_fails_verify_with_the_key_only(
    cli: Any, store_url: str
) -> None:
    with EventStore.open(store_url, hmac_key=KEY) as store:
        _fill(store)
        signed = cli("verify", "--url", store_url, "--key", KEY)
        assert signed.exit_code == 0
        assert "ok  every event's MAC matches the key" in signed.stdout
        forged = (
            "UPDATE wg_events SET data = jsonb_set(data, '{reason}', '\"forged\"') "
            "WHERE position = 2"
            if store.is_postgres
            else "UPDATE wg_events SET data = json_set(data, '$.reason', 'forged') WHERE position = 2"
        )
        _tamper(store, forged, _rehash(store))
    assert cli("verify", "--url", store_url).exit_code == 0  # no key: a recomputed chain passes
    for result in (
        cli("verify", "--url", store_url, "--key", KEY),
        cli("verify", "--url", store_url, env={"WGSTORE_HMAC_KEY": KEY}),
    ):
        assert result.exit_code == 1
        assert "position 2 (version 2, WorkerGroupShutdownRequested) does not match its MAC" in (
            result.stdout
        )


def test_verify_says_how_many_events_carry_an_older_weaker_mac(cli: Any, store_url: str) -> None:
    from tests.events.test_tamper import KEY as WRITER_KEY
    from tests.events.test_tamper_mac import _legacy_macs

    with EventStore.open(store_url, hmac_key=WRITER_KEY) as store:
        _fill(store)
        _tamper(store, _legacy_macs(store), _rehash(store))  # as an older wgstore wrote them
    result = cli("verify", "--url", store_url, "--key", WRITER_KEY.decode())
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "ok  every event's MAC matches the key" in result.stdout
    assert (
        "note 6 event(s) carry the MAC of an older wgstore: it covers their content, not their "
        "time, version or position (docs/verify.md)"
    ) in result.stdout


def test_verify_says_how_many_events_carry_a_mac_that_compares_numbers_by_value(
    cli: Any, store_url: str
) -> None:
    from tests.events.test_tamper import KEY as WRITER_KEY
    from tests.events.test_tamper_mac import _untyped_macs

    with EventStore.open(store_url, hmac_key=WRITER_KEY) as store:
        _fill(store)
        _tamper(store, _untyped_macs(store), _rehash(store))  # as wgstore wrote them until 12-07
    result = cli("verify", "--url", store_url, "--key", WRITER_KEY.decode())
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "ok  every event's MAC matches the key" in result.stdout
    assert (
        "note 6 event(s) carry the MAC of wgstore before 2026-12-07: it covers every field, but "
        "numbers by value alone, so it does not tell an integer from an equal float (3 from 3.0) "
        "(docs/verify.md, K6)"
    ) in result.stdout


def test_verify_names_a_stream_its_readers_cannot_read(cli: Any, store_url: str) -> None:
    """Issue 41, item 4: an elastic Ray Train run recorded a run stream beginning with
    ControllerStateChanged; `runs`, `report` and serve refuse it, and verify said ok."""
    from wgstore.events.run import ControllerStateChanged

    with EventStore.open(store_url) as store:
        _fill(store)
        store.append(
            "run-elastic",
            [ControllerStateChanged(from_state="INITIALIZING", to_state="SCHEDULING")],
        )
    result = cli("verify", "--url", store_url)
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "ok  hash chains: 7 events in 4 stream(s)" in result.stdout  # the hashes are fine
    assert (
        "FAIL  stream 'run-elastic' cannot be read: its ControllerStateChanged at version 1 "
        "(position 7): a run stream must begin with RunCreated at version 1"
    ) in result.stdout
    assert "verify found 1 problem(s)" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert cli("verify", "--url", store_url, "--stream", "run-elastic").exit_code == 1
    other = cli("verify", "--url", store_url, "--stream", "s-1")
    assert other.exit_code == 0, other.stdout + other.stderr
    assert (
        "ok  every stream reads as its readers read it: 0 worker group and run stream(s) "
        "folded, 1 other stream(s) decoded"
    ) in other.stdout
