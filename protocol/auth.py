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
    """(address, nonce) pairs seen within the skew window, bounded so a flood cannot exhaust memory
    nor push out a live nonce (which would let a captured request be replayed).

    Only members' nonces are recorded (the server records after checking membership). Entries
    leave only by expiring; when ``max_entries`` live entries are held, or one address holds
    ``per_address`` of them, new requests (of that address) are refused until some expire.

    Args:
        window_s: how long a nonce is remembered (at least the accepted clock skew, both ways).
        max_entries: live entries at most.
        per_address: live entries of one address at most (one member cannot starve the others).
    """

    def __init__(self, window_s: int = 2 * MAX_SKEW_S, max_entries: int = 65_536, per_address: int = 8_192) -> None:
        self._window = window_s
        self._max = max_entries
        self._per_address = per_address
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._count: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def check_and_add(self, address: str, nonce: str, now: float) -> None:
        """Record a nonce; raise :class:`AuthError` if it was already used or the cache is full."""
        while self._seen and next(iter(self._seen.values())) < now - self._window:
            (old, _), _ = self._seen.popitem(last=False)
            self._count[old] -= 1
            if not self._count[old]:
                del self._count[old]
        if (address, nonce) in self._seen:
            raise AuthError("replayed request: this nonce was already used")
        if len(self._seen) >= self._max or self._count.get(address, 0) >= self._per_address:
            raise AuthError("too many requests: try again in a minute")
        self._seen[(address, nonce)] = now
        self._count[address] = self._count.get(address, 0) + 1


def verify_request(headers: Mapping[str, str], method: str, path: str, run_id: str, body: bytes,
                   nonces: NonceCache | None, now: float | None = None, max_skew: int = MAX_SKEW_S,
                   prefix: str = DEFAULT_PREFIX) -> str:
    """Check a request's signature headers; return the requester's address.

    Args:
        headers: the request headers (case-insensitive mapping, or lowercase keys).
        method, path, run_id, body: what the server received.
        nonces: the server's replay cache; None leaves the nonce to the caller, which records it
            (:meth:`NonceCache.check_and_add` with :func:`request_nonce`) only once it knows the
            signer is a member, so outsiders cannot fill the cache.
        now: the server's clock.
        max_skew: accepted clock difference in seconds.
        prefix: bech32 prefix of the chain.

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
    if not pubkey.verify(request_digest(method, path, run_id, timestamp, nonce, body), bytes.fromhex(signature)):
        raise AuthError("bad signature")
    if nonces is not None:
        nonces.check_and_add(address, nonce, now)
    return address


def request_nonce(headers: Mapping[str, str]) -> str:
    """The nonce header of a request :func:`verify_request` accepted."""
    return headers[HEADER_NONCE]
