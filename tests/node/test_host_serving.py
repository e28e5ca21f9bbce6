"""A host serves a challenged leaf it did not store in full, whoever asks and however it is asked.

Hosts store only every K-th leaf (``full_leaf_every``) and recompute the others on request. The
HTTP server asks the node for what to serve to one signed reader (``HostNode.source_for``); that
path once built its source without the recomputation, so every daemon with K > 1 answered 404 for
most challenged leaves and honest hosts ended ``excluded``.
"""

from __future__ import annotations

import pytest
from suite_env import VALIDATOR

from protocol.rules.merkle import verify_proof
from protocol.rules.spec import RunSpec
from trainer.behaviour import HostBehaviour
from trainer.checkpoint import decode_checkpoint
from trainer.epoch_store import EpochStore
from trainer.presets import tiny
from veriloco.network import LocalNetwork, Roster


def run_spec() -> RunSpec:
    return tiny("serving").with_changes(
        train={"inner_steps": 16, "segment_steps": 2, "batch_size": 8},
        verification={"enabled": False},
        phases={"min_hosts": 1, "min_validators": 0},
    )


@pytest.mark.parametrize("how", ["source", "source_for"])
def test_a_leaf_not_stored_is_recomputed_for_every_reader(tmp_path, dataset, how) -> None:
    spec = run_spec()
    net = LocalNetwork(spec, tmp_path, Roster(hosts=[HostBehaviour()]), dataset, full_leaf_every=4,
                       live_leaf_every=4)  # stored at K while open, so some leaves need a recomputation
    net.run_epoch()
    host = net.hosts[0]
    store = EpochStore(host.root, spec.run_id(), host.address)
    record = store.read_record(0)
    missing = [leaf for leaf in range(len(record.leaf_hashes)) if not store.leaf_path(0, leaf).exists()]
    assert missing, "with K = 4 some leaves are not stored in full"
    source = host.source if how == "source" else host.source_for(VALIDATOR)
    for leaf in missing[:2]:
        ckpt = decode_checkpoint(source.checkpoint(0, leaf), spec, leaf)
        assert ckpt.leaf_hash() == record.leaf_hashes[leaf]
        assert verify_proof(ckpt.leaf_hash(), source.proof(0, leaf), bytes.fromhex(record.commitment.checkpoint_root),
                            len(record.leaf_hashes))
