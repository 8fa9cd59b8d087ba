"""Test vectors of events/hashing.py's functions, pure: the same inputs must give these exact values
forever (Postgres' ``wg_append`` computes the same chain; tests/events/test_tamper.py pins an
append on both backends). A changed value here means every stored log fails ``verify``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest

from wgstore.events.hashing import (
    DIGEST_PREFIX,
    GENESIS,
    HMAC_KEY_ENV,
    MAC_PREFIX,
    DuplicateKeyError,
    canonical_bytes,
    chain_hash,
    content_mac,
    epoch_us,
    event_mac,
    format_digest,
    is_legacy_mac,
    log_hash,
    normalize_key,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def test_the_constants_are_the_stored_formats() -> None:
    assert (GENESIS, DIGEST_PREFIX, HMAC_KEY_ENV) == ("", "wgs1", "WGSTORE_HMAC_KEY")


def test_epoch_us_counts_microseconds_and_floors_before_the_epoch() -> None:
    assert epoch_us(EPOCH) == 0
    assert epoch_us(EPOCH + timedelta(microseconds=1)) == 1
    assert epoch_us(EPOCH - timedelta(microseconds=1)) == -1
    assert epoch_us(datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)) == 1796040000123456


def test_the_chain_hash_is_sha256_of_the_fields_joined_by_newlines() -> None:
    value = chain_hash("", "s-1", 1, "e1", "T", 1, 5, '{"a":1}', "{}")
    assert value == "c7c3faffc08d4785b9afced47a33367c5e6f8646f703e4e49d1f623fe9b01ad5"
    assert value == hashlib.sha256(b'\ns-1\n1\ne1\nT\n1\n5\n{"a":1}\n{}').hexdigest()
    assert (
        chain_hash("ab", "s-1", 2, "e2", "T", 2, 6, "{}", '{"m":1}')
        == "1b0b14354a255103ed2c136dfe58bbc98d2debe6d5ae063ef065b183a9ba5630"
    )


def test_the_log_hash_chains_position_stream_hash_and_mac() -> None:
    no_mac = log_hash("", 1, "ab", None)
    assert no_mac == "3da73ef035ecefed2239b0d15cd63dc45446d10dcbf51bca2accc3f61d2fa8e7"
    assert no_mac == log_hash("", 1, "ab", "") == hashlib.sha256(b"\n1\nab\n").hexdigest()
    assert (
        log_hash("x", 2, "ab", "mac")
        == "345f7e0d543e06614a0e03beee07d618988094b6667f899f3296fde250dae83e"
    )


def test_a_digest_names_the_position_and_head_log_hash() -> None:
    assert format_digest(0, GENESIS) == "wgs1:0:-"
    assert format_digest(7, "ab") == "wgs1:7:ab"


def test_keys_are_bytes_and_an_empty_key_is_no_key() -> None:
    assert normalize_key(None) is None
    assert normalize_key("") is None
    assert normalize_key(b"") is None
    assert normalize_key("ké") == "ké".encode()
    assert normalize_key(b"k") == b"k"
    with pytest.raises(TypeError, match="hmac_key must be bytes or str, got int"):
        normalize_key(5)  # type: ignore[arg-type]


def test_the_mac_is_hmac_sha256_over_the_canonical_content() -> None:
    """The legacy MAC (content only), kept so that events stored with it still verify."""
    mac = content_mac(b"k", "s-1", "e1", "T", 1, '{"a":1}', "{}")
    assert mac == "1ca98c7cebcb8594e45a09a4491d4b7a1dce1e2344e121d16d5928e17d929955"
    text = b'wgstore-mac-v1\ns-1\ne1\nT\n1\n{"a":1}\n{}'
    assert mac == hmac.digest(b"k", text, "sha256").hex()
    # key order, spacing and 2.0 vs 2 do not matter; the values do
    same = content_mac(b"k", "s-1", "e1", "T", 1, '{ "a": 1.0 }', "{}")
    assert same == mac
    assert content_mac(b"k", "s-1", "e1", "T", 2, '{"a":1}', "{}") != mac
    assert content_mac(b"j", "s-1", "e1", "T", 1, '{"a":1}', "{}") != mac


def _mac(data: str) -> str:
    return content_mac(b"k", "s", "e", "T", 1, data, "{}")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ('{"v":9007199254740993}', '{"v":9007199254740992}'),  # beyond 2**53: as a double
        ('{"v":-9007199254740993}', '{"v":-9007199254740992}'),
        ('{"v":9007199254740992.0}', '{"v":9007199254740992}'),
        ('{"v":-9007199254740992.0}', '{"v":-9007199254740992}'),
        ('{"v":[1e16,{"w":2.0}]}', '{"v":[10000000000000000,{"w":2}]}'),
        ('{"v":1e30}', '{"v":1000000000000000000000000000000}'),
    ],
)
def test_numbers_that_a_double_cannot_tell_apart_have_one_mac(one: str, other: str) -> None:
    assert _mac(one) == _mac(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ('{"v":9007199254740991}', '{"v":9007199254740990}'),  # below 2**53: exact
        ('{"v":1' + "0" * 400 + "}", '{"v":1' + "0" * 399 + "1}"),  # beyond any double: exact
        ('{"v":-0.5}', '{"v":0}'),
        ('{"v":0.5}', '{"v":0.25}'),
        ('{"w":"1234567890123456"}', '{"w":1234567890123456}'),  # digits in a string stay text
        ('{"w":"1234567890123456","x":"a"}', '{"w":"1234567890123456","x":"b"}'),
        ('{"v":true,"w":"1234567890123456"}', '{"v":1,"w":"1234567890123456"}'),
        ('{"v":1.5}', '{"v":1}'),
    ],
)
def test_numbers_that_differ_have_different_macs(one: str, other: str) -> None:
    assert _mac(one) != _mac(other)


# ---------------------------------------------------------------------- the MAC over every field


def test_the_event_mac_is_hmac_sha256_over_every_field_then_canonical_data_and_metadata() -> None:
    mac = event_mac(b"k", 7, "s-1", 2, "e1", "T", 1, 5, '{"b": 1.0, "a": 1}', "{}")
    message = b'["wgstore-mac-v2",7,"s-1",2,"e1","T",1,5]\n{"a":1,"b":1}\n{}'
    digest = hmac.digest(b"k", message, "sha256")
    assert mac == MAC_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert mac == "m2:ULksxbA1XM8NaLz9sd1lF71l5tO3lvgrDfQ1Yqxs73o"
    assert len(mac) == 46  # the mac column holds 64
    assert not is_legacy_mac(mac)
    assert is_legacy_mac(content_mac(b"k", "s-1", "e1", "T", 1, "{}", "{}"))
    fields = (7, "s-1", 2, "e1", "T", 1, 5, '{"a":1,"b":1}', "{}")
    for index, other in enumerate((8, "s-2", 3, "e2", "U", 2, 6, '{"a":1,"b":2}', '{"m":1}')):
        changed = list(fields)
        changed[index] = other
        assert event_mac(b"k", *changed) != mac, f"field {index} is not covered"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ('{"v":1152921504606846976}', '{"v":1152921504606847076}'),  # 2**60 and 2**60 + 100
        ('{"v":9007199254740993}', '{"v":9007199254740992}'),
        ('{"v":1' + "0" * 400 + "}", '{"v":1' + "0" * 399 + "1}"),
        ('{"v":0.1}', '{"v":0.1000000000000000055511151231257827}'),  # one double, two values
        ('{"v":"1"}', '{"v":1}'),
    ],
)
def test_canonical_bytes_keep_every_number_exact(one: str, other: str) -> None:
    assert canonical_bytes(one) != canonical_bytes(other)


@pytest.mark.parametrize(
    ("written", "rendered"),
    [
        ('{"v":1e16}', '{"v": 10000000000000000}'),
        ('{"v":1.5e300}', '{"v": 15' + "0" * 299 + "}"),
        ('{"v":[0.1,2.50,1e-7]}', '{"v": [0.1, 2.5, 0.0000001]}'),
        ('{"v":-0.0}', '{"v": 0.0}'),
        ('{"b":1,"a":{"d":[],"c":"é"}}', '{"a": {"c": "\\u00e9", "d": []}, "b": 1}'),
    ],
)
def test_canonical_bytes_are_one_for_json_as_written_and_as_jsonb_renders_it(
    written: str, rendered: str
) -> None:
    assert canonical_bytes(written) == canonical_bytes(rendered)


_CORPUS = [
    '{"v":1152921504606846976,"w":-1' + "0" * 400 + "}",
    '{"v":[0.1,2.50,1e-7,1E16,-0.0,1.5e300,3]}',
    '{"b":{"d":[true,false,null],"c":"caf\\u00e9 \\ud83d\\ude00 \\n\\""},"a":""}',
    '{ "a" : [ ] , "b" : { } }',
    "[1,2.0]",
    '"text"',
]


@pytest.mark.parametrize("text", _CORPUS)
def test_both_parsers_give_the_same_canonical_bytes(text: str) -> None:
    assert canonical_bytes(text) == canonical_bytes(text, check_duplicates=False)


@pytest.mark.parametrize("text", ['{"a":1,"a":2}', '{"x":[{"k":1,"k":1}]}'])
def test_canonical_bytes_refuse_a_duplicated_key(text: str) -> None:
    with pytest.raises(DuplicateKeyError, match="appears twice"):
        canonical_bytes(text)
    with pytest.raises(DuplicateKeyError):
        event_mac(b"k", 1, "s", 1, "e", "T", 1, 0, text, "{}")


@pytest.mark.parametrize("text", ['{"v":NaN}', '{"v":Infinity}', "{", ""])
def test_canonical_bytes_refuse_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        canonical_bytes(text)
