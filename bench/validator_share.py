"""What the validators replay under the settlement game, and what it buys (issues 27 and 30).

    PYTHONPATH=. .venv/bin/python bench/validator_share.py [--hosts 512] [--json out.json]

Arithmetic on the real sampler, no training: each host's challenges are picked by a committee of
validators drawn by stake (:func:`protocol.rules.sampling.pickers`: seats one at a time until the
distinct holders hold more than 1/3 of the joined stake, or ``seats_cap`` seats); every picker replays
its ``k`` picks and the host's last segment. So the validators together replay ``P · (k + 1)``
segments per host-epoch, ``P`` the host's distinct pickers, against the host's ``S``: their compute is
``P · (k + 1) / S`` of the hosts' (``trainer.presets.replay_share``), plus fixed costs per seat (a
start leaf read and hashed, the checks). Before the settlement game a challenge had ``r = 2`` seats,
which is where the presets' "3 %" (``small``) and "3.75 %" (``gpt124m``) came from.

Per stake distribution and ``seats_cap``: ``P`` (the mean over ``--hosts`` host addresses of the real
draw from one seed), the replay share at the presets' ``S``, the ``S`` (and inner steps at the preset's
segment length) that would bring it to 2 %, a validator's seats per epoch with as many hosts as
validators, and what the committee buys: the chance that every picker of a host belongs to a
coalition holding β = 1/3 − ε of the stake (the only way a cheater is shielded), bounded by
``β^seats_cap`` where the cap stops the draw and 0 where the draw stops on stake (a coalition under
1/3 never holds more than 1/3). Detection with one honest picker is ``1 − (1 − f)^k`` per epoch,
the guaranteed minimum; ``h`` honest pickers picking apart catch about ``1 − (1 − f)^(h·k)``.

The host's recomputation is counted exactly on the same draw (``trainer.recompute.replayed_segments``:
it keeps every leaf it recomputes, so each run of ``K`` segments is replayed once, as far as its
highest challenged leaf, whatever order the validators ask in).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

from protocol.rules.hashing import tagged_hash
from protocol.rules.sampling import challenge_seats
from protocol.rules.spec import RunSpec
from trainer.presets import picker_committees, preset, replay_share
from trainer.recompute import replayed_segments

VALIDATOR_COUNTS = (2, 3, 4, 8, 16, 32, 64, 128, 256, 1024)
SEATS_CAPS = (19, 10, 7)
TARGET_SHARE = 0.02
"""Issue 30's target for the validators' compute, as a share of the hosts'."""
RECOMPUTE_K = 4
"""The hosts' default ``--full-leaf-every``: one leaf in 4 is stored, the others recomputed when challenged."""
BETA = 1 / 3
"""The coalition's stake share at the edge of the trust assumption (docs/contract.md)."""


def shield_bound(seats_cap: int, beta: float = BETA) -> float:
    """An upper bound on the chance that every picker of a host is in a coalition of stake share
    ``beta`` < 1/3: the draw stops early only once its holders hold more than 1/3 of the stake, which
    the coalition alone never does, so an all-coalition committee needs all ``seats_cap`` seats on
    the coalition, each with probability ``beta``."""
    return beta ** seats_cap


def mean_challenges(committees: dict[str, list[str]], spec: RunSpec) -> tuple[float, float]:
    """A host's mean number of challenges (distinct segments its pickers' picks and the last segment
    make, ``protocol.rules.sampling.challenge_seats``) over ``committees`` (host -> its pickers,
    ``trainer.presets.picker_committees``), each picker's secret drawn at random (deterministically,
    from the picker and the host): what the host uploads; and the mean segments it replays to
    recompute their leaves at ``K`` = :data:`RECOMPUTE_K`."""
    total, replayed = 0, 0
    for host, chosen in committees.items():
        secrets = {v: tagged_hash("bench/secret", v.encode(), host.encode()) for v in chosen}
        challenged = challenge_seats(secrets, host, spec.train.segments, spec.verification.challenges_k)
        total += len(challenged)
        replayed += replayed_segments(spec, challenged, RECOMPUTE_K)
    return total / len(committees), replayed / len(committees)


def zipf(count: int) -> list[int]:
    """Stakes proportional to 1/rank (a few large validators, a long tail), in base units."""
    return [round(10**12 / (i + 1)) for i in range(count)]


def row(label: str, stakes: Sequence[int], seats_cap: int, hosts: int) -> dict[str, float | int | str]:
    committees = picker_committees(stakes, seats_cap, hosts)  # drawn once for every figure below
    p = sum(map(len, committees.values())) / hosts
    out: dict[str, float | int | str] = {"stakes": label, "validators": len(stakes), "seats_cap": seats_cap,
                                         "pickers": p, "shield_bound": shield_bound(seats_cap)}
    for name in ("small", "gpt124m"):
        spec = preset(name)
        share = replay_share(spec, p)
        k = spec.verification.challenges_k
        segments_for_target = math.ceil(p * (k + 1) / TARGET_SHARE)
        out[f"{name}_share"] = share
        challenges, replayed = mean_challenges(committees, spec)
        out[f"{name}_challenges"] = challenges
        out[f"{name}_recompute"] = replayed / spec.train.segments
        out[f"{name}_segments_for_2pct"] = segments_for_target
        out[f"{name}_steps_for_2pct"] = segments_for_target * spec.train.segment_steps
    # A validator's seats per epoch with as many hosts as validators and equal shares of the seats.
    out["seats_per_validator"] = p * (preset("small").verification.challenges_k + 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=512, help="host addresses the mean is taken over")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [row("equal", [10**12] * v, cap, args.hosts) for cap in SEATS_CAPS for v in VALIDATOR_COUNTS]
    rows += [row("1/rank", zipf(v), 19, args.hosts) for v in (16, 64, 1024)]
    print("| stakes | V | seats_cap | pickers P | all pickers in a 1/3 − ε coalition ≤ | small: P·(k+1)/S "
          "| S for 2 % (steps at c = 12) | gpt124m: P·(k+1)/S | seats per validator (n = V) "
          "| challenges per host at small (each a start leaf the host uploads) "
          "| the host's recomputation at small, K = 4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['stakes']} | {r['validators']} | {r['seats_cap']} | {r['pickers']:.2f} "
              f"| {r['shield_bound']:.1e} | {100 * float(r['small_share']):.1f} % "
              f"| {int(r['small_segments_for_2pct']):,} ({int(r['small_steps_for_2pct']):,}) "
              f"| {100 * float(r['gpt124m_share']):.1f} % | {float(r['seats_per_validator']):.1f} "
              f"| {float(r['small_challenges']):.1f} | {100 * float(r['small_recompute']):.1f} % |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
