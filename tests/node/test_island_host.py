"""An island host in a network (issue 27): it traps like a one-process host, opens its trap, and is
accepted.

Rank 0 of a two-rank island (FSDP2 over gloo) runs the whole network of the test in its process —
the embedded chain, the island host's node behind its real HTTP server with
:class:`trainer.island.IslandBehaviour`, two one-process hosts and two validators — while rank 1
follows rank 0's orders. Every host traps one segment in the epoch (``trap_probability`` 1, drawn
from each host's own secret by ``HostNode.trap_draw``) and every segment is challenged.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from http_network import HttpNetwork

from protocol.rules.spec import RunSpec
from protocol.views import EpochReport
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.island import IslandBehaviour, follow_island, join_island
from trainer.presets import tiny

pytestmark = pytest.mark.slow  # a two-process island and a whole epoch over HTTP


def island_spec() -> RunSpec:
    return tiny("island-host").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"challenges_k": 3, "validators_r": 1, "trap_probability": "1"},
        phases={"min_hosts": 3, "min_validators": 2},
    )


def _rank(rank: int, port: int, root: Path, cache_dir: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    group, where = join_island("cpu", threads=1)
    spec = island_spec()
    dataset = Dataset.load(spec.data, cache_dir)
    try:
        if rank > 0:
            follow_island(spec, dataset, root / "rank-1", group, where)
            return
        island = IslandBehaviour(spec, group, where)
        net = HttpNetwork(spec, root, dataset, [island, HostBehaviour(), HostBehaviour()], validators=2)
        try:
            report = net.run_epoch()
            (root / "report.json").write_text(report.model_dump_json())
            (root / "facts.json").write_text(json.dumps({
                "island": net.host(0).node.address, "funds_conserved": net.total_funds() == net.initial_funds}))
        finally:
            net.close()
            island.stop()
    finally:
        dist.destroy_process_group()


def test_an_island_host_traps_opens_its_trap_and_is_accepted(tmp_path, cache_dir) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, tmp_path, cache_dir), nprocs=2, join=True)
    report = EpochReport.model_validate_json((tmp_path / "report.json").read_text())
    facts = json.loads((tmp_path / "facts.json").read_text())
    island = next(h for h in report.hosts if h.address == facts["island"])
    # The island set the trap its node drew from the host's secret, and opened it.
    assert island.outcome == "accepted" and island.traps is not None and len(island.traps) == 1
    assert all(h.outcome == "accepted" for h in report.hosts)
    assert all(int(m.slashed) == 0 for m in [*report.hosts, *report.validators])
    mine = [c for c in report.challenges if c.host == island.address]
    trapped = [c for c in mine if c.trap]
    # Its trap segment was challenged: the replay failed inside the trap window, a valid trap; the
    # other segments passed.
    assert [c.segment for c in trapped] == island.traps and all(c.outcome == "fail" for c in trapped)
    assert all(c.outcome == "pass" for c in mine if not c.trap)
    assert report.agreed and facts["funds_conserved"]
