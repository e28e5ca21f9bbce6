"""What a trap rate costs in disputes, against what it buys in catching lazy validators (issue 27).

    PYTHONPATH=. .venv/bin/python bench/trap_rate.py [--segments 200] [--validators 64] [--hosts 64]

Arithmetic on stated inputs, no run: every honest host traps one of its ``S`` segments with
probability ``p`` per epoch (``trainer.trap.draw``: the segment uniform, drawn before the picks).
Each host has ``P`` pickers (equal stakes: drawn until they hold more than 1/3 of the stake or
``seats_cap`` seats), each picks ``k`` of the ``S − 1`` earlier segments and seats the last, so a
segment is challenged with probability ``c = 1/S + (S − 1)/S · (1 − (1 − k/(S − 1))^P)`` (picks
drawn independently: an upper bound on the overlap). A challenged trap is always disputed: every
validator of V without a round-0 seat on it replays the segment and sends ``commit_verdict`` and
``reveal_verdict`` (155k and 162k gas on the devnet, docs/benchmarks.md), and so does each of its
round-0 seats for its re-vote (an honest seat fails a trap: it objects): about ``V`` pairs per
dispute. The round-0 work it is compared with: ``P · (k + 1)`` replays per host and as many
commit/reveal pairs.

What a trap buys: a lazy validator that passes a seat without replaying is caught when that seat
is a trap (the trap is disputed, its `pass` is outside the deciding group: ``wrong``), with
probability ``p / S`` per blind seat; over ``n`` blind seats, ``1 − (1 − p/S)^n``. Its expected
slash per blind seat is ``(p / S) · slash_validator_wrong_bps`` of its stake.
"""

from __future__ import annotations

import argparse
import math

from protocol.rules.spec import EconomicsSpec, VerificationSpec

COMMIT_GAS, REVEAL_GAS = 155_000, 162_000
"""Typical ``commit_verdict`` / ``reveal_verdict`` gas on the devnet (docs/benchmarks.md)."""


def pickers(validators: int, seats_cap: int) -> int:
    """Pickers per host with equal stakes: the fewest holding more than 1/3, at most the cap."""
    return min(validators // 3 + 1, seats_cap)


def challenged(segments: int, k: int, picker_count: int) -> float:
    """Probability that a given segment is challenged (the last always; another if any picker picks it)."""
    if segments == 1:
        return 1.0
    miss = (1 - min(k, segments - 1) / (segments - 1)) ** picker_count
    return 1 / segments + (segments - 1) / segments * (1 - miss)


def row(p: float, segments: int, validators: int, hosts: int, k: int, seats_cap: int,
        wrong_bps: int) -> dict[str, float]:
    count = pickers(validators, seats_cap)
    c = challenged(segments, k, count)
    seats_on_segment = count * (k / max(segments - 1, 1)) if segments > 1 else count
    disputes = hosts * p * c  # challenged traps per epoch, network-wide
    dispute_replays = disputes * (validators - min(seats_on_segment, validators))
    round0_replays = hosts * count * (k + 1)
    blind_seats = round0_replays / validators  # a validator's seats per epoch (equal stakes)
    per_seat = p / segments
    return {
        "p": p,
        "disputes_per_epoch": disputes,
        "extra_replays_pct": 100 * dispute_replays / round0_replays,
        # Every final voter commits and opens; each seat (a trap's honest seats object) re-votes.
        "extra_gas_per_epoch": disputes * validators * (COMMIT_GAS + REVEAL_GAS),
        "round0_gas_per_epoch": round0_replays * (COMMIT_GAS + REVEAL_GAS),
        "caught_per_blind_seat": per_seat,
        "caught_per_epoch_all_blind": 1 - (1 - per_seat) ** blind_seats,
        "epochs_to_half": math.log(0.5) / math.log(1 - per_seat) / blind_seats if per_seat else math.inf,
        "slash_per_blind_seat_bps": per_seat * wrong_bps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=200, help="S (small: 200; tiny: 8)")
    parser.add_argument("--validators", type=int, default=64)
    parser.add_argument("--hosts", type=int, default=64)
    args = parser.parse_args()
    ver, econ = VerificationSpec.model_fields, EconomicsSpec.model_fields
    k = int(ver["challenges_k"].default)
    cap = int(ver["seats_cap"].default)
    wrong = int(econ["slash_validator_wrong_bps"].default)
    count = pickers(args.validators, cap)
    print(f"S = {args.segments}, V = {args.validators}, H = {args.hosts}, k = {k}, seats_cap = {cap} "
          f"(P = {count} pickers per host), c = {challenged(args.segments, k, count):.3f}, "
          f"slash_validator_wrong_bps = {wrong}\n")
    print("| trap rate p | challenged traps / epoch | dispute replays vs round 0 | dispute gas / epoch "
          "(round 0) | caught per blind seat | caught / epoch, every seat blind | epochs to 50 % | "
          "expected slash per blind seat |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in (0.05, 0.1, 0.2, 0.5, 1.0):
        r = row(p, args.segments, args.validators, args.hosts, k, cap, wrong)
        print(f"| {p} | {r['disputes_per_epoch']:.2f} | +{r['extra_replays_pct']:.1f} % | "
              f"{r['extra_gas_per_epoch'] / 1e6:.1f}M ({r['round0_gas_per_epoch'] / 1e6:.0f}M) | "
              f"{r['caught_per_blind_seat']:.2e} | {r['caught_per_epoch_all_blind']:.3f} | "
              f"{r['epochs_to_half']:.1f} | {r['slash_per_blind_seat_bps']:.2f} bps |")


if __name__ == "__main__":
    main()
