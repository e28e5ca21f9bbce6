"""Signed requests: a good request passes once; anything altered, stale, replayed or forged is refused."""

import pytest
from suite_env import named_key

from protocol.auth import (
    HEADER_ADDRESS,
    HEADER_NONCE,
    HEADER_PUBKEY,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    AuthError,
    NonceCache,
    request_nonce,
    sign_request,
    verify_request,
)
from protocol.keys import KeyType, PrivateKey

RUN = "ab" * 32
NOW = 1_800_000_000.0
KEY = named_key("member")
ETH_KEY = named_key("member-eth", KeyType.ETH_SECP256K1)


def signed(key=KEY, **kw):
    args = {"method": "GET", "path": "/v1/epochs/3/checkpoints/2", "run_id": RUN, "body": b"", "now": NOW} | kw
    return sign_request(key, **args)


def verify(headers, **kw):
    args = {"method": "GET", "path": "/v1/epochs/3/checkpoints/2", "run_id": RUN, "body": b"",
            "nonces": NonceCache(), "now": NOW} | kw
    return verify_request(headers, **args)


@pytest.mark.parametrize("key", [KEY, ETH_KEY], ids=["secp256k1", "eth_secp256k1"])
def test_good_request_passes_once(key) -> None:
    headers, cache = signed(key), NonceCache()
    assert verify(headers, nonces=cache) == key.address()
    with pytest.raises(AuthError, match="replayed"):
        verify(headers, nonces=cache)


@pytest.mark.parametrize("key", [KEY, ETH_KEY], ids=["secp256k1", "eth_secp256k1"])
def test_each_key_type_is_checked_with_its_own_address_rule_and_hash(key) -> None:
    secret = key.secret_bytes()
    other_type = PrivateKey(secret, KeyType.SECP256K1 if key.key_type == KeyType.ETH_SECP256K1
                            else KeyType.ETH_SECP256K1)
    headers = signed(key)
    # The same public key claiming the address of the other derivation: that account's key is
    # the same point, but the signature was made over the other hash.
    with pytest.raises(AuthError, match="bad signature"):
        verify({**headers, HEADER_ADDRESS: other_type.address()})
    # A signature over the other hash, presented for this key's own address.
    forged = signed(other_type)
    with pytest.raises(AuthError, match="bad signature"):
        verify({**forged, HEADER_ADDRESS: key.address()})
    # The other chain's prefix is not this chain's account.
    with pytest.raises(AuthError, match="does not belong"):
        verify({**headers, HEADER_ADDRESS: key.address("cosmos")})


@pytest.mark.parametrize("change, message", [
    ({"path": "/v1/epochs/3/checkpoints/3"}, "bad signature"),
    ({"method": "POST"}, "bad signature"),
    ({"run_id": "cd" * 32}, "bad signature"),
    ({"body": b"x"}, "bad signature"),
    ({"now": NOW + 61}, "stale"),
    ({"now": NOW - 61}, "stale"),
])
@pytest.mark.parametrize("key", [KEY, ETH_KEY], ids=["secp256k1", "eth_secp256k1"])
def test_altered_requests_are_refused(change, message, key) -> None:
    with pytest.raises(AuthError, match=message):
        verify(signed(key), **change)


@pytest.mark.parametrize("key", [KEY, ETH_KEY], ids=["secp256k1", "eth_secp256k1"])
def test_forged_headers_are_refused(key) -> None:
    other = named_key("stranger", key.key_type)
    headers = signed(key)
    with pytest.raises(AuthError, match="does not belong"):
        verify({**headers, HEADER_ADDRESS: other.address()})
    with pytest.raises(AuthError, match="does not belong"):
        verify({**headers, HEADER_PUBKEY: other.public_key.hex()})
    with pytest.raises(AuthError, match="bad signature"):
        verify({**headers, HEADER_SIGNATURE: "0" * 127 + "1"})
    with pytest.raises(AuthError, match="missing header"):
        verify({k: v for k, v in headers.items() if k != HEADER_SIGNATURE})
    with pytest.raises(AuthError, match="malformed"):
        verify({**headers, HEADER_TIMESTAMP: "-5"})
    with pytest.raises(AuthError, match="malformed"):
        verify({**headers, HEADER_PUBKEY: "zz"})


def test_nonce_cache_forgets_after_the_window_and_stays_bounded() -> None:
    cache = NonceCache(window_s=10, max_entries=3, per_address=2)
    cache.check_and_add("a", "n1", now=0)
    cache.check_and_add("a", "n1", now=11)  # expired, accepted again (its timestamp check would fail anyway)
    cache.check_and_add("b", "m0", now=12)
    # One address cannot hold more than its share: a member flooding is refused, not the others.
    cache.check_and_add("b", "m1", now=12)
    with pytest.raises(AuthError, match="too many requests"):
        cache.check_and_add("b", "m2", now=12)
    # Full: a newcomer is served; the member holding the most loses its oldest nonce, and with it
    # every request it signed at or before that nonce's timestamp (so the nonce cannot be replayed).
    cache.check_and_add("c", "x", now=12)
    assert len(cache) == 3 and cache.held("b") == 1 and cache.evicted == 1
    for nonce in ("m0", "m9"):
        with pytest.raises(AuthError, match="too many requests"):
            cache.check_and_add("b", nonce, now=12)
    with pytest.raises(AuthError, match="replayed"):
        cache.check_and_add("a", "n1", now=12)
    cache.check_and_add("b", "m3", now=13)  # signed later: served
    assert len(cache) == 3
    cache.check_and_add("c", "y", now=30)  # everything expired: room again
    assert len(cache) == 1


def test_eight_members_flooding_nonces_lock_out_nobody_else() -> None:
    # Issue 29: eight bonded identities sending 8,192 nonces each filled the one cache of 65,536
    # entries, and every other member got 429 for two minutes.
    cache = NonceCache()
    now = NOW
    flooders = [f"flooder-{i}" for i in range(8)]
    for n in range(8_192):
        for f in flooders:
            cache.check_and_add(f, f"{n:032x}", now, signed_at=int(now))
        now += 120 / 8_192 / 2  # the whole flood within one window
    assert len(cache) == 65_536
    for f in flooders:  # each flooder holds its quota and is refused more
        with pytest.raises(AuthError, match="too many requests"):
            cache.check_and_add(f, "f" * 32, now, signed_at=int(now))
    # Another member is served at once, request after request, and nothing it sent is replayable.
    for n in range(1_000):
        cache.check_and_add("honest", f"{n:032x}", now, signed_at=int(now))
    assert cache.held("honest") == 1_000 and len(cache) == 65_536
    with pytest.raises(AuthError, match="replayed"):
        cache.check_and_add("honest", f"{0:032x}", now, signed_at=int(now))
    # The flooders paid for the room: their oldest nonces went, and requests they signed that early
    # are refused (a replay of a forgotten nonce included).
    assert sum(cache.held(f) for f in flooders) == 65_536 - 1_000
    with pytest.raises(AuthError, match="too many requests"):
        cache.check_and_add(flooders[0], f"{0:032x}", now, signed_at=int(NOW))


def test_the_nonce_cache_is_checked_against_the_signed_timestamp() -> None:
    key = PrivateKey(bytes([7]) * 32)
    cache = NonceCache(max_entries=2)
    verify(signed(key), nonces=cache)
    verify(signed(key), nonces=cache)
    verify(signed(KEY), nonces=cache)  # full: key's oldest nonce goes, and its timestamp with it
    with pytest.raises(AuthError, match="too many requests"):
        verify(signed(key), nonces=cache)
    assert verify(signed(key, now=NOW + 1), nonces=cache, now=NOW + 1) == key.address()


@pytest.mark.parametrize("stamp", ["\u00b9\u00b2\u00b3", "\u0661\u0662", "12 ", "+12", "1" * 13, ""])
def test_a_timestamp_of_non_ascii_digits_is_malformed_not_a_crash(stamp) -> None:
    headers = signed(PrivateKey(bytes([7]) * 32))
    with pytest.raises(AuthError, match="malformed"):
        verify({**headers, HEADER_TIMESTAMP: stamp})


def test_verify_without_a_cache_leaves_the_nonce_to_the_caller() -> None:
    key = PrivateKey(bytes([7]) * 32)
    headers = signed(key)
    verify(headers, nonces=None)
    verify(headers, nonces=None)  # not recorded: the server records it after the membership check
    assert request_nonce(headers) == headers[HEADER_NONCE]
