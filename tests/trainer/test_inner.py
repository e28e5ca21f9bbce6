"""The inner loop: checkpoints, Merkle root, loss digest and Δ hash of an epoch; resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from suite_env import HOST

from protocol.rules.beacon import genesis_seed
from protocol.rules.losses import loss_digest, loss_micro, train_loss_micro
from protocol.rules.merkle import merkle_root
from trainer.checkpoint import CheckpointError
from trainer.delta import delta_hash
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, run_epoch, start_checkpoint
from trainer.outer import GlobalState
from trainer.presets import tiny


def test_epoch_commits_to_its_files(spec, dataset, ctx, tmp_path) -> None:
    theta = GlobalState.initial(spec).params
    result = run_epoch(spec, dataset, ctx, theta, tmp_path)
    store = EpochStore(tmp_path, ctx.run_id, ctx.host)
    leaves = store.read_leaves(spec, 0)
    assert leaves[0].leaf_hash() == start_checkpoint(spec, theta, 0).leaf_hash()
    assert [leaf.leaf_hash() for leaf in leaves] == result.leaf_hashes
    c = result.commitment
    assert c.checkpoint_root == merkle_root(result.leaf_hashes).hex() and c.segments == 4 and c.epoch == 0
    losses = [x for leaf in leaves[1:] for x in leaf.losses.tolist()]
    assert losses == result.losses and len(losses) == spec.train.inner_steps
    assert c.loss_digest == loss_digest([loss_micro(x) for x in losses])
    assert c.train_loss_micro == train_loss_micro([loss_micro(x) for x in losses], spec.train.segment_steps)
    assert c.delta_hash == delta_hash(store.read_delta(spec, 0)).hex()
    assert store.read_record(0).commitment == c
    for i in range(spec.train.segments):  # every segment replays to the committed leaf, bit for bit
        assert replay_segment(spec, dataset, ctx, leaves[i]).leaf_hash() == result.leaf_hashes[i + 1]
    assert result.losses[-1] < result.losses[0]
    with pytest.raises(ValueError, match="starts no segment"):
        replay_segment(spec, dataset, ctx, leaves[-1])


def test_resume_in_process_and_refusals(spec, dataset, ctx, tmp_path) -> None:
    theta = GlobalState.initial(spec).params
    first = run_epoch(spec, dataset, ctx, theta, tmp_path)
    store = EpochStore(tmp_path, ctx.run_id, ctx.host)
    for path in (store.leaf_path(0, 3), store.leaf_path(0, 4), store.record_path(0), store.delta_path(0)):
        path.unlink()
    partial = store.leaf_path(0, 3).with_name(f".{store.leaf_path(0, 3).name}.123.tmp")  # write_atomic's name
    partial.write_bytes(b"partial")
    again = run_epoch(spec, dataset, ctx, theta, tmp_path)
    assert again.commitment == first.commitment
    assert not partial.exists() and store.read_record(0).commitment == first.commitment
    assert run_epoch(spec, dataset, ctx, theta, tmp_path).commitment == first.commitment  # finished: idempotent

    other = {n: p + 1 for n, p in theta.items()}
    with pytest.raises(CheckpointError, match="not the start state"):
        run_epoch(spec, dataset, ctx, other, tmp_path)
    with pytest.raises(CheckpointError, match="not the start state"):
        run_epoch(spec, dataset, ctx, theta, tmp_path, micro_batches=2)
    leaf2 = store.leaf_path(0, 2)
    leaf2.write_bytes(leaf2.read_bytes()[:-4])
    with pytest.raises(CheckpointError, match="truncated"):
        run_epoch(spec, dataset, ctx, theta, tmp_path)


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
run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, pathlib.Path(sys.argv[6]))
"""


def test_sigkill_mid_epoch_then_resume_gives_the_identical_commitment(dataset, cache_dir, tmp_path, threads) -> None:
    spec = tiny().with_changes(train={"inner_steps": 240, "segment_steps": 12})
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    args = [sys.executable, "-c", CHILD, spec.canonical().decode(), run_id.hex(), HOST,
            ctx.prev_epoch_seed.hex(), str(cache_dir), str(tmp_path / "killed")]
    store = EpochStore(tmp_path / "killed", ctx.run_id, ctx.host)

    victim = subprocess.Popen(args)
    deadline = time.monotonic() + 120
    while not store.leaf_path(0, 2).exists():
        assert victim.poll() is None and time.monotonic() < deadline, "the training process ended early"
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    survivors = [store.leaf_path(0, i) for i in range(spec.train.segments + 1) if store.leaf_path(0, i).exists()]
    assert survivors == [store.leaf_path(0, i) for i in range(len(survivors))]  # no gap
    assert 3 <= len(survivors) < 21 and not store.committed(0)
    stamps = {p.name: os.stat(p).st_mtime_ns for p in survivors}

    subprocess.run(args, check=True)  # the restarted host picks up where it was killed
    assert {p.name: os.stat(p).st_mtime_ns for p in survivors} == stamps  # resumed, not redone

    threads(1)  # the uninterrupted reference, in this process, at the children's thread count
    reference = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path / "clean")
    resumed = store.read_record(0)
    assert resumed.commitment == reference.commitment
    assert resumed.leaf_hashes == reference.leaf_hashes
    assert torch.equal(store.read_leaf(spec, 0, 20).losses,
                       torch.tensor(reference.losses[-12:]))
