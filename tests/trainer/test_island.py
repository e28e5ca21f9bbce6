"""Islands (torchrun-style ranks, FSDP2 over gloo) commit the leaves one process commits; one process
replays them."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from suite_env import HOST

from protocol.rules.beacon import genesis_seed
from protocol.rules.merkle import merkle_root
from protocol.rules.spec import RunSpec
from trainer.behaviour import HostEpoch
from trainer.data import Dataset
from trainer.epoch_store import EpochStore
from trainer.inner import Interrupted, replay_segment, run_epoch
from trainer.island import IslandBehaviour, follow_island, island_device, join_island
from trainer.outer import GlobalState


def test_island_rank_takes_its_own_gpu() -> None:
    with pytest.raises(ValueError, match="cuda"):
        island_device("cuda:1")
    assert island_device("cpu") == torch.device("cpu")


def _host_rank(rank: int, world: int, port: int, spec_json: bytes, root: Path, cache_dir: Path) -> None:
    # One rank of a host's island as `veriloco host run --nproc-per-node` runs it, with torchrun's
    # environment set by hand: rank 0 trains through IslandBehaviour (stopped once at step 6, as a
    # daemon asked to stop is, then resumed), the other ranks follow its orders until it says stop.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    group, where = join_island("cpu", threads=1)
    spec = RunSpec.from_canonical(spec_json)
    dataset = Dataset.load(spec.data, cache_dir)
    try:
        if rank > 0:
            assert follow_island(spec, dataset, root, group, where) == 1  # the stopped try does not count
            return
        behaviour = IslandBehaviour(spec, group, where)
        run_id = spec.run_id()
        ctx = HostEpoch(run_id, 0, HOST, genesis_seed(run_id), full_leaf_every=2)

        def stop_at_6(done: int, loss: float) -> None:
            if done == 6:
                raise Interrupted("asked to stop")

        with pytest.raises(Interrupted):
            behaviour.train_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, root, on_step=stop_at_6)
        behaviour.train_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, root)
        behaviour.stop()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_host_island_commits_what_one_process_commits(spec, dataset, ctx, cache_dir, tmp_path, threads) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    island_root, single_root = tmp_path / "island", tmp_path / "one"
    mp.spawn(_host_rank, args=(2, port, spec.canonical(), island_root, cache_dir), nprocs=2, join=True)
    island = EpochStore(island_root, ctx.run_id, ctx.host)
    record = island.read_record(0)
    assert record.commitment.checkpoint_root == merkle_root(record.leaf_hashes).hex()

    # One process accumulating the same two micro-batches a step: the same root, Δ and losses,
    # although the island was stopped at step 6 and resumed from its last stored leaf.
    threads(1)
    single = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, single_root, micro_batches=2,
                       full_leaf_every=2)
    assert single is not None
    assert single.commitment == record.commitment
    assert single.leaf_hashes == record.leaf_hashes

    # The leaves the island wrote from its shards are the one process's files, byte for byte, and
    # only the stored ones (K = 2: leaf 0, the even ones, the last two) are on disk.
    one = EpochStore(single_root, ctx.run_id, ctx.host)
    assert island.leaves_on_disk(0) == one.leaves_on_disk(0) == [0, 2, 3, 4]
    for leaf in island.leaves_on_disk(0):
        assert island.leaf_path(0, leaf).read_bytes() == one.leaf_path(0, leaf).read_bytes(), leaf
        assert island.read_leaf(spec, 0, leaf).micro_batches == 2

    # A validator replays each stored leaf's segment in one process, at 1 and 2 threads, and gets
    # the committed leaf bit for bit.
    for n in (1, 2):
        threads(n)
        for i in (0, 2, 3):
            replayed = replay_segment(spec, dataset, ctx, island.read_leaf(spec, 0, i))
            assert replayed.leaf_hash() == record.leaf_hashes[i + 1], (n, i)


def _nccl_rank(rank: int, port: int, spec_json: bytes, cache_dir: Path, out: Path) -> None:
    # One GPU a rank, NCCL: three steps of the sharded model, the state gathered whole on rank 0.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    group, where = join_island("cuda", threads=1)
    try:
        spec = RunSpec.from_canonical(spec_json)
        out.with_name(f"{out.name}.losses-{rank}").write_text(repr(_three_steps(spec, cache_dir, where, group)))
    finally:
        dist.destroy_process_group()


def _three_steps(spec: RunSpec, cache_dir: Path, device: torch.device,
                 group: dist.ProcessGroup | None) -> tuple[list[float], str]:
    from trainer.checkpoint import Checkpoint
    from trainer.step import Stepper, TrainState, epoch_rng_key, rank_rows

    dataset = Dataset.load(spec.data, cache_dir)
    run_id = spec.run_id()
    stepper = Stepper(spec, group=group, device=device)
    stepper.load(TrainState.fresh(GlobalState.initial(spec).params, epoch_rng_key(spec.train.seed, 0)))
    rows = rank_rows(spec.train.batch_size, stepper.rank, stepper.world)
    losses = []
    for t in range(3):
        x, y = dataset.batch(run_id, genesis_seed(run_id), HOST, t, spec.train.batch_size)
        losses.append(stepper.step(x[rows], y[rows], 2))
    state = stepper.export()
    return losses, Checkpoint(state, torch.tensor(losses), 2).leaf_hash().hex()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="an NCCL island needs 2 GPUs; this machine has fewer")
def test_nccl_island_replays_in_one_gpu_process(spec, cache_dir, tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "nccl"
    mp.spawn(_nccl_rank, args=(port, spec.canonical(), cache_dir, out), nprocs=2, join=True)
    island = [out.with_name(f"nccl.losses-{r}").read_text() for r in (0, 1)]
    assert island[0] == island[1]  # every rank reports the same losses and the same gathered state
    assert island[0] == repr(_three_steps(spec, cache_dir, torch.device("cuda:0"), None))
