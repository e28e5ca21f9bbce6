"""A verifiable delay function over the epoch seed: the common seed of the challenges.

Wesolowski's VDF ("Efficient verifiable delay functions", 2019) in the RSA group of RSA
Laboratories' RSA-2048 challenge number, whose factors nobody has published (no trusted set-up of
ours). Elements are taken modulo ``±1`` (``a`` and ``N − a`` are one element, written as the
smaller), which removes the element of order two that Wesolowski's soundness argument excludes.

* ``x = input_element(seed)``: 256 bytes of ``H("vdf/input", seed || u32be(i))``, i = 0..7, read
  big-endian, modulo ``N``.
* ``y = x^(2^T)``: ``T`` sequential squarings, which is the delay (``evaluate``).
* ``π = x^⌊2^T / ℓ⌋`` with the challenge prime ``ℓ = challenge_prime(x, y, T)``, the first of
  ``H("vdf/prime", enc(x) || enc(y) || u64be(T) || u32be(i))`` (the first 16 bytes, top and
  bottom bits set) that passes Miller–Rabin on the first 20 primes as bases (``prove``).
* The check, two exponentiations with 128-bit exponents: ``π^ℓ · x^(2^T mod ℓ) = y`` (``verify``).
* The delayed seed is ``H("vdf/seed", enc(y))`` (``delayed_seed``).

Everything here is pure and the contract runs ``verify`` on the same bytes
(``contracts/veriloco/src/vdf.rs``, pinned by ``tests/vectors/vdf.json``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from protocol.rules.hashing import Tag, tagged_hash, u32be, u64be

MODULUS = int(
    "25195908475657893494027183240048398571429282126204032027777137836043662020707595556264018525880784406918"
    "29064124951508218929855914917618450280848912007284499268739280728777673597141834727026189637501497182469"
    "11650776133798590957000973304597488084284017974291006424586918171951187461215151726546322822168699875491"
    "82422433637259085141865462043576798423387184774447920739934236584823824281198163815010674810451660377306"
    "05620161967625613384414360383390441495263443219011465754445417842402092461651572335077870774981712577246"
    "796292638635637328991215483143816789988504044536402352738195137863656439121201039712282212072035"
    "7"
)
"""RSA-2048 (RSA Laboratories' factoring challenge, 1991; 617 decimal digits, 2,048 bits)."""

ELEMENT_BYTES = 256
"""An element's encoding: big-endian, fixed width; as text, 512 lowercase hex characters."""

MAX_SQUARINGS = 1 << 40
"""The largest delay the rules accept (a spec's ``verification.delay_squarings``)."""

CHUNK_SQUARINGS = 4096
"""Squarings per ``pow`` call: CPython holds the GIL through one call, so a long delay runs in chunks
(about 40 ms each here) between which other threads run and ``stop`` is read."""

_LOWER_HEX = re.compile(r"[0-9a-f]*")


class StopFlag(Protocol):
    """What a long evaluation reads between chunks (a ``threading.Event`` is one)."""

    def is_set(self) -> bool: ...

_PRIME_BITS = 128
_PRIME_TRIES = 1 << 16
_SMALL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71)


def normalize(a: int) -> int:
    """The representative of ``{a, −a}`` modulo ``N``: the smaller of ``a mod N`` and ``N − a mod N``."""
    a %= MODULUS
    return min(a, MODULUS - a)


def encode(a: int) -> str:
    """An element as 512 lowercase hex characters."""
    return a.to_bytes(ELEMENT_BYTES, "big").hex()


def decode(text: str) -> int:
    """An element from its encoding; anything but a canonical element is refused with ValueError."""
    if len(text) != 2 * ELEMENT_BYTES or _LOWER_HEX.fullmatch(text) is None:
        raise ValueError(f"a VDF element is {2 * ELEMENT_BYTES} lowercase hex characters")
    a = int.from_bytes(bytes.fromhex(text), "big")
    if a == 0 or a != normalize(a):
        raise ValueError("a VDF element must be in [1, (N - 1) / 2] (the smaller of a and N - a)")
    return a


def input_element(seed: bytes) -> int:
    """``x`` for a seed (the epoch seed: the hash of every valid reveal)."""
    wide = b"".join(tagged_hash(Tag.VDF_INPUT, seed, u32be(i)) for i in range(ELEMENT_BYTES // 32))
    return normalize(int.from_bytes(wide, "big"))


def is_probable_prime(n: int) -> bool:
    """Miller–Rabin with the first 20 primes as bases (the contract's exact rule)."""
    if n < 2:
        return False
    for p in _SMALL_PRIMES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _SMALL_PRIMES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def challenge_prime(x: int, y: int, squarings: int) -> int:
    """Wesolowski's ``ℓ``: a 128-bit prime bound to the input, the output and the delay."""
    material = bytes.fromhex(encode(x)) + bytes.fromhex(encode(y)) + u64be(squarings)
    for i in range(_PRIME_TRIES):
        block = tagged_hash(Tag.VDF_PRIME, material, u32be(i))
        candidate = int.from_bytes(block[:16], "big") | (1 << (_PRIME_BITS - 1)) | 1
        if is_probable_prime(candidate):
            return candidate
    raise ValueError("no challenge prime among 65,536 candidates")  # about 2^-900 likely


def _check_squarings(squarings: int) -> None:
    if not 1 <= squarings <= MAX_SQUARINGS:
        raise ValueError(f"the delay must be 1 to 2^40 squarings, got {squarings}")


_WINDOW_BITS = 8
MAX_CHECKPOINTS = 1 << 16
"""The most powers an evaluation keeps for its proof (about 18 MB of Python integers)."""
_BUCKET_BITS = 12


def _square(x: int, squarings: int, stop: StopFlag | None) -> int:
    """``x^(2^squarings) mod N`` in chunks of :data:`CHUNK_SQUARINGS` squarings.

    Raises:
        InterruptedError: ``stop`` was set (read between chunks).
    """
    for done in range(0, squarings, CHUNK_SQUARINGS):
        if stop is not None and stop.is_set():
            raise InterruptedError("the VDF evaluation was stopped")
        x = pow(x, 1 << min(CHUNK_SQUARINGS, squarings - done), MODULUS)
    return x


def _power(x: int, exponent: int, stop: StopFlag | None) -> int:
    """``x^exponent mod N``, left to right in windows of 8 bits over a table of ``x^0 … x^255``: one
    squaring per bit and one product per window (about 1.13 squarings per bit), a chunk of
    :data:`CHUNK_SQUARINGS` bits at a time.

    Raises:
        InterruptedError: ``stop`` was set (read between chunks).
    """
    table = [1, x % MODULUS]
    for _ in range(2, 1 << _WINDOW_BITS):
        table.append(table[-1] * x % MODULUS)
    windows = -(-exponent.bit_length() // _WINDOW_BITS)
    per_chunk = CHUNK_SQUARINGS // _WINDOW_BITS
    mask = (1 << _WINDOW_BITS) - 1
    result = 1
    for i in range(windows - 1, -1, -1):
        if (windows - 1 - i) % per_chunk == 0 and stop is not None and stop.is_set():
            raise InterruptedError("the VDF evaluation was stopped")
        result = pow(result, 1 << _WINDOW_BITS, MODULUS) * table[(exponent >> (i * _WINDOW_BITS)) & mask] % MODULUS
    return result


def evaluate(x: int, squarings: int, stop: StopFlag | None = None) -> int:
    """``y = x^(2^T)``: ``T`` squarings one after the other, in chunks (``stop`` ends it early)."""
    _check_squarings(squarings)
    return normalize(_square(x, squarings, stop))


@dataclass(frozen=True)
class Checkpoints:
    """``x^(2^(m·every))`` for ``m = 0, 1, …``: what :func:`evaluate_with_checkpoints` passed on its
    way to ``y``, from which :func:`prove` builds the proof in about ``T / 12`` products."""

    every: int
    powers: list[int]


def checkpoint_interval(squarings: int) -> int:
    """Squarings between two kept powers: at least 12 (one bucket window), and at most
    :data:`MAX_CHECKPOINTS` powers kept."""
    return max(_BUCKET_BITS, -(-squarings // MAX_CHECKPOINTS))


def evaluate_with_checkpoints(x: int, squarings: int,
                              stop: StopFlag | None = None) -> tuple[int, Checkpoints]:
    """:func:`evaluate`, keeping every :func:`checkpoint_interval`-th power for :func:`prove`."""
    _check_squarings(squarings)
    every = checkpoint_interval(squarings)
    powers = []
    for done in range(0, squarings, every):
        powers.append(x)
        x = _square(x, min(every, squarings - done), stop)  # chunks of at most CHUNK_SQUARINGS
    return normalize(x), Checkpoints(every, powers)


def _multi_power(bases: list[int], exponents: list[int], bits: int, stop: StopFlag | None) -> int:
    """``Π bases[m]^exponents[m] mod N`` for exponents below ``2^bits``: Pippenger's buckets, 12 bits
    of every exponent at a time (one product per base and window, plus two per bucket)."""
    result = 1
    mask = (1 << _BUCKET_BITS) - 1
    for window in range(-(-bits // _BUCKET_BITS) - 1, -1, -1):
        if stop is not None and stop.is_set():
            raise InterruptedError("the VDF proof was stopped")
        result = pow(result, 1 << _BUCKET_BITS, MODULUS)
        buckets = [1] * (mask + 1)
        shift = window * _BUCKET_BITS
        for base, exponent in zip(bases, exponents, strict=True):
            v = (exponent >> shift) & mask
            if v:
                buckets[v] = buckets[v] * base % MODULUS
        running, total = 1, 1
        for v in range(mask, 0, -1):  # Σ v · bucket[v] as running products: bucket v counted v times
            if buckets[v] != 1:
                running = running * buckets[v] % MODULUS
            if running != 1:
                total = total * running % MODULUS
        result = result * total % MODULUS
    return result


def prove(x: int, y: int, squarings: int, stop: StopFlag | None = None,
          checkpoints: Checkpoints | None = None) -> int:
    """``π = x^⌊2^T / ℓ⌋``. From ``x`` alone: about ``1.13 · T`` more squarings (its exponent has
    ``T − 127`` bits). From the evaluation's ``checkpoints``: ``π = Π_m c_m^(e_m)`` where ``c_m =
    x^(2^(m·s))`` and ``e_m`` is the ``s``-bit block of ``⌊2^T / ℓ⌋`` at bit ``m·s``, which is
    ``⌊2^s · (2^(T − (m+1)·s) mod ℓ) / ℓ⌋`` (``⌊2^(T − m·s) / ℓ⌋`` for a last, shorter block), so the
    proof costs about ``T / 12`` products (Wesolowski 2019, section 4.1's idea with Pippenger's
    multi-exponentiation)."""
    _check_squarings(squarings)
    ell = challenge_prime(x, y, squarings)
    if checkpoints is None:
        return normalize(_power(x, (1 << squarings) // ell, stop))
    every = checkpoints.every
    exponents = []
    for m in range(len(checkpoints.powers)):
        rest = squarings - (m + 1) * every
        exponents.append((pow(2, rest, ell) << every) // ell if rest >= 0
                         else (1 << (squarings - m * every)) // ell)
    return normalize(_multi_power(checkpoints.powers, exponents, every, stop))


def verify(x: int, squarings: int, y: int, proof: int) -> bool:
    """Whether ``proof`` shows ``y = x^(2^T)``: ``π^ℓ · x^(2^T mod ℓ) = y`` modulo ``±1``."""
    _check_squarings(squarings)
    for a in (y, proof):
        if not 1 <= a <= MODULUS // 2:
            return False
    ell = challenge_prime(x, y, squarings)
    r = pow(2, squarings, ell)
    return normalize(pow(proof, ell, MODULUS) * pow(x, r, MODULUS)) == y


def delayed_seed(y: int) -> bytes:
    """The seed the challenges are drawn from: ``H("vdf/seed", enc(y))``."""
    return tagged_hash(Tag.VDF_SEED, bytes.fromhex(encode(y)))
