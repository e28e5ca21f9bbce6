"""Signed off-chain requests: who asks, for what, when, and never twice.

An artifact request carries five headers: the requester's compressed public key, its address, a
unix timestamp, a random nonce and a signature over::

    H("message", canonical_json({"body": hex(sha256(body)), "method": M, "nonce": N,
                                 "path": P, "run_id": R, "timestamp": T}))

made with the participant's chain key (:meth:`protocol.keys.PrivateKey.sign`: over sha256 of
those bytes for a plain ``secp256k1`` key, over keccak256 for an ``eth_secp256k1`` one). The
headers do not name the key type: the address fixes it (:meth:`protocol.keys.PublicKey.for_address`
finds the one type whose derivation gives the address, since the two hash differently), so the
server checks that the key derives the address as one of the two types, the signature under that
type's hash, that the timestamp is within ``max_skew`` seconds
of its clock, and that the (address, nonce) pair was not seen inside that window — so a captured
request cannot be replayed, redirected to another path or run, or have its body swapped. Whether
the address is a bonded participant is the server's question to the chain, not this module's.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

from protocol.errors import VerilocoError
from protocol.keys import DEFAULT_PREFIX, PUBKEY_HEX_PATTERN, KeyFormatError, PrivateKey, PublicKey, decode_address
from protocol.rules.encoding import canonical_json
from protocol.rules.hashing import Tag, tagged_hash

HEADER_PUBKEY = "x-veriloco-pubkey"
HEADER_ADDRESS = "x-veriloco-address"
HEADER_TIMESTAMP = "x-veriloco-timestamp"
HEADER_NONCE = "x-veriloco-nonce"
HEADER_SIGNATURE = "x-veriloco-signature"
MAX_SKEW_S = 60
_NONCE = re.compile(r"^[0-9a-f]{32}$")
# ASCII digits only: str.isdigit() also accepts superscripts and other scripts' digits, which
# int() then refuses (a 500 with a traceback, once).
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_SIG = re.compile(r"^[0-9a-f]{128}$")
_PUBKEY = re.compile(PUBKEY_HEX_PATTERN)


class AuthError(VerilocoError, ValueError):
    """A request's signature headers are missing, malformed, stale, replayed or wrong."""


def request_digest(method: str, path: str, run_id: str, timestamp: int, nonce: str, body: bytes) -> bytes:
    """The bytes a requester signs (see the module docstring)."""
    return tagged_hash(Tag.MESSAGE, canonical_json({
        "body": hashlib.sha256(body).hexdigest(), "method": method.upper(), "nonce": nonce,
        "path": path, "run_id": run_id, "timestamp": timestamp,
    }))


def sign_request(key: PrivateKey, method: str, path: str, run_id: str, body: bytes = b"",
                 now: float | None = None, prefix: str = DEFAULT_PREFIX) -> dict[str, str]:
    """The headers that authenticate one request.

    Args:
        key: the participant's chain key.
        method: HTTP method.
        path: the request path, query string included (exactly as the server sees it).
        run_id: the run's id (hex); a signature for one run is useless for another.
        body: the request body.
        now: unix time (tests pass a fixed clock).
        prefix: bech32 prefix of the chain.
    """
    timestamp = int(time.time() if now is None else now)
    nonce = os.urandom(16).hex()
    signature = key.sign(request_digest(method, path, run_id, timestamp, nonce, body))
    return {
        HEADER_PUBKEY: key.public_key.hex(),
        HEADER_ADDRESS: key.address(prefix),
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: signature.hex(),
    }


class NonceCache:
    """(address, nonce) pairs seen within the skew window, one cache per member, bounded so a
    flood cannot exhaust memory, push out a live nonce (which would let a captured request be
    replayed), nor lock out the other members.

    Only members' nonces are recorded (the server records after checking membership). An entry
    leaves by expiring after ``window_s``, or — when ``max_entries`` live entries are held in all —
    by eviction: the oldest nonce of the member holding the most goes, and that member's requests
    signed at or before its timestamp are refused from then on (429), so the forgotten nonce
    cannot be replayed and the flood costs only the member who holds the most. One member holding
    ``per_address`` live entries has its new requests refused (429) until some expire: a flood by
    one member hurts that member only, whatever the others do.

    Args:
        window_s: how long a nonce is remembered (at least the accepted clock skew, both ways).
        max_entries: live entries at most, all members together.
        per_address: live entries of one member at most.
    """

    def __init__(self, window_s: int = 2 * MAX_SKEW_S, max_entries: int = 65_536, per_address: int = 8_192) -> None:
        self._window = window_s
        self._max = max_entries
        self._per_address = per_address
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()  # (address, nonce) -> recorded at
        self._members: dict[str, OrderedDict[str, int]] = {}  # address -> nonce -> signed timestamp
        self._floors: dict[str, int] = {}  # address -> latest signed timestamp of a nonce evicted
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._seen)

    def held(self, address: str) -> int:
        """Live entries of ``address``."""
        return len(self._members.get(address, ()))

    def check_and_add(self, address: str, nonce: str, now: float, signed_at: int | None = None) -> None:
        """Record a nonce; raise :class:`AuthError` if it was already used, or the member holds its
        quota, or it was signed no later than a nonce of this member that had to be evicted.

        Args:
            address, nonce: the request's signer and nonce.
            now: the server's clock (unix seconds).
            signed_at: the request's signed timestamp (default: ``now``).
        """
        while self._seen and next(iter(self._seen.values())) < now - self._window:
            (old, old_nonce), _ = self._seen.popitem(last=False)
            self._forget(old, old_nonce)
        stamp = int(now) if signed_at is None else signed_at
        floor = self._floors.get(address)
        if floor is not None and floor < now - self._window:
            del self._floors[address]
        elif floor is not None and stamp <= floor:
            raise AuthError("too many requests: sign again (this member's older nonces were forgotten)")
        mine = self._members.get(address)
        if mine is not None and nonce in mine:
            raise AuthError("replayed request: this nonce was already used")
        if mine is not None and len(mine) >= self._per_address:
            raise AuthError("too many requests: try again in a minute")
        if len(self._seen) >= self._max:
            self._evict(now)
        self._seen[(address, nonce)] = now
        self._members.setdefault(address, OrderedDict())[nonce] = stamp

    def _forget(self, address: str, nonce: str) -> int:
        mine = self._members[address]
        stamp = mine.pop(nonce)
        if not mine:
            del self._members[address]
        return stamp

    def _evict(self, now: float) -> None:
        heaviest = max(self._members, key=lambda a: len(self._members[a]))
        nonce = next(iter(self._members[heaviest]))
        del self._seen[(heaviest, nonce)]
        stamp = self._forget(heaviest, nonce)
        self._floors[heaviest] = max(stamp, self._floors.get(heaviest, stamp))
        self.evicted += 1
        if len(self._floors) > 1024:  # floors of members that stopped asking: drop the expired
            self._floors = {a: f for a, f in self._floors.items() if f >= now - self._window}


class Claim(NamedTuple):
    """What a request's signature headers claim, checked as far as can be without its body
    (:func:`claimed_signer`)."""

    address: str
    pubkey: PublicKey
    nonce: str
    timestamp: int
    signature: bytes


def claimed_signer(headers: Mapping[str, str], now: float | None = None, max_skew: int = MAX_SKEW_S,
                   prefix: str = DEFAULT_PREFIX) -> Claim:
    """Check everything of a request's signature headers but the signature (which covers the
    body): present and well-formed, fresh, and a public key that derives the claimed address. A
    server asks this before reading a body, so an unsigned request costs it no body.

    Raises:
        AuthError: with a one-line reason.
    """
    now = time.time() if now is None else now

    def header(name: str, pattern: re.Pattern[str] | None = None) -> str:
        value = headers.get(name)
        if value is None:
            raise AuthError(f"unsigned request: missing header {name}")
        if pattern is not None and not pattern.fullmatch(value):
            raise AuthError(f"malformed header {name}")
        return value

    pubkey_hex = header(HEADER_PUBKEY, _PUBKEY)
    address = header(HEADER_ADDRESS)
    nonce = header(HEADER_NONCE, _NONCE)
    signature = header(HEADER_SIGNATURE, _SIG)
    timestamp = int(header(HEADER_TIMESTAMP, _TIMESTAMP))
    if abs(now - timestamp) > max_skew:
        raise AuthError(f"stale request: timestamp is {int(now - timestamp)} s from the server's clock")
    try:
        PublicKey(bytes.fromhex(pubkey_hex))
    except KeyFormatError as exc:
        raise AuthError(f"bad public key: {exc}") from None
    try:
        decode_address(address, prefix)  # this chain's accounts only
        pubkey = PublicKey.for_address(bytes.fromhex(pubkey_hex), address)
    except KeyFormatError:
        raise AuthError("the public key does not belong to the claimed address") from None
    return Claim(address, pubkey, nonce, timestamp, bytes.fromhex(signature))


def verify_request(headers: Mapping[str, str], method: str, path: str, run_id: str, body: bytes,
                   nonces: NonceCache | None, now: float | None = None, max_skew: int = MAX_SKEW_S,
                   prefix: str = DEFAULT_PREFIX) -> str:
    """Check a request's signature headers; return the requester's address.

    Args:
        headers: the request headers (case-insensitive mapping, or lowercase keys).
        method, path, run_id, body: what the server received.
        nonces: the server's replay cache; None leaves the nonce to the caller, which records it
            (:meth:`NonceCache.check_and_add` with :func:`request_nonce` and
            :func:`request_timestamp`) only once it knows the signer is a member, so outsiders
            cannot fill the cache.
        now: the server's clock.
        max_skew: accepted clock difference in seconds.
        prefix: bech32 prefix of the chain.

    Raises:
        AuthError: with a one-line reason.
    """
    now = time.time() if now is None else now
    claim = claimed_signer(headers, now, max_skew, prefix)
    digest = request_digest(method, path, run_id, claim.timestamp, claim.nonce, body)
    if not claim.pubkey.verify(digest, claim.signature):
        raise AuthError("bad signature")
    if nonces is not None:
        nonces.check_and_add(claim.address, claim.nonce, now, claim.timestamp)
    return claim.address


def request_nonce(headers: Mapping[str, str]) -> str:
    """The nonce header of a request :func:`verify_request` accepted."""
    return headers[HEADER_NONCE]


def request_timestamp(headers: Mapping[str, str]) -> int:
    """The signed timestamp of a request :func:`verify_request` accepted."""
    return int(headers[HEADER_TIMESTAMP])
