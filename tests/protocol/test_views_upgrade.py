"""Reading a contract across the 0.3.0 upgrade (gain disputes, issue 28): nodes upgrade first
(docs/chain.md, "Upgrades"), so a 0.3.0 node must read a 0.2.0 contract's challenge and vote views,
which lack the gain-dispute fields; a 0.2.0 node refuses the new fields (the views forbid unknown
keys), which is why the order matters."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from protocol.views import Challenge, Vote

HOST = "inj1274nsvnlk0eana7jdq49upfrfg07dge2sqvur0"
SEAT = "inj1e5z4608crwl3lz4wf0364mh88945z9w8x5f37v"


def challenge_0_2_0() -> dict[str, Any]:
    """A last-segment challenge as a 0.2.0 contract lists it: no ``gain_dispute``."""
    return {"epoch": 3, "host": HOST, "segment": 1, "segments": 2, "checkpoint_root": "11" * 32,
            "delta_hash": "22" * 32, "loss_digest": "33" * 32, "train_loss_micro": 2_500_000,
            "endpoint": "http://127.0.0.1:9000", "round": 0, "validators": [SEAT], "committed": True,
            "revealed": True, "disputed": False, "due": False, "outcome": "pass"}


def vote_0_2_0() -> dict[str, Any]:
    """An opened round-0 pass as a 0.2.0 contract reports it: no dispute gain, no round-0 gain."""
    return {"validator": SEAT, "round": 0, "commitment": "44" * 32, "outcome": "pass", "distance": "0.001",
            "evidence": "55" * 32, "salt": "66" * 32, "gain_micro": 25_000}


def test_a_new_node_reads_an_old_contracts_challenge_and_vote_with_no_gain_dispute() -> None:
    challenge = Challenge.model_validate(challenge_0_2_0())
    assert challenge.gain_dispute is False and challenge.outcome == "pass"
    vote = Vote.model_validate(vote_0_2_0())
    assert vote.gain_micro == 25_000
    assert vote.dispute_gain_micro is None and vote.round0_gain_micro is None


def test_a_new_contracts_gain_dispute_reads_with_both_gains() -> None:
    challenge = Challenge.model_validate({**challenge_0_2_0(), "gain_dispute": True, "disputed": True,
                                          "outcome": "pending"})
    assert challenge.gain_dispute and challenge.disputed
    vote = Vote.model_validate({**vote_0_2_0(), "round": 2, "dispute_gain_micro": 24_000,
                                "round0_gain_micro": 31_000})
    assert (vote.gain_micro, vote.dispute_gain_micro, vote.round0_gain_micro) == (25_000, 24_000, 31_000)


@pytest.mark.parametrize("field, value", [("gain_dispute", "maybe"), ("gain_disputed", True)])
def test_a_malformed_or_unknown_gain_dispute_field_is_refused(field: str, value: Any) -> None:
    # A wrong type is refused; so is a field this node does not know (the reason nodes upgrade first).
    with pytest.raises(ValidationError, match=field):
        Challenge.model_validate({**challenge_0_2_0(), field: value})


def test_a_gain_outside_the_contracts_bound_is_refused() -> None:
    with pytest.raises(ValidationError, match="dispute_gain_micro"):
        Vote.model_validate({**vote_0_2_0(), "dispute_gain_micro": 10**13})
