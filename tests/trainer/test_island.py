"""A 2-process island (gloo) commits one model; one process replays its segments with accumulation."""

from __future__ import annotations

import pytest

from protocol.rules.merkle import merkle_root
from trainer.epoch_store import EpochStore
from trainer.inner import replay_segment
from trainer.island import spawn_island
from trainer.outer import GlobalState


@pytest.mark.slow
def test_two_process_island_replays_in_one_process(spec, dataset, ctx, cache_dir, tmp_path, threads) -> None:
    start = GlobalState.initial(spec)
    record = spawn_island(2, spec, ctx, start, tmp_path, threads=1, cache_dir=cache_dir)
    assert record.commitment.checkpoint_root == merkle_root(record.leaf_hashes).hex()
    leaves = EpochStore(tmp_path, ctx.run_id, ctx.host).read_leaves(spec, 0)
    assert all(leaf.micro_batches == 2 for leaf in leaves)
    assert [leaf.leaf_hash() for leaf in leaves] == record.leaf_hashes

    # The accumulated replay adds the same two gradients as the island's all-reduce, and the step is
    # thread-invariant: bit for bit at the ranks' thread count and at any other.
    for n in (1, 2):
        threads(n)
        for i in range(spec.train.segments):
            replayed = replay_segment(spec, dataset, ctx, leaves[i])
            assert replayed.leaf_hash() == record.leaf_hashes[i + 1], (n, i)
