"""What a host refuses in a pipelined run (docs/training.md, "Pipelined epochs")."""

import pytest

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from node.host import HostNode
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.presets import tiny


def no_peers(endpoint: str) -> ArtifactSource:
    raise ArtifactUnavailable(f"no peers here: {endpoint}")


def test_a_pipelined_topk2_run_is_refused_with_why(tmp_path, dataset) -> None:
    spec = tiny().with_changes(phases={"pipelined": True}, quantization={"scheme": "topk2", "block_size": 1024})
    operator, host = PrivateKey(b"\x31" * 32), PrivateKey(b"\x32" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, host)})
    ledger = deploy_embedded(chain, operator, spec, "00" * 32, operator.address())
    with pytest.raises(ValueError, match="pipelined run cannot use topk2"):
        HostNode(ledger, host, spec, dataset, tmp_path, no_peers)
    # The same spec synchronous is a host's to run.
    sync = spec.with_changes(phases={"pipelined": False})
    assert HostNode(ledger, host, sync, dataset, tmp_path, no_peers).spec.phases.pipelined is False
