"""The delayed seed's VDF (``protocol.rules.vdf``): an output verifies only with its own input, delay
and proof; encodings are canonical; a long evaluation runs in chunks that a stop event ends. The
byte-level rules are pinned against the contract by ``tests/vectors/vdf.json``."""

from __future__ import annotations

import threading

import pytest

from protocol.rules import vdf

X = vdf.input_element(b"\x07" * 32)


@pytest.mark.parametrize("squarings", [1, 2, vdf.CHUNK_SQUARINGS - 1, vdf.CHUNK_SQUARINGS, 3 * vdf.CHUNK_SQUARINGS + 5])
def test_the_chunked_evaluation_is_the_plain_power_and_its_proof_verifies(squarings: int) -> None:
    y = vdf.evaluate(X, squarings)
    assert y == vdf.normalize(pow(X, 2**squarings, vdf.MODULUS))
    proof = vdf.prove(X, y, squarings)
    assert vdf.verify(X, squarings, y, proof)


@pytest.mark.parametrize("squarings", [1, 11, 12, 13, 127, 128, 129, 1000, 12 * 1000 + 7])
def test_the_proof_from_the_kept_powers_is_the_proof_from_x(squarings: int) -> None:
    y, checkpoints = vdf.evaluate_with_checkpoints(X, squarings)
    assert y == vdf.evaluate(X, squarings)
    assert len(checkpoints.powers) == -(-squarings // checkpoints.every)
    proof = vdf.prove(X, y, squarings, checkpoints=checkpoints)
    assert proof == vdf.prove(X, y, squarings) and vdf.verify(X, squarings, y, proof)


def test_the_kept_powers_are_bounded() -> None:
    assert vdf.checkpoint_interval(100) == 12
    assert -(-(10**9) // vdf.checkpoint_interval(10**9)) <= vdf.MAX_CHECKPOINTS


def test_an_output_verifies_with_nothing_but_its_own_input_delay_and_proof() -> None:
    y = vdf.evaluate(X, 300)
    proof = vdf.prove(X, y, 300)
    other_x = vdf.input_element(b"\x08" * 32)
    assert not vdf.verify(other_x, 300, y, proof)
    assert not vdf.verify(X, 299, y, proof)
    assert not vdf.verify(X, 301, y, proof)
    assert not vdf.verify(X, 300, vdf.normalize(y * 2), proof)
    assert not vdf.verify(X, 300, y, vdf.normalize(proof * 2))
    # The other spelling of each element (N − a) is refused, not read as the same element.
    assert not vdf.verify(X, 300, vdf.MODULUS - y, proof)
    assert not vdf.verify(X, 300, y, vdf.MODULUS - proof)
    # An output computed for a delay one short cannot pass as the longer one with any proof the
    # honest prover would make.
    short = vdf.evaluate(X, 299)
    assert not vdf.verify(X, 300, short, vdf.prove(X, short, 300))


def test_encodings_are_canonical() -> None:
    y = vdf.evaluate(X, 10)
    assert vdf.decode(vdf.encode(y)) == y
    for bad, why in [(vdf.encode(y)[:-2], "512"), (vdf.encode(y).upper(), "512"),
                     ("00 " * 170 + "01", "512"),  # bytes.fromhex would skip the spaces
                     (vdf.encode(vdf.MODULUS - y), "smaller"), ("0" * 512, "smaller")]:
        with pytest.raises(ValueError, match=why):
            vdf.decode(bad)


def test_delays_out_of_range_are_refused() -> None:
    for squarings in (0, vdf.MAX_SQUARINGS + 1):
        with pytest.raises(ValueError, match="1 to 2\\^40"):
            vdf.evaluate(X, squarings)


def test_a_stop_ends_a_long_evaluation_between_chunks() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        vdf.evaluate(X, 10 * vdf.CHUNK_SQUARINGS, stop)
    with pytest.raises(InterruptedError):
        vdf.evaluate_with_checkpoints(X, 10 * vdf.CHUNK_SQUARINGS, stop)


def test_challenge_primes_are_128_bit_primes_bound_to_the_output() -> None:
    y = vdf.evaluate(X, 50)
    ell = vdf.challenge_prime(X, y, 50)
    assert ell.bit_length() == 128 and vdf.is_probable_prime(ell)
    assert vdf.challenge_prime(X, vdf.normalize(y + 1), 50) != ell
    assert vdf.challenge_prime(X, y, 51) != ell
    # Strong pseudoprimes to small bases are composites here (the first 20 primes are bases).
    assert not vdf.is_probable_prime(3215031751) and not vdf.is_probable_prime(341550071728321)
