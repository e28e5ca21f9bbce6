"""LocalArtifacts serves exactly what the host's epoch committed, and refuses what it does not have."""

import pytest
from suite_env import HOST

from protocol.rules.losses import loss_digest
from protocol.rules.merkle import verify_proof
from trainer.artifacts import ArtifactUnavailable, LocalArtifacts, global_path
from trainer.checkpoint import decode_checkpoint
from trainer.delta import decode_delta, delta_hash
from trainer.inner import EpochContext, run_epoch
from trainer.outer import GlobalState


@pytest.fixture(scope="module")
def served(tmp_path_factory, spec, dataset):
    root = tmp_path_factory.mktemp("host")
    ctx = EpochContext(run_id=spec.run_id(), epoch=0, host=HOST, prev_epoch_seed=bytes(32))
    result = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, root)
    return LocalArtifacts(root, spec.run_id(), HOST), result


def test_serves_committed_leaves_with_valid_proofs(served, spec) -> None:
    store, result = served
    root = bytes.fromhex(result.commitment.checkpoint_root)
    for leaf in range(spec.train.segments + 1):
        ckpt = decode_checkpoint(store.checkpoint(0, leaf), spec, leaf)
        assert verify_proof(ckpt.leaf_hash(), store.proof(0, leaf), root, spec.train.segments + 1)


def test_serves_delta_and_losses_matching_the_commitment(served, spec) -> None:
    store, result = served
    assert delta_hash(decode_delta(store.delta(0), spec)).hex() == result.commitment.delta_hash
    assert loss_digest(store.losses(0)) == result.commitment.loss_digest


def test_missing_things_are_unavailable(served, spec) -> None:
    store, _ = served
    for call in (lambda: store.checkpoint(1, 0), lambda: store.checkpoint(0, 99), lambda: store.proof(0, 99),
                 lambda: store.delta(5), lambda: store.losses(5), lambda: store.global_state("ab" * 32),
                 lambda: store.global_state("../../etc/passwd"), lambda: store.checkpoint(0, -1)):
        with pytest.raises(ArtifactUnavailable):
            call()


def test_global_state_by_hash(served, spec) -> None:
    store, _ = served
    state = GlobalState.initial(spec)
    path = global_path(store.root, store.run_id, state.hash().hex())
    path.parent.mkdir(parents=True, exist_ok=True)
    state.save(path)
    assert store.global_state(state.hash().hex()) == path.read_bytes()
