"""A run with a ``quantization.schedule`` deploys (the contract does not parse that section), but the
nodes refuse it with why: the trainer and the replay follow the schedule, the host's residual
carry, aggregation and served sizes do not yet (README, "Not yet")."""

import pytest

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from node.host import HostNode
from node.validator import ValidatorNode
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.presets import tiny


def no_peers(endpoint: str) -> ArtifactSource:
    raise ArtifactUnavailable(f"no peers here: {endpoint}")


def test_nodes_refuse_a_scheduled_run_with_why(tmp_path, dataset) -> None:
    spec = tiny().with_changes(quantization={"scheme": "int8", "block_size": 64, "schedule": [
        {"from_epoch": 1, "scheme": "topk2", "block_size": 1024}]})
    operator, host, validator = (PrivateKey(bytes([b]) * 32) for b in (0x41, 0x42, 0x43))
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, host, validator)})
    ledger = deploy_embedded(chain, operator, spec, "00" * 32, operator.address())
    with pytest.raises(ValueError, match=r"quantization\.schedule is not supported by the nodes"):
        HostNode(ledger, host, spec, dataset, tmp_path, no_peers)
    with pytest.raises(ValueError, match=r"quantization\.schedule is not supported by the nodes"):
        ValidatorNode(ledger, validator, spec, dataset, tmp_path, no_peers)
