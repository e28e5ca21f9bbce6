"""A phase held by the settling epoch (pipelined runs): a node asks to close it once, and again as
soon as the settling epoch has closed, even when the held phase kept its deadline (a held reveal,
contract 0.3.7). Neither a stream of refused transactions nor a run that waits forever."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

from chain.errors import ContractError
from node.participant import Participant
from protocol.keys import PrivateKey
from protocol.views import ParticipantStatus
from trainer.presets import tiny

HELD = "advance: nothing is due: epoch 1 is in phase reveal, held until epoch 0 settles"


class SettlingChain:
    """The chain as a node's ``maybe_advance`` and ``settling`` read it: epoch 1 in a reveal due at
    height 90 (now 100), held while epoch ``settling`` settles; counts the ``advance`` sent."""

    prefix = "inj"

    def __init__(self) -> None:
        self.settling: int | None = 0
        self.sent = 0

    def height(self) -> int:
        return 100

    def epoch(self, lists: bool = True) -> SimpleNamespace:
        return SimpleNamespace(settling=self.settling)

    def participant(self, address: str, epoch: int) -> ParticipantStatus:
        return reveal_due(epoch, address)

    def advance(self, key: PrivateKey) -> None:
        self.sent += 1
        if self.settling is not None:
            raise ContractError(HELD)


def reveal_due(epoch: int, address: str) -> ParticipantStatus:
    return ParticipantStatus(epoch=epoch, phase="reveal", phase_deadline=90, model_hash="00" * 32,
                             prev_seed="00" * 32, address=address, joined=True)


def tick(node: Participant) -> bool:
    """What a host's or validator's tick does first: read the settling epoch, then advance."""
    node.settling()
    return node.maybe_advance(reveal_due(1, node.address))


def test_a_held_reveal_is_asked_once_then_again_when_the_settling_epoch_closed(tmp_path: Path) -> None:
    chain = SettlingChain()
    spec = tiny("held").with_changes(phases={"pipelined": True})
    key = PrivateKey(hashlib.sha256(b"held-advance").digest())
    events: list[str] = []
    node = Participant(chain, key, spec, tmp_path, on_event=lambda e: events.append(e.detail))  # type: ignore[arg-type]
    assert not tick(node) and chain.sent == 1 and HELD in events
    for _ in range(5):  # epoch 0 still settles: the reveal keeps its deadline, nothing is resent
        assert not tick(node)
    assert chain.sent == 1
    chain.settling = None  # epoch 0 closed; the reveal's deadline is still 90
    assert tick(node) and chain.sent == 2
