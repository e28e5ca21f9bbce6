"""The exclusion height and the ``excluded`` field of a proposal (``protocol.rules.exclusion``)."""

from __future__ import annotations

import pytest

from protocol.keys import PrivateKey
from protocol.messages import ModelProposal
from protocol.rules.exclusion import excluded_list, exclusion_height
from protocol.rules.limits import MAX_PARTICIPANTS

ADDRESSES = [PrivateKey(bytes([i + 1]) * 32).address() for i in range(5)]


def test_proposers_exclude_halfway_through_the_propose_phase() -> None:
    # The phase opened at 100 for 20 blocks: every proposer waits until 110, whatever its clock.
    assert exclusion_height(120, 20) == 110
    assert exclusion_height(121, 21) == 110
    assert exclusion_height(1, 1) == 0
    with pytest.raises(ValueError, match="opens at"):
        exclusion_height(5, 10)


def test_the_excluded_field_is_sorted_distinct_and_bounded() -> None:
    assert excluded_list([ADDRESSES[2], ADDRESSES[0], ADDRESSES[2]]) == sorted({ADDRESSES[0], ADDRESSES[2]})
    ok = ModelProposal(epoch=1, model_hash="ab" * 32, val_loss_micro=5, excluded=excluded_list(ADDRESSES))
    assert ok.excluded == sorted(ADDRESSES)
    # Older proposals without the field read as excluding nothing.
    assert ModelProposal.model_validate({"epoch": 1, "model_hash": "ab" * 32, "val_loss_micro": 5}).excluded == []
    for bad in ([ADDRESSES[1], ADDRESSES[0]], [ADDRESSES[0], ADDRESSES[0]], ["not an address"],
                [ADDRESSES[0]] * (MAX_PARTICIPANTS + 1)):
        with pytest.raises(ValueError):
            ModelProposal(epoch=1, model_hash="ab" * 32, val_loss_micro=5, excluded=bad)
