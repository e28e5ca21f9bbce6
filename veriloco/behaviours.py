"""Picking participant behaviours by name, for the CLI: honest by default, adversaries on request.

The catalogue itself lives in ``verifier.adversaries`` (and the nodes its on-chain adversaries
need in ``node.adversaries``); this module only turns command-line text (``noise``, ``lazy:0.5``,
``always_fail``) into behaviours and nodes.
"""

from __future__ import annotations

from pathlib import Path

from chain.ledger import Ledger
from node.adversaries import validator_node as node_for
from node.daemon import http_peers
from node.http import ClientLimits
from node.validator import Patience, ValidatorNode
from protocol.keys import PrivateKey
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from verifier.adversaries import ADVERSARIES, VALIDATORS, ValidatorBehaviour, make_adversary, make_validator_behaviour
from veriloco.errors import CommandError


def host_behaviour(text: str | None) -> HostBehaviour:
    """``None``/``honest`` -> the honest host; otherwise an adversary from the catalogue (``name:a,b``)."""
    if not text or text == "honest":
        return HostBehaviour()
    try:
        return make_adversary(text)
    except ValueError as exc:
        raise CommandError(f"{exc} (known: {', '.join(sorted(ADVERSARIES))})") from None


def validator_behaviour(text: str | None) -> ValidatorBehaviour:
    """``None``/``honest`` -> the honest validator; otherwise a lying one from the catalogue."""
    try:
        return make_validator_behaviour(text or "honest")
    except ValueError as exc:
        raise CommandError(f"{exc} (known: {', '.join(sorted(VALIDATORS))})") from None


def validator_node(ledger: Ledger, key: PrivateKey, root: Path, behaviour: str | None,
                   name: str | None = None, device: str = "cpu", allow_private: bool = False,
                   keep_epochs: int | None = None) -> ValidatorNode:
    """A validator node reaching hosts over HTTP (the daemon's), patient with hosts that do not
    deliver until its deadline is near; ``name`` labels its logs, ``device`` is where it replays.

    Args:
        allow_private: hosts' endpoints on loopback and private networks may be dialed (local runs).
        keep_epochs: delete the global states no open epoch needs (``GlobalStore.prune``).
    """
    spec = ledger.spec()
    made: list[ValidatorNode] = []
    # Its requests' deadlines follow its window, its challenges and the block time it observes
    # (ValidatorNode.client_limits), so a request never outlasts the margin it gives up at.
    peers = http_peers(key, spec, ledger.prefix, allow_private,
                       limits=lambda: made[0].client_limits() if made else ClientLimits())
    node = node_for(ledger, key, spec, Dataset.load(spec.data), root, peers,
                    behaviour=validator_behaviour(behaviour), name=name, device=device, patience=Patience(),
                    keep_epochs=keep_epochs)
    made.append(node)
    return node
