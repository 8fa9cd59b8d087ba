"""The hashes that make the log tamper-evident: per-stream chains, one chain over the whole log,
and an optional keyed MAC of each event's content.

- **Stream chain** (``hash``): SHA-256 over the previous event's hash in the same stream and the
  event's stored fields, joined by newlines. Catches a changed, reordered or removed middle event.
- **Log chain** (``log_hash``): SHA-256 over the previous row's ``log_hash`` (in position order,
  over every stream), the event's position, its stream hash and its MAC. Catches deleted tails,
  deleted streams, moved events and cross-stream swaps; a *digest* (position + log hash) kept
  elsewhere also catches a truncated log.
- **MAC** (``mac``): HMAC-SHA-256 with a key only the writers and auditors hold, over every
  field a reader sees (:func:`event_mac`, stored as ``m3:<base64url>``): position, stream,
  version, event id, type, schema version, ``recorded_at`` and data and metadata as canonical
  bytes (numbers exact and of their kind: ``3`` is not ``3.0``; a duplicated key is refused).
  It is computed in the client under the write lock (SQLite's ``BEGIN IMMEDIATE``; on Postgres
  a keyed append takes the table lock and builds its rows itself), so the key never reaches the
  database; a forged, backdated, moved or replayed event whose hashes were recomputed has no
  valid MAC. Older MACs still verify, each with what its form covers: ``m2:`` (wgstore before
  2026-12-07) the same fields with numbers by value alone, an integer and an equal float one
  number (:attr:`~wgstore.events.verify.VerifyReport.untyped_macs`); 64 hex digits
  (:func:`content_mac`) the content only (:attr:`~wgstore.events.verify.VerifyReport.legacy_macs`).

The Postgres function ``wg_append`` computes the very same chain bytes (``data`` and
``metadata`` as the database renders them as text), so ``verify`` recomputes every hash from what
is stored. The test vectors in tests/events/test_tamper.py pin both paths to the same values.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec

__all__ = [
    "DIGEST_PREFIX",
    "GENESIS",
    "HMAC_KEY_ENV",
    "MAC_PREFIX",
    "NOT_SEALED",
    "UNTYPED_MAC_PREFIX",
    "DuplicateKeyError",
    "canonical_bytes",
    "chain_hash",
    "content_mac",
    "epoch_us",
    "event_mac",
    "format_digest",
    "is_legacy_mac",
    "is_untyped_mac",
    "log_hash",
    "normalize_key",
    "open_snapshot",
    "seal_snapshot",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)

#: The log hash "before" the first event: every chain starts from it.
GENESIS = ""
#: Digests look like ``wgs1:<position>:<log hash>``.
DIGEST_PREFIX = "wgs1"
#: The environment variable holding the MAC key when ``EventStore.open`` is given none.
HMAC_KEY_ENV = "WGSTORE_HMAC_KEY"
_MAC_DOMAIN = "wgstore-mac-v1"
#: MACs over every field (:func:`event_mac`) are stored as ``m3:<43 base64url characters>``
#: (46 characters: the ``mac`` column holds 64); the older content-only MACs are 64 hex digits.
MAC_PREFIX = "m3:"
#: The MAC over every field that wgstore wrote before 2026-12-07: numbers by value alone (an
#: integer and an equal float were one number). Still checked, never written.
UNTYPED_MAC_PREFIX = "m2:"
# Each form of the MAC over every field: its domain string and whether numbers keep their kind.
_MAC_FORMS = {MAC_PREFIX: ("wgstore-mac-v3", True), UNTYPED_MAC_PREFIX: ("wgstore-mac-v2", False)}
_SNAPSHOT_MAC_PREFIX = "m2:"  # the prefix of a snapshot seal's MAC (a stored format: kept)
_EXACT = 2**53  # integers up to here are exact as doubles


def epoch_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    return (moment - _EPOCH) // _US


def chain_hash(
    previous: str,
    stream_id: str,
    version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    recorded_us: int,
    data: str,
    metadata: str,
) -> str:
    """The hash of one event, chained to ``previous`` (empty for a stream's first event)."""
    text = "\n".join(
        (
            previous,
            stream_id,
            str(version),
            event_id,
            event_type,
            str(schema_version),
            str(recorded_us),
            data,
            metadata,
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


def log_hash(previous: str, position: int, event_hash: str, mac: str | None) -> str:
    """The whole-log chain value of the event at ``position``.

    ``previous`` is the ``log_hash`` of the row before it in position order (:data:`GENESIS`
    for the first row); ``mac`` is None for an event written without a key.
    """
    text = "\n".join((previous, str(position), event_hash, mac or ""))
    return hashlib.sha256(text.encode()).hexdigest()


def format_digest(position: int, head_log_hash: str) -> str:
    """The digest of a log whose last event is at ``position`` (0 and GENESIS when empty)."""
    return f"{DIGEST_PREFIX}:{position}:{head_log_hash or '-'}"


def normalize_key(key: bytes | str | None) -> bytes | None:
    """A MAC key as bytes (text is UTF-8 encoded); None or empty means no key."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes):
        raise TypeError(f"hmac_key must be bytes or str, got {type(key).__name__}")
    return key or None


def content_mac(
    key: bytes,
    stream_id: str,
    event_id: str,
    event_type: str,
    schema_version: int,
    data: str,
    metadata: str,
) -> str:
    """HMAC-SHA-256 of an event's content, as hex.

    ``data`` and ``metadata`` are JSON text as the client wrote it or as the database renders it
    (jsonb on Postgres reorders keys and respaces): both are brought to one canonical form first,
    with numbers compared as numbers, so writer and auditor agree on either backend.
    """
    text = "\n".join(
        (
            _MAC_DOMAIN,
            stream_id,
            event_id,
            event_type,
            str(schema_version),
            _canonical(data),
            _canonical(metadata),
        )
    )
    return hmac.digest(key, text.encode(), "sha256").hex()


_encoder = msgspec.json.Encoder(order="sorted")
_LONG_NUMBER = re.compile(r"\d{16}")  # an integer jsonb may have made of a float like 1e16


def _number(value: float | int) -> float | int:
    """One form per number: integral values up to 2**53 as int, others as float."""
    if isinstance(value, int) and -_EXACT <= value <= _EXACT:
        return value
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any double: keep it exact
        return value
    if number.is_integer() and -_EXACT <= number <= _EXACT:
        return int(number)
    return number


_float_decoder = msgspec.json.Decoder(float_hook=lambda text: _number(float(text)))


def _canonical(text: str) -> str:
    if _LONG_NUMBER.search(text):  # rare: walk the whole value for long integers too
        return _encoder.encode(_numbers(msgspec.json.decode(text))).decode()
    return _encoder.encode(_float_decoder.decode(text)).decode()


def _numbers(value: Any) -> Any:
    """The JSON value with numbers in one form: jsonb turns 1e16 into 10000000000000000."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return _number(value)


# ---------------------------------------------------------------------- the MAC over every field


class DuplicateKeyError(ValueError):
    """Stored JSON names one key twice: readers disagree on its value (SQLite's ``json_extract``
    takes the first, msgspec the last), so no writer of wgstore made it."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise DuplicateKeyError(f"the key {twice!r} appears twice in one object")
    return result


def _exact_number(text: str) -> int | Decimal:
    """A JSON number with a fraction or exponent, exactly, in one form per value (by value alone:
    the untyped canonical form, see :func:`canonical_bytes`).

    ``1e16``, ``10000000000000000`` and ``1.0E16`` are one value (jsonb renders the first as
    the second); integral values become ints, others a Decimal without trailing zeros.
    """
    sign, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int)  # JSON has no NaN or infinity
    while len(digits) > 1 and digits[-1] == 0:
        digits, exponent = digits[:-1], exponent + 1
    if exponent >= 0 or digits == (0,):
        return int(Decimal((sign, digits, max(exponent, 0))))
    return Decimal((sign, digits, exponent))


def _typed_number(text: str) -> Decimal:
    """A JSON number with a fraction or exponent, exactly, as the float every reader sees.

    One form per value, always with a point or an exponent, so it never equals an integer's
    form: ``3.0`` and ``3.00`` give ``3.0``, ``1e16`` and ``1.0E16`` give ``1E+16``, ``0.50``
    gives ``0.5``; zero keeps its sign (``-0.0``).
    """
    sign, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int)  # JSON has no NaN or infinity
    while len(digits) > 1 and digits[-1] == 0:
        digits, exponent = digits[:-1], exponent + 1
    if digits == (0,):
        return Decimal((sign, (0,), -1))  # 0.0 or -0.0
    if exponent == 0:  # Decimal would write it as an integer: 3 -> 3.0
        return Decimal((sign, (*digits, 0), -1))
    return Decimal((sign, digits, exponent))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _exact_decoder(parse_float: Callable[[str], Any]) -> Callable[[str], Any]:
    """A parser that refuses a duplicated key (the standard library's, which can say so)."""
    return json.JSONDecoder(
        object_pairs_hook=_no_duplicates, parse_float=parse_float, parse_constant=_refuse_constant
    ).decode


# Per (typed, check_duplicates): the parser that makes a JSON text's canonical value.
_decoders: dict[tuple[bool, bool], Callable[[Any], Any]] = {
    (False, True): _exact_decoder(_exact_number),
    (True, True): _exact_decoder(_typed_number),
    (False, False): msgspec.json.Decoder(float_hook=_exact_number).decode,
    (True, False): msgspec.json.Decoder(float_hook=_typed_number).decode,
}
_canonical_encoder = msgspec.json.Encoder(order="sorted", decimal_format="number")


def canonical_bytes(
    text: str | bytes, *, check_duplicates: bool = True, typed: bool = False
) -> bytes:
    """JSON text in one canonical form: sorted keys, no spaces, numbers by exact value.

    Integers stay exact at any size (2**60 and 2**60 + 100 differ). Two forms of numbers:

    - ``typed=False`` (snapshot seals, and the MACs written before 2026-12-07): by value alone.
      ``1`` and ``1.0`` are one number, and the bytes are the same whether the text is what the
      client wrote or how PostgreSQL's jsonb renders it (its key order, spacing, ``1e16`` as
      ``10000000000000000``, ``-0.0`` as ``0.0``).
    - ``typed=True`` (:func:`event_mac`): by value and kind, as readers decode them. A number
      with a fraction or an exponent is a float to every reader, one without is an integer, so
      ``3`` and ``3.0`` differ (and ``1e16`` from ``10000000000000000``, ``-0.0`` from ``0.0``);
      ``3.0`` and ``3.00`` do not. Key order and spacing still do not matter.

    ``check_duplicates=False`` parses with msgspec (faster; the last of two equal keys wins):
    for text that cannot name a key twice (a writer's own encoding, or jsonb's rendering).
    Both parsers give the same bytes for any other text (tests/events/test_hash_vectors.py).

    Raises:
        DuplicateKeyError: an object names a key twice (with ``check_duplicates``).
        ValueError: ``text`` is not JSON (either parser's error is a ValueError).
    """
    if check_duplicates and isinstance(text, bytes):
        text = text.decode()  # the standard library's parser reads text only
    return _canonical_encoder.encode(_decoders[typed, check_duplicates](text))


# Metadata repeats (one text per writing process): its canonical bytes are kept, not recomputed.
@functools.lru_cache(maxsize=64)
def _canonical_metadata(text: str, check_duplicates: bool, typed: bool) -> bytes:
    return canonical_bytes(text, check_duplicates=check_duplicates, typed=typed)


def event_mac(
    key: bytes,
    position: int,
    stream_id: str,
    version: int,
    event_id: str,
    event_type: str,
    schema_version: int,
    recorded_us: int,
    data: str,
    metadata: str,
    *,
    check_duplicates: bool = True,
    form: str = MAC_PREFIX,
) -> str:
    """The MAC of a stored event over every field a reader sees, as stored (``m3:...``).

    HMAC-SHA-256 over a JSON array of the form's domain and the scalar fields, then the
    canonical bytes of ``data`` and ``metadata`` (:func:`canonical_bytes`, with
    ``check_duplicates``), separated by newlines (none of the three contains a raw newline, so
    the message parses one way only). ``form`` is :data:`MAC_PREFIX` (numbers by value and
    kind) or :data:`UNTYPED_MAC_PREFIX` (by value alone: the form written before 2026-12-07,
    to check such a stored MAC).

    Raises:
        DuplicateKeyError: ``data`` or ``metadata`` names a key twice.
        ValueError: ``data`` or ``metadata`` is not JSON, or ``form`` is not a MAC form.
    """
    if form not in _MAC_FORMS:
        raise ValueError(f"{form!r} is not a form of the event MAC: {sorted(_MAC_FORMS)}")
    domain, typed = _MAC_FORMS[form]
    header = _canonical_encoder.encode(
        [domain, position, stream_id, version, event_id, event_type, schema_version, recorded_us]
    )
    message = b"\n".join(
        (
            header,
            canonical_bytes(data, check_duplicates=check_duplicates, typed=typed),
            _canonical_metadata(metadata, check_duplicates, typed),
        )
    )
    digest = hmac.digest(key, message, "sha256")
    return form + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def is_legacy_mac(mac: str) -> bool:
    """True for a MAC written before :func:`event_mac` (content only, :func:`content_mac`)."""
    return not mac.startswith((MAC_PREFIX, UNTYPED_MAC_PREFIX))


def is_untyped_mac(mac: str) -> bool:
    """True for a MAC over every field written before 2026-12-07 (numbers by value alone)."""
    return mac.startswith(UNTYPED_MAC_PREFIX)


# ---------------------------------------------------------------------- snapshots

# Each form of a snapshot seal: its domain string and whether numbers keep their kind. Form 1
# (sealed before 2026-12-07) compared numbers by value alone; form 2 is what seal_snapshot writes.
_SNAPSHOT_FORMS = {1: ("wgstore-snapshot-v1", False), 2: ("wgstore-snapshot-v2", True)}
_SNAPSHOT_FORM = 2
#: What :func:`open_snapshot` says of a row written before snapshots were sealed.
NOT_SEALED = "is not a sealed snapshot (written by an older wgstore, or changed)"


class _Sealed(msgspec.Struct, frozen=True):
    """A ``wg_snapshots.state`` value: the state as stored, its checksum and its MAC, and the
    form of the seal (a seal of before 2026-12-07 has none: form 1)."""

    seal: str
    state: msgspec.Raw
    mac: str | None = None
    form: int = 1


_sealed_decoder = msgspec.json.Decoder(_Sealed)


def _snapshot_message(
    name: str,
    stream_id: str,
    version: int,
    schema: str,
    event_hash: str,
    state: bytes,
    *,
    check_duplicates: bool,
    form: int = _SNAPSHOT_FORM,
) -> bytes:
    domain, typed = _SNAPSHOT_FORMS[form]
    header = _canonical_encoder.encode([domain, name, stream_id, version, schema, event_hash])
    return header + b"\n" + canonical_bytes(state, check_duplicates=check_duplicates, typed=typed)


def seal_snapshot(
    key: bytes | None,
    name: str,
    stream_id: str,
    version: int,
    schema: str,
    event_hash: str,
    state: str,
    *,
    check_duplicates: bool = True,
) -> str:
    """The ``wg_snapshots.state`` text of a snapshot: ``state`` wrapped with its seal.

    The seal binds the snapshot to the log: SHA-256 (and, with ``key``, HMAC-SHA-256) over its
    name, stream, version, schema fingerprint, ``event_hash`` (the stream hash of the event at
    ``version``) and the state's canonical bytes, numbers of their kind (``typed``, see
    :func:`canonical_bytes`). :func:`open_snapshot` checks it.
    ``check_duplicates=False`` (see :func:`canonical_bytes`) for a state the caller encoded
    itself: the same seal, computed faster.
    """
    message = _snapshot_message(
        name,
        stream_id,
        version,
        schema,
        event_hash,
        state.encode(),
        check_duplicates=check_duplicates,
    )
    mac = None
    if key is not None:
        digest = hmac.digest(key, message, "sha256")
        mac = _SNAPSHOT_MAC_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    seal = hashlib.sha256(message).hexdigest()
    sealed = _Sealed(seal=seal, state=msgspec.Raw(state.encode()), mac=mac, form=_SNAPSHOT_FORM)
    return _canonical_encoder.encode(sealed).decode()


def open_snapshot(
    key: bytes | None,
    name: str,
    stream_id: str,
    version: int,
    schema: str,
    event_hash: str | None,
    stored: str | bytes,
    *,
    check_duplicates: bool = True,
) -> tuple[bytes | None, str]:
    """The state a ``wg_snapshots`` row holds, if its seal matches the log, and why not.

    ``event_hash`` is the stream hash stored for the event at ``version`` (None when there is
    none). Without ``key`` the checksum is checked (it catches an edited row or a rewritten
    stream, not a forger who recomputes it); with ``key`` the MAC must match too. A seal of
    before 2026-12-07 (form 1) is checked as it was made: numbers by value alone.
    ``check_duplicates=False`` (faster) only for text that cannot name a key twice: PostgreSQL's
    rendering of a ``jsonb`` value.

    Returns:
        ``(state JSON, "")`` when the snapshot may be used, else ``(None, reason)``.
    """
    try:
        sealed = _sealed_decoder.decode(stored)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, NOT_SEALED
    if sealed.form not in _SNAPSHOT_FORMS:
        return None, f"has a seal of form {sealed.form}, which this wgstore does not know"
    if event_hash is None:
        return None, "has no event of the log at its version"
    state = bytes(sealed.state)
    try:
        message = _snapshot_message(
            name, stream_id, version, schema, event_hash, state,
            check_duplicates=check_duplicates, form=sealed.form,
        )  # fmt: skip
    except ValueError as error:  # DuplicateKeyError included
        return None, f"holds a state no writer stores ({error})"
    if not hmac.compare_digest(hashlib.sha256(message).hexdigest(), sealed.seal):
        return None, "does not match its checksum and the log's hash at its version"
    if key is not None:
        digest = hmac.digest(key, message, "sha256")
        mac = _SNAPSHOT_MAC_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        if sealed.mac is None or not hmac.compare_digest(mac, sealed.mac):
            return None, "does not match its MAC (or was not written with this key)"
    return state, ""
