"""The epoch store: one format for the host's loop, its artifact source and every adversary; a recommit
changes exactly what it is given; a damaged or foreign record is refused, never served."""

from __future__ import annotations

import json
import shutil

import pytest
from suite_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from protocol.rules.losses import loss_digest, loss_micro
from trainer.artifacts import ArtifactUnavailable, LocalArtifacts
from trainer.delta import decode_delta, delta_hash
from trainer.epoch_store import MAX_RECORD_BYTES, EpochStore
from trainer.inner import EpochContext, epoch_delta, run_epoch
from trainer.outer import GlobalState


@pytest.fixture(scope="module")
def honest(tmp_path_factory, dataset):
    """An honest epoch 0 (tests copy its root before changing anything)."""
    spec = small_spec()
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    root = tmp_path_factory.mktemp("honest")
    result = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, root)
    return spec, root, result


def copy_of(honest, tmp_path) -> EpochStore:
    spec, root, _ = honest
    shutil.copytree(root, tmp_path / "copy")
    return EpochStore(tmp_path / "copy", spec.run_id(), HOST)


def test_writing_a_whole_epoch_ends_in_the_files_of_the_host_loop(honest, tmp_path) -> None:
    # The two ways an epoch gets written (leaf by leaf while training; all leaves at once, as an
    # adversary does) give the same record and the same leaf files.
    spec, root, result = honest
    trained = EpochStore(root, spec.run_id(), HOST)
    leaves = trained.read_leaves(spec, 0)
    written = EpochStore(tmp_path, spec.run_id(), HOST)
    record = written.write_epoch(spec, 0, leaves, epoch_delta(spec, leaves[0].state, leaves[-1].state))
    assert record == trained.read_record(0) == written.read_record(0)
    assert record.commitment == result.commitment and record.leaf_hashes == result.leaf_hashes
    for i in range(spec.train.segments + 1):
        assert written.leaf_path(0, i).read_bytes() == trained.leaf_path(0, i).read_bytes()
    assert delta_hash(written.read_delta(spec, 0)).hex() == result.commitment.delta_hash


def test_recommit_with_another_delta_changes_only_the_delta(honest, tmp_path) -> None:
    spec, _, result = honest
    store = copy_of(honest, tmp_path)
    leaves_before = [store.leaf_path(0, i).read_bytes() for i in range(spec.train.segments + 1)]
    leaves = store.read_leaves(spec, 0)
    forged = epoch_delta(spec, leaves[-1].state, leaves[0].state)  # −Δ, a valid quantized payload
    record = store.recommit(spec, 0, payload=forged)
    old, new = result.commitment, record.commitment
    assert new.delta_hash == delta_hash(forged).hex() != old.delta_hash
    assert new.model_copy(update={"delta_hash": old.delta_hash}) == old
    assert record.leaf_hashes == result.leaf_hashes and store.read_record(0) == record
    assert [store.leaf_path(0, i).read_bytes() for i in range(spec.train.segments + 1)] == leaves_before
    served = LocalArtifacts(store.root, spec.run_id(), HOST)  # what peers now read agrees with the new commitment
    assert delta_hash(decode_delta(served.delta(0), spec)).hex() == new.delta_hash


def test_recommit_with_other_losses_changes_only_the_losses(honest, tmp_path) -> None:
    spec, _, result = honest
    store = copy_of(honest, tmp_path)
    losses = [x * 0.5 for x in result.losses]
    record = store.recommit(spec, 0, losses=losses)
    assert record.losses_micro == [loss_micro(x) for x in losses]
    old, new = result.commitment, record.commitment
    assert new.loss_digest == loss_digest(record.losses_micro) != old.loss_digest
    assert new.train_loss_micro == loss_micro(sum(losses[-4:]) / 4) < old.train_loss_micro
    assert new.model_copy(update={"loss_digest": old.loss_digest, "train_loss_micro": old.train_loss_micro}) == old
    assert LocalArtifacts(store.root, spec.run_id(), HOST).losses(0) == record.losses_micro
    assert store.recommit(spec, 0) == record  # nothing given: the record is rewritten as it is


def test_counts_that_are_not_an_epoch_are_refused_before_anything_is_written(honest, tmp_path) -> None:
    spec, _, result = honest
    store = EpochStore(tmp_path, spec.run_id(), HOST)
    for hashes in (result.leaf_hashes[:1], [*result.leaf_hashes, result.leaf_hashes[-1]]):  # 0 or S + 1 segments
        with pytest.raises(ValueError, match="leaves"):
            store.commit(spec, 0, hashes, result.losses, result.payload)
    with pytest.raises(ValueError, match="losses"):
        store.commit(spec, 0, result.leaf_hashes, result.losses[:-1], result.payload)
    with pytest.raises(ValueError, match="3 segments have 12 losses"):  # a partial epoch's count
        store.commit(spec, 0, result.leaf_hashes[:-1], result.losses, result.payload)
    with pytest.raises(ValueError, match="leaves"):
        store.write_epoch(spec, 0, [], result.payload)
    assert not store.committed(0) and not store.delta_path(0).exists()
    with pytest.raises(FileNotFoundError):
        store.recommit(spec, 0, losses=result.losses)  # nothing committed to rewrite
    # A partial epoch (issue 30): the first s + 1 leaves and s · c losses commit to s segments.
    c = spec.train.segment_steps
    partial = store.commit(spec, 0, result.leaf_hashes[:3], result.losses[:2 * c], result.payload)
    assert partial.commitment.segments == 2 and store.read_record(0) == partial


def _edit(store: EpochStore, change) -> None:
    data = json.loads(store.record_path(0).read_text())
    change(data)
    store.record_path(0).write_text(json.dumps(data))


DAMAGE = {
    "not json": lambda store: store.record_path(0).write_text("{\"commitment\": "),
    "a missing field": lambda store: _edit(store, lambda d: d.pop("losses_micro")),
    "an unknown field": lambda store: _edit(store, lambda d: d.update(extra=1)),
    "losses that do not hash to the digest": lambda store: _edit(
        store, lambda d: d["losses_micro"].__setitem__(0, d["losses_micro"][0] + 1)),
    "a leaf hash too few": lambda store: _edit(store, lambda d: d["leaf_hashes"].pop()),
    "a leaf hash that is not hex": lambda store: _edit(store, lambda d: d["leaf_hashes"].__setitem__(0, "zz" * 32)),
    "too large": lambda store: store.record_path(0).write_bytes(b" " * (MAX_RECORD_BYTES + 1)),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_record_is_refused_and_not_served(honest, tmp_path, case) -> None:
    spec, _, _ = honest
    store = copy_of(honest, tmp_path)
    DAMAGE[case](store)
    with pytest.raises(ValueError):
        store.read_record(0)
    served = LocalArtifacts(store.root, spec.run_id(), HOST)
    for call in (lambda: served.losses(0), lambda: served.proof(0, 1)):
        with pytest.raises(ArtifactUnavailable, match="unreadable"):
            call()


def test_names_that_are_not_an_epoch_leaf_or_host_are_refused(honest, tmp_path) -> None:
    spec, root, _ = honest
    for host in ("", ".", "..", "../other", "a/b", "a\\b"):
        with pytest.raises(ValueError):
            EpochStore(tmp_path, spec.run_id(), host)
    store = EpochStore(root, spec.run_id(), HOST)
    for call in (lambda: store.directory(-1), lambda: store.leaf_path(0, -1), lambda: store.read_record(-1)):
        with pytest.raises(ValueError):
            call()
    assert not store.committed(1)
    with pytest.raises(FileNotFoundError):
        store.read_record(1)
    served = LocalArtifacts(root, spec.run_id(), HOST)
    for call in (lambda: served.checkpoint(-1, 0), lambda: served.delta(-1), lambda: served.losses(-1)):
        with pytest.raises(ArtifactUnavailable):
            call()
    assert served.file("checkpoint", -1, 0) is None and served.file("delta", -1) is None
