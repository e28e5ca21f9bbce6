"""A pipelined run (``phases.pipelined``) with an island host: rank 0 of a two-rank island (FSDP2
over gloo, CPU) trains epoch e + 1 on the host's training thread while e settles, and its orders
reach rank 1 from that thread.

Rank 0 runs the whole network of the test in its process (embedded chain, the island host with
:class:`trainer.island.IslandBehaviour`, a sign-flipping one-process cheater and two validators),
as ``tests/node/test_island_host.py`` does; rank 1 follows rank 0's orders. The cheater's Δ enters
each optimistic start, so the settled model must be recomputed from ``settled_start`` (as in
``tests/e2e/test_pipelined_network.py``)."""

from __future__ import annotations

import json
import os
import socket
from concurrent.futures import wait
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from node.validator import ValidatorNode
from protocol.tensors.aggregation import aggregate
from trainer.data import Dataset
from trainer.island import IslandBehaviour, follow_island, join_island
from trainer.outer import outer_step
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow  # a two-process island and two pipelined epochs

EPOCHS = 2


def _spec():
    return simulation_spec(tiny("pipelined-island").with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}), validators=2, hosts=2,
    ).with_changes(phases={"pipelined": True})


def _network(root: Path, dataset: Dataset, island: IslandBehaviour) -> dict:
    """Rank 0: run the network for :data:`EPOCHS` epochs; what the test checks, as JSON."""
    spec = _spec()
    roster = Roster(hosts=[island, host_behaviour("sign_flip")],
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    net = LocalNetwork(spec, root / "net", roster, dataset, validator_factory=ValidatorNode)
    try:
        reports = [net.run_epoch(max_rounds=300) for _ in range(EPOCHS)]
        host = net.hosts[0]
        settled = []
        for e in range(EPOCHS):
            info = net.ledger.epoch(e)
            deltas, unserved, segments = host._accepted_deltas(e, host.globals.get(info.model_hash))
            step = aggregate(spec.aggregation, deltas, {a: segments[a] for a in deltas})
            start = info.settled_start or info.model_hash  # epoch 0 opens from θ_0: nothing to settle
            settled.append({"settled_start": info.settled_start, "model_hash": info.model_hash,
                            "start_model_hash": info.start_model_hash, "next_model_hash": info.next_model_hash,
                            "recomputed": outer_step(host.globals.get(start), step, spec.outer).hash().hex(),
                            "aggregated": sorted(deltas), "unserved": sorted(unserved)})
        return {"island": host.address, "cheater": net.hosts[1].address,
                "reports": [r.model_dump(mode="json") for r in reports], "settled": settled,
                "trainings": [[t.epoch, t.settling] for t in host.trainings],
                "funds_conserved": net.total_funds() == net.initial_funds}
    finally:
        job = net.hosts[0].training  # epoch 2's, under way: let it stop before the island does
        for node in net.nodes:
            node.close()
        if job is not None:
            wait([job], timeout=600)


def _rank(rank: int, port: int, root: Path, cache_dir: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    group, where = join_island("cpu", threads=1)
    spec = _spec()
    dataset = Dataset.load(spec.data, cache_dir)
    try:
        if rank > 0:
            (root / "followed.json").write_text(json.dumps(follow_island(spec, dataset, root / "rank-1", group,
                                                                         where)))
            return
        island = IslandBehaviour(spec, group, where)
        try:
            (root / "facts.json").write_text(json.dumps(_network(root, dataset, island)))
        finally:
            island.stop()
    finally:
        dist.destroy_process_group()


def test_a_pipelined_island_host_is_accepted_in_both_epochs_and_its_leaves_replay(tmp_path, cache_dir) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, tmp_path, cache_dir), nprocs=2, join=True)
    facts = json.loads((tmp_path / "facts.json").read_text())
    island, cheater = facts["island"], facts["cheater"]
    for e, report in enumerate(facts["reports"]):
        outcomes = {h["address"]: h for h in report["hosts"]}
        assert outcomes[island]["outcome"] == "accepted" and int(outcomes[island]["reward"]) > 0, e
        assert outcomes[cheater]["outcome"] == "invalid" and int(outcomes[cheater]["slashed"]) > 0, e
        # The island's leaves, trained by two ranks, replayed in one validator process.
        mine = [c for c in report["challenges"] if c["host"] == island]
        assert mine and all(c["outcome"] == "pass" for c in mine), (e, mine)
        assert report["agreed"], e
    assert facts["funds_conserved"]
    # Rank 1 trained both epochs to the end (and epoch 2, if it finished before the stop), on the
    # orders rank 0's training thread sent.
    assert json.loads((tmp_path / "followed.json").read_text()) >= EPOCHS
    # Epoch 1 trained while epoch 0 settled, from its optimistic start ...
    assert [1, 0] in facts["trainings"]
    first, second = facts["settled"]
    assert second["model_hash"] == first["start_model_hash"] != first["next_model_hash"]
    # ... and each settled model is the outer step from the settled start over the accepted Δs
    # alone (the cheater's left out), not from the optimistic start.
    assert second["settled_start"] == first["next_model_hash"] != second["model_hash"]
    for settled in facts["settled"]:
        assert cheater not in settled["aggregated"] and island in settled["aggregated"] and not settled["unserved"]
        assert settled["recomputed"] == settled["next_model_hash"]
