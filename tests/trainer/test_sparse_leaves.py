"""Sparse leaves: only every K-th leaf is stored, every leaf hash is committed, a missing leaf is
recomputed from the nearest stored one (bounded, counted, checked against the commitment), an
epoch killed mid-way resumes to the identical commitment, and retention prunes only closed epochs."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest
from suite_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from protocol.rules.merkle import verify_proof
from trainer.artifacts import ArtifactUnavailable, LocalArtifacts
from trainer.checkpoint import decode_checkpoint
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, run_epoch
from trainer.outer import GlobalState
from trainer.recompute import LeafRecomputer, RecomputeError, replayed_segments
from trainer.snapshot import SnapshotStats


@pytest.fixture(scope="module")
def sparse(tmp_path_factory, dataset):
    """Epoch 0 of an 8-segment spec trained with K = 4 (leaves 0, 4, 7, 8 stored), and the same
    epoch with every leaf stored."""
    spec = small_spec(train={"inner_steps": 16, "segment_steps": 2})
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    theta = GlobalState.initial(spec).params
    root, full = tmp_path_factory.mktemp("sparse"), tmp_path_factory.mktemp("full")
    stats = SnapshotStats()
    result = run_epoch(spec, dataset, ctx, theta, root, full_leaf_every=4, stats=stats)
    run_epoch(spec, dataset, ctx, theta, full)
    return spec, ctx, root, result, EpochStore(full, run_id, HOST), stats


def copy_of(root, tmp_path, ctx) -> EpochStore:
    shutil.copytree(root, tmp_path / "h")
    return EpochStore(tmp_path / "h", ctx.run_id, HOST)


def test_only_every_kth_leaf_is_stored_and_every_hash_is_committed(sparse) -> None:
    _, ctx, root, result, full, stats = sparse
    store = EpochStore(root, ctx.run_id, HOST)
    assert store.leaves_on_disk(0) == [0, 4, 7, 8] and full.leaves_on_disk(0) == list(range(9))
    assert store.read_record(0) == full.read_record(0)  # same commitment, leaf hashes and losses
    assert stats.leaves == 8 and stats.stored == 3 and stats.bytes_written > 0
    header, entries = store.read_progress(0)
    assert header is not None and header.full_leaf_every == 4 and sorted(entries) == list(range(1, 9))
    assert [entries[i][0] for i in range(1, 9)] == result.leaf_hashes[1:]


def test_a_missing_leaf_is_recomputed_checked_and_counted(sparse, dataset, tmp_path) -> None:
    spec, ctx, root, result, full, _ = sparse
    store = copy_of(root, tmp_path, ctx)
    recomputer = LeafRecomputer(spec, dataset, store)
    source = LocalArtifacts(store.root, ctx.run_id, HOST, recompute=recomputer.materialize)
    checkpoint_root = bytes.fromhex(result.commitment.checkpoint_root)
    for leaf in (5, 6):  # a challenge of segment 5 asks for leaves 5 and 6
        data = source.checkpoint(0, leaf)
        assert data == full.leaf_path(0, leaf).read_bytes()  # the very bytes an all-leaves host serves
        ckpt = decode_checkpoint(data, spec, leaf)
        assert verify_proof(ckpt.leaf_hash(), source.proof(0, leaf), checkpoint_root, 9)
    # Leaf 5 took one segment from stored leaf 4; leaf 6 one more from the recomputed leaf 5.
    assert (recomputer.stats.leaves, recomputer.stats.segments, recomputer.stats.steps) == (2, 2, 4)
    assert store.leaves_on_disk(0) == [0, 4, 5, 6, 7, 8]
    # Without a recomputer the leaf is unavailable; an uncommitted epoch cannot be recomputed.
    with pytest.raises(ArtifactUnavailable):
        LocalArtifacts(root, ctx.run_id, HOST).checkpoint(0, 5)
    with pytest.raises(RecomputeError, match="not committed"):
        recomputer.materialize(3, 5)


def test_recomputation_falls_back_to_a_lower_stored_leaf_and_refuses_without_one(sparse, dataset, tmp_path) -> None:
    spec, ctx, root, _, full, _ = sparse
    store = copy_of(root, tmp_path, ctx)
    store.leaf_path(0, 4).unlink()
    recomputer = LeafRecomputer(spec, dataset, store)
    assert recomputer.materialize(0, 5).leaf_hash() == full.read_leaf(spec, 0, 5).leaf_hash()
    assert recomputer.stats.segments == 5  # from leaf 0
    assert store.leaves_on_disk(0) == [0, 1, 2, 3, 4, 5, 7, 8]  # every leaf passed is kept
    for leaf in range(5):
        store.leaf_path(0, leaf).unlink()
    source = LocalArtifacts(store.root, ctx.run_id, HOST, recompute=recomputer.materialize)
    with pytest.raises(ArtifactUnavailable, match="cannot recompute"):
        source.checkpoint(0, 3)


def test_a_recomputation_that_misses_the_commitment_is_not_served(sparse, dataset, tmp_path) -> None:
    # A stored leaf swapped for another host's epoch's (here: the same epoch with other data) makes
    # every recomputed leaf differ from the committed hash: the host says unavailable, never serves it.
    spec, ctx, root, _, _, _ = sparse
    store = copy_of(root, tmp_path, ctx)
    other_ctx = EpochContext(ctx.run_id, 0, "other-host", ctx.prev_epoch_seed)
    run_epoch(spec, dataset, other_ctx, GlobalState.initial(spec).params, tmp_path / "o", full_leaf_every=4)
    shutil.copy(EpochStore(tmp_path / "o", ctx.run_id, "other-host").leaf_path(0, 4), store.leaf_path(0, 4))
    recomputer = LeafRecomputer(spec, dataset, store)
    with pytest.raises(RecomputeError, match="does not match the commitment"):
        recomputer.materialize(0, 5)


CHILD = """
import pathlib, sys
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, run_epoch
from trainer.outer import GlobalState
configure(threads=1)
spec = RunSpec.from_canonical(sys.argv[1])
ctx = EpochContext(bytes.fromhex(sys.argv[2]), 0, sys.argv[3], bytes.fromhex(sys.argv[4]))
dataset = Dataset.load(spec.data, pathlib.Path(sys.argv[5]))
run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, pathlib.Path(sys.argv[6]), full_leaf_every=3)
"""


def test_sigkill_with_sparse_leaves_resumes_to_the_identical_commitment(dataset, cache_dir, tmp_path, threads) -> None:
    spec = small_spec(train={"inner_steps": 120, "segment_steps": 4})
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    args = [sys.executable, "-c", CHILD, spec.canonical().decode(), run_id.hex(), HOST,
            ctx.prev_epoch_seed.hex(), str(cache_dir), str(tmp_path / "killed")]
    store = EpochStore(tmp_path / "killed", run_id, HOST)
    victim = subprocess.Popen(args)
    deadline = time.monotonic() + 120
    while not store.leaf_path(0, 6).exists():
        assert victim.poll() is None and time.monotonic() < deadline, "the training process ended early"
        time.sleep(0.005)
    time.sleep(0.05)  # somewhere after leaf 6, probably between stored leaves
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    assert not store.committed(0)
    on_disk = store.leaves_on_disk(0)
    assert on_disk == [i for i in range(on_disk[-1] + 1) if EpochStore.stored(spec, i, 3)]
    subprocess.run(args, check=True)
    threads(1)
    reference = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path / "clean")
    resumed = store.read_record(0)
    assert resumed.commitment == reference.commitment and resumed.leaf_hashes == reference.leaf_hashes
    assert store.leaves_on_disk(0) == [*range(0, 28, 3), 29, 30]


def test_retention_prunes_only_closed_epochs_beyond_the_kept_ones(tmp_path) -> None:
    store = EpochStore(tmp_path, bytes(32), HOST)
    for epoch in range(6):
        store.directory(epoch).mkdir(parents=True)
        (store.directory(epoch) / "leaf-0000.safetensors").write_bytes(b"x")
    # Epoch 1's windows are still open (e.g. a dispute): kept whatever its age.
    deleted = store.prune(keep_epochs=2, current=5, closed=lambda e: e != 1)
    assert deleted == [0, 2] and store.epochs_on_disk() == [1, 3, 4, 5]
    assert store.prune(keep_epochs=2, current=5, closed=lambda e: True) == [1]
    assert store.prune(keep_epochs=0, current=5, closed=lambda e: True) == [3, 4]
    assert store.epochs_on_disk() == [5]  # the current epoch is never pruned
    with pytest.raises(ValueError):
        store.prune(keep_epochs=-1, current=5, closed=lambda e: True)


def test_the_order_validators_ask_in_costs_nothing(sparse, dataset, tmp_path) -> None:
    """Issue 30: challenges on leaves 1, 2 and 3 of a run stored every 4th leaf. Asked highest
    first, the host replays from leaf 0 once, as far as leaf 3, keeping 1 and 2 on the way; the
    lower ones then cost nothing (keeping only the leaf asked for: 3 + 1 + 2 segments)."""
    spec, ctx, root, _, full, _ = sparse
    store = copy_of(root, tmp_path, ctx)
    recomputer = LeafRecomputer(spec, dataset, store)
    for leaf in (3, 1, 2):
        assert recomputer.materialize(0, leaf).leaf_hash() == full.read_leaf(spec, 0, leaf).leaf_hash()
    assert (recomputer.stats.segments, recomputer.stats.leaves) == (3, 3)
    assert store.leaves_on_disk(0) == [0, 1, 2, 3, 4, 7, 8]
    # What the count the benches use says of the same challenges (segments 1 and 2: leaves 1–3).
    assert replayed_segments(spec, [2, 1], 4) == 3
    assert replayed_segments(spec, [5, 7], 4) == 2  # leaves 5, 6; 7 and 8 are stored
    longer = spec.with_changes(train={"inner_steps": 32})  # S = 16
    assert replayed_segments(longer, [3, 4, 5, 6], 4) == 3 + 3  # leaves 3 and 5, 6, 7


def test_a_closed_epoch_stored_densely_is_thinned_to_k_and_a_thinned_leaf_recomputes(sparse, dataset,
                                                                                      tmp_path) -> None:
    """An epoch stored with every leaf while open keeps only K's leaves once thinned; a thinned
    leaf asked for again is recomputed to the very bytes it had."""
    spec, ctx, _, _, full, _ = sparse
    store = copy_of(full.root, tmp_path, ctx)
    before = {leaf: store.leaf_path(0, leaf).read_bytes() for leaf in (5, 6)}
    assert store.thin(spec, 0, 4) == [1, 2, 3, 5, 6]
    assert store.leaves_on_disk(0) == [0, 4, 7, 8]
    assert store.thin(spec, 0, 4) == []  # nothing left to thin
    other = copy_of(full.root, tmp_path / "trap", ctx)
    assert other.thin(spec, 0, 4, keep={2}) == [1, 3, 5, 6]  # a trap's end leaf stays
    uncommitted = copy_of(full.root, tmp_path / "uncommitted", ctx)
    uncommitted.record_path(0).unlink()  # trained, never committed: thinned the same way
    assert uncommitted.thin(spec, 0, 4) == [1, 2, 3, 5, 6]
    recomputer = LeafRecomputer(spec, dataset, store)
    source = LocalArtifacts(store.root, ctx.run_id, HOST, recompute=recomputer.materialize)
    assert {leaf: source.checkpoint(0, leaf) for leaf in (5, 6)} == before
    with pytest.raises(ValueError, match=">= 1"):
        store.thin(spec, 0, 0)
