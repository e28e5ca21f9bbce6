"""One machine's part of a host island under ``torchrun`` (the target ``tests/trainer/test_island_nodes.py``
gives the launch that ``veriloco host run --nnodes`` builds, in place of the daemon, which needs a chain):
rank 0 trains epoch 0 of the test spec through :class:`trainer.island.IslandBehaviour` and commits
it under ``ROOT``; every other rank follows its orders.

    python island_node.py ROOT CACHE_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist
from suite_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from trainer.behaviour import HostEpoch
from trainer.data import Dataset
from trainer.island import IslandBehaviour, follow_island, join_island
from trainer.outer import GlobalState


def main(root: Path, cache_dir: Path) -> None:
    spec = small_spec()
    dataset = Dataset.load(spec.data, cache_dir)
    group, where = join_island("cpu", threads=1)
    try:
        if dist.get_rank(group) > 0:
            follow_island(spec, dataset, root, group, where)
            return
        behaviour = IslandBehaviour(spec, group, where)
        run_id = spec.run_id()
        ctx = HostEpoch(run_id, 0, HOST, genesis_seed(run_id), full_leaf_every=2)
        behaviour.train_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, root)
        behaviour.stop()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
