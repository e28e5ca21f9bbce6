"""A run that pins a compute profile trains with nodes of that profile, and nodes of another
profile refuse to start (before they bond or write a file)."""

from __future__ import annotations

import pytest
from suite_env import small_spec

from node.validator import ValidatorNode
from trainer.behaviour import HostBehaviour
from trainer.fingerprint import ComputeMismatch, compute_fingerprint
from verifier.adversaries.validators import ValidatorBehaviour
from veriloco.network import LocalNetwork, Roster


def test_nodes_of_the_pinned_profile_run_and_others_are_refused(tmp_path, dataset) -> None:
    spec = small_spec(phases={"min_hosts": 1, "min_validators": 1})
    pinned = spec.with_changes(verification={"compute_fingerprint": compute_fingerprint(spec)})
    net = LocalNetwork(pinned, tmp_path / "ok", Roster(hosts=[HostBehaviour()], validators=[ValidatorBehaviour()]),
                       dataset, validator_factory=ValidatorNode)
    net.run_epoch()
    assert net.ledger.epoch().epoch == 1 and net.ledger.report(0).hosts[0].outcome == "accepted"

    elsewhere = spec.with_changes(verification={"compute_fingerprint": "00" * 32})
    for roster in (Roster(hosts=[HostBehaviour()]), Roster(hosts=[], validators=[ValidatorBehaviour()])):
        root = tmp_path / f"refused-{len(roster.hosts)}"
        with pytest.raises(ComputeMismatch, match="pins"):
            LocalNetwork(elsewhere, root, roster, dataset, validator_factory=ValidatorNode)
        assert not root.exists() or not any(root.rglob("*.safetensors"))
