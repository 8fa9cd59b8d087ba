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
    NOT_SEALED,
    UNTYPED_MAC_PREFIX,
    DuplicateKeyError,
    canonical_bytes,
    chain_hash,
    content_mac,
    epoch_us,
    event_mac,
    format_digest,
    is_legacy_mac,
    is_untyped_mac,
    log_hash,
    normalize_key,
    open_snapshot,
    seal_snapshot,
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
    message = b'["wgstore-mac-v3",7,"s-1",2,"e1","T",1,5]\n{"a":1,"b":1.0}\n{}'
    digest = hmac.digest(b"k", message, "sha256")
    assert mac == MAC_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert mac == "m3:hTwMljtUSCvVMtTjCl_pe3orBVdp5uZvThO3P6w-4fE"
    assert len(mac) == 46  # the mac column holds 64
    assert not is_legacy_mac(mac) and not is_untyped_mac(mac)
    assert is_legacy_mac(content_mac(b"k", "s-1", "e1", "T", 1, "{}", "{}"))


def test_the_untyped_event_mac_of_older_rows_is_still_computed_as_it_was_written() -> None:
    """The form written before 2026-12-07 (``m2:``): the same fields, numbers by value alone.
    Stored MACs of that form must keep verifying: this value must never change."""
    mac = event_mac(b"k", 7, "s-1", 2, "e1", "T", 1, 5, '{"b": 1.0, "a": 1}', "{}", form="m2:")
    message = b'["wgstore-mac-v2",7,"s-1",2,"e1","T",1,5]\n{"a":1,"b":1}\n{}'
    digest = hmac.digest(b"k", message, "sha256")
    assert mac == UNTYPED_MAC_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert mac == "m2:ULksxbA1XM8NaLz9sd1lF71l5tO3lvgrDfQ1Yqxs73o"
    assert is_untyped_mac(mac) and not is_legacy_mac(mac)
    with pytest.raises(ValueError, match="'m9:' is not a form of the event MAC"):
        event_mac(b"k", 7, "s-1", 2, "e1", "T", 1, 5, "{}", "{}", form="m9:")
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


@pytest.mark.parametrize(
    ("text", "key"),
    [('{"a":1,"a":2}', "a"), ('{"x":[{"k":1,"k":1}]}', "k"), ('{"x":0,"y":1,"y":2}', "y")],
)
def test_canonical_bytes_refuse_a_duplicated_key(text: str, key: str) -> None:
    with pytest.raises(DuplicateKeyError, match=f"^the key '{key}' appears twice in one object$"):
        canonical_bytes(text)
    with pytest.raises(DuplicateKeyError):
        canonical_bytes(text.encode(), typed=True)
    with pytest.raises(DuplicateKeyError):
        event_mac(b"k", 1, "s", 1, "e", "T", 1, 0, text, "{}")


@pytest.mark.parametrize("text", ['{"v":NaN}', '{"v":Infinity}', "{", ""])
def test_canonical_bytes_refuse_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError):
        canonical_bytes(text)


# ---------------------------------------------------------------------- numbers: value and kind


@pytest.mark.parametrize(
    ("text", "typed", "untyped"),
    [
        ("3", b"3", b"3"),
        ("-0", b"0", b"0"),
        ("3.0", b"3.0", b"3"),
        ("3.00", b"3.0", b"3"),
        ("-3.0", b"-3.0", b"-3"),
        ("30.0", b"3E+1", b"30"),
        ("1.50", b"1.5", b"1.5"),
        ("0.50", b"0.5", b"0.5"),
        ("-1.5", b"-1.5", b"-1.5"),
        ("0.0", b"0.0", b"0"),
        ("-0.0", b"-0.0", b"0"),
        ("0e5", b"0.0", b"0"),
        ("1e16", b"1E+16", b"10000000000000000"),
        ("1.0E16", b"1E+16", b"10000000000000000"),
        ("2.5e2", b"2.5E+2", b"250"),
        ("1e-7", b"1E-7", b"1E-7"),
        ("0.0000001", b"1E-7", b"1E-7"),
        ("1152921504606846976", b"1152921504606846976", b"1152921504606846976"),
    ],
)
def test_each_number_has_one_canonical_form_of_each_kind(
    text: str, typed: bytes, untyped: bytes
) -> None:
    """A number with a point or an exponent keeps one (it is a float to every reader); trailing
    zeros go; the untyped form (snapshot seals, m2 MACs) makes integral values integers."""
    for check in (True, False):  # both parsers
        assert canonical_bytes(text, typed=True, check_duplicates=check) == typed
        assert canonical_bytes(text, check_duplicates=check) == untyped
        assert canonical_bytes(f"[{text}]", typed=True, check_duplicates=check) == b"[%s]" % typed


def _typed_mac(data: str, form: str = MAC_PREFIX) -> str:
    return event_mac(b"k", 1, "s", 1, "e", "T", 1, 0, data, "{}", form=form)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ('{"v":3}', '{"v":3.0}'),  # issue 41: passed the MAC, then no reader could decode it
        ('{"v":0}', '{"v":0.0}'),
        ('{"v":-3}', '{"v":-3.0}'),
        ('{"v":[1,2]}', '{"v":[1,2.0]}'),
        ('{"v":10000000000000000}', '{"v":1e16}'),
        ('{"v":1152921504606846976}', '{"v":1.152921504606846976e18}'),
    ],
)
def test_an_integer_and_an_equal_float_have_different_macs(one: str, other: str) -> None:
    assert _typed_mac(one) != _typed_mac(other)
    # the form before 2026-12-07 (m2) took them for one number
    assert _typed_mac(one, UNTYPED_MAC_PREFIX) == _typed_mac(other, UNTYPED_MAC_PREFIX)


def test_the_typed_mac_tells_the_sign_of_zero_and_not_trailing_zeros() -> None:
    assert _typed_mac('{"v":0.0}') != _typed_mac('{"v":-0.0}')
    assert _typed_mac('{"v":2.5}') == _typed_mac('{"v":2.50}') == _typed_mac('{"v":25e-1}')
    assert _typed_mac('{"v":3.0}') == _typed_mac('{"v":3.000}')


@pytest.mark.parametrize("text", _CORPUS)
def test_both_parsers_give_the_same_typed_canonical_bytes(text: str) -> None:
    typed = canonical_bytes(text, typed=True)
    assert typed == canonical_bytes(text, typed=True, check_duplicates=False)


# ---------------------------------------------------------------------- snapshot seals


def _sealed(state: str) -> str:
    return seal_snapshot(b"k", "n", "s", 3, "schema", "h" * 64, state)


def test_a_sealed_snapshot_opens_to_its_state_with_and_without_the_key() -> None:
    sealed = _sealed('{"a":1,"b":[2.0]}')
    for key in (b"k", None):
        assert open_snapshot(key, "n", "s", 3, "schema", "h" * 64, sealed) == (
            b'{"a":1,"b":[2.0]}',
            "",
        )
    assert open_snapshot(b"j", "n", "s", 3, "schema", "h" * 64, sealed) == (
        None,
        "does not match its MAC (or was not written with this key)",
    )


def test_a_snapshot_whose_state_names_a_key_twice_is_not_used() -> None:
    """Its seal cannot be checked (readers disagree on the value): refused, not raised."""
    sealed = _sealed('{"a":1,"b":2}').replace('"b":2', '"a":2')
    assert '{"a":1,"a":2}' in sealed
    expected = (None, "holds a state no writer stores (the key 'a' appears twice in one object)")
    for key in (b"k", None):
        assert open_snapshot(key, "n", "s", 3, "schema", "h" * 64, sealed) == expected
    # jsonb's rendering cannot name a key twice: that parser keeps the last, and the seal,
    # computed over another state, does not match
    fast = open_snapshot(None, "n", "s", 3, "schema", "h" * 64, sealed, check_duplicates=False)
    assert fast == (None, "does not match its checksum and the log's hash at its version")


def test_a_snapshot_row_that_is_not_sealed_or_has_no_event_is_not_used() -> None:
    assert NOT_SEALED == "is not a sealed snapshot (written by an older wgstore, or changed)"
    assert open_snapshot(None, "n", "s", 3, "schema", "h" * 64, '{"a":1}') == (None, NOT_SEALED)
    assert open_snapshot(None, "n", "s", 3, "schema", None, _sealed("{}")) == (
        None,
        "has no event of the log at its version",
    )


# A seal wgstore wrote before 2026-12-07 (form 1, numbers by value alone), of the state
# {"a":3,"b":[2.0]} with the key b"k": it must keep opening.
_FORM_1_SEAL = (
    '{"mac":"m2:g50TZdC9RC6QYkv6hxEaPR9objNh4hSSMbWUocFhsBM","seal":"750c3f391e65718650fab0a09c4'
    '523f6067822562fff9fb66ecf746a3048c035","state":{"a":3,"b":[2.0]}}'
)


def _open(sealed: str, key: bytes | None = b"k") -> tuple[bytes | None, str]:
    return open_snapshot(key, "n", "s", 3, "schema", "h" * 64, sealed)


# The seal this code writes (form 2) of that state, with the key b"k" and without one: a
# changed value here means every sealed snapshot is refused (readers fold the log instead).
_FORM_2_SEAL = (
    '{"form":2,"mac":"m2:DRrbfepKzwiz0oln7twfKo7d15qziwXwn-lKP0CjVuI","seal":"e48ce1c87d0f7d58c88'
    '2e9ea40bbe7212d811df7fb1afc90d3d77d469899c074","state":{"a":3,"b":[2.0]}}'
)


def test_a_snapshot_is_sealed_as_pinned_with_and_without_the_key() -> None:
    assert _sealed('{"a":3,"b":[2.0]}') == _FORM_2_SEAL
    keyless = seal_snapshot(None, "n", "s", 3, "schema", "h" * 64, '{"a":3,"b":[2.0]}')
    assert keyless == _FORM_2_SEAL.replace(
        '"m2:DRrbfepKzwiz0oln7twfKo7d15qziwXwn-lKP0CjVuI"', "null"
    )
    assert _open(keyless, None) == (b'{"a":3,"b":[2.0]}', "")
    assert _open(keyless) == (None, "does not match its MAC (or was not written with this key)")


def test_a_state_that_names_a_key_twice_is_not_sealed() -> None:
    with pytest.raises(DuplicateKeyError, match="the key 'a' appears twice"):
        _sealed('{"a":1,"a":2}')


def test_a_snapshot_seal_tells_an_integer_from_an_equal_float() -> None:
    sealed = _sealed('{"a":3,"b":[2.0]}')
    assert '"form":2' in sealed
    assert _open(sealed) == (b'{"a":3,"b":[2.0]}', "")
    for changed in ('"a":3.0', '"b":[2]'):
        edited = (
            sealed.replace('"a":3', changed)
            if "a" in changed
            else sealed.replace('"b":[2.0]', changed)
        )
        assert _open(edited, None) == (
            None,
            "does not match its checksum and the log's hash at its version",
        )


def test_a_snapshot_sealed_before_2026_12_07_still_opens_with_what_it_covers() -> None:
    assert _open(_FORM_1_SEAL) == (b'{"a":3,"b":[2.0]}', "")
    assert _open(_FORM_1_SEAL, None) == (b'{"a":3,"b":[2.0]}', "")
    assert _open(_FORM_1_SEAL.replace('"a":3', '"a":4'))[0] is None  # a value: refused
    # a kind alone, 3 -> 3.0: that form compared numbers by value (docs/verify.md, K4)
    assert _open(_FORM_1_SEAL.replace('"a":3', '"a":3.0')) == (b'{"a":3.0,"b":[2.0]}', "")


def test_a_snapshot_seal_of_an_unknown_form_is_not_used() -> None:
    sealed = _sealed("{}").replace('"form":2', '"form":3')
    assert _open(sealed) == (None, "has a seal of form 3, which this wgstore does not know")
