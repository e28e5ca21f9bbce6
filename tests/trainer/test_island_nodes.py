"""An island over two machines: two ``torchrun`` launches on this machine, as ``veriloco host run
--nnodes 2 --node-rank R --master-addr A --master-port P`` builds them, form one gloo group and
commit what one process commits; the command line refuses what does not place a machine."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from trainer.epoch_store import EpochStore
from trainer.inner import run_epoch
from trainer.outer import GlobalState
from veriloco.errors import CommandError
from veriloco.island_launch import IslandNodes, torchrun_args

HERE = Path(__file__).resolve().parent


def test_the_nodes_of_an_island_are_checked() -> None:
    assert IslandNodes.of(1, 0, None, 29500) == IslandNodes()
    assert torchrun_args(2, IslandNodes(), ["x.py"], [])[3:] == ["--standalone", "--nproc-per-node=2", "x.py"]
    with pytest.raises(CommandError, match="master-addr"):
        IslandNodes.of(2, 0, None, 29500)
    with pytest.raises(CommandError, match="node rank 2 of 2"):
        IslandNodes.of(2, 2, "10.0.0.1", 29500)
    with pytest.raises(CommandError, match="island nodes"):
        IslandNodes.of(2, 1, "node0; rm -rf /", 29500)


@pytest.mark.slow
def test_two_launches_form_one_island_that_commits_what_one_process_commits(spec, dataset, ctx, cache_dir,
                                                                             tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path / "island"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE.parent)]),
           "OMP_NUM_THREADS": "1"}
    launches = [subprocess.Popen(torchrun_args(1, IslandNodes(nnodes=2, node_rank=r, master_addr="127.0.0.1",
                                                              master_port=port),
                                               [str(HERE / "island_node.py")], [str(root), str(cache_dir)]),
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for r in (0, 1)]
    for p in launches:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out
    record = EpochStore(root, ctx.run_id, ctx.host).read_record(0)
    one = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path / "one", micro_batches=2,
                    full_leaf_every=2)
    assert one is not None and one.commitment == record.commitment and one.leaf_hashes == record.leaf_hashes
