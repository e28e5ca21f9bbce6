"""When a proposer stops waiting for an accepted Δ that no holder serves (``docs/network.md``).

An accepted host's Δ is fetched by hash from any holder (the host, the validators that passed its
last segment, the peer hosts that already hold it). A proposer that cannot get it from any of them
by the **exclusion height** leaves it out of its aggregate and names the host in its proposal's
``excluded`` list; the contract slashes the host (``unavailable``) and the validators that passed
its last segment (``wrong``) when the agreed model's proposers excluding it hold more than 2/3 of
the accepted stake.

The exclusion height is halfway through the propose phase: the first half gives every holder's
retries time to answer (a holder restarting or a slow link is not a withholder), the second half
leaves time to aggregate, evaluate, propose and for the proposals to reach 2/3 before the deadline.
Every honest proposer derives the same height from the chain's phase deadline and the spec, so
with the same holders silent they exclude the same hosts and agree on one model.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

EXCLUDE_AFTER = Fraction(1, 2)
"""The part of the propose phase a proposer waits for every accepted Δ before excluding it."""


def exclusion_height(phase_deadline: int, propose_blocks: int) -> int:
    """The first height at which a proposer excludes an accepted Δ that no holder served.

    Args:
        phase_deadline: the propose phase's deadline on chain (it opened ``propose_blocks`` earlier).
        propose_blocks: the spec's propose window, in blocks.
    """
    if propose_blocks < 0 or phase_deadline < propose_blocks:
        raise ValueError("the propose phase opens at phase_deadline - propose_blocks >= 0")
    opened = phase_deadline - propose_blocks
    return opened + int(propose_blocks * EXCLUDE_AFTER)


def excluded_list(hosts: Iterable[str]) -> list[str]:
    """The ``excluded`` field of a proposal: the hosts distinct, in ascending order (the contract
    refuses anything else)."""
    return sorted(set(hosts))
