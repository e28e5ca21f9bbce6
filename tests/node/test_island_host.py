"""An island host in a network (issue 27): it traps like a one-process host, opens its trap, and is
accepted; too slow for one segment, its ranks agree to stop and it sits out unslashed; asked to
stop while a pipelined epoch trains, every rank exits cleanly and what it committed stays.

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
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from http_network import HttpNetwork

from node.validator import ValidatorNode
from protocol.rules.spec import RunSpec
from protocol.views import EpochReport
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.inner import Interrupted
from trainer.island import IslandBehaviour, follow_island, join_island
from trainer.presets import tiny
from veriloco import island_launch
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

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


def _spawn(target: Callable[..., None], root: Path, cache_dir: Path) -> None:
    """Run ``target(rank, port, root, cache_dir)`` as the two ranks of an island; raises if a rank did."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(target, args=(port, root, cache_dir), nprocs=2, join=True)


def _join(rank: int, port: int) -> tuple:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    return join_island("cpu", threads=1)


# -- too slow for one segment: the island sits out ----------------------------------------------


def sit_out_spec() -> RunSpec:
    # A 24-block train window (tests/node/test_partial_epoch.py): 4 steps of 10 blocks cannot fit.
    return tiny("island-sit-out").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"challenges_k": 1, "validators_r": 1},
        phases={"min_hosts": 3, "min_validators": 2, "join_blocks": 40, "train_blocks": 24, "reveal_blocks": 40,
                "verify_blocks": 80, "verdict_reveal_blocks": 40, "propose_blocks": 40},
    )


def _sit_out_rank(rank: int, port: int, root: Path, cache_dir: Path) -> None:
    group, where = _join(rank, port)
    spec = sit_out_spec()
    dataset = Dataset.load(spec.data, cache_dir)
    try:
        if rank > 0:
            done = follow_island(spec, dataset, root / "rank-1", group, where)
            (root / "followed.json").write_text(json.dumps(done))
            return
        island = IslandBehaviour(spec, group, where)
        steps: list[int] = []

        def crawl(done: int, _loss: float) -> None:  # rank 0's step callback: 10 blocks a step
            steps.append(done)
            net.ledger.wait_for_height(net.ledger.height() + 10)

        # The island trains last (as the slow host of test_partial_epoch.py): its crawl costs the
        # others no blocks.
        net = HttpNetwork(spec, root, dataset, [HostBehaviour(), HostBehaviour(), island], validators=2,
                          on_step={2: crawl})
        try:
            report = net.run_epoch()
            (root / "report.json").write_text(report.model_dump_json())
            (root / "facts.json").write_text(json.dumps({
                "island": net.host(2).node.address, "steps": steps,
                "funds_conserved": net.total_funds() == net.initial_funds}))
        finally:
            net.close()
            island.stop()
    finally:
        dist.destroy_process_group()


def test_an_island_too_slow_for_one_segment_sits_out_unslashed(tmp_path, cache_dir) -> None:
    _spawn(_sit_out_rank, tmp_path, cache_dir)
    report = EpochReport.model_validate_json((tmp_path / "report.json").read_text())
    facts = json.loads((tmp_path / "facts.json").read_text())
    by_address = {h.address: h for h in report.hosts}
    island = by_address[facts["island"]]
    assert island.commitment is None and (island.outcome, island.slashed, island.reward) == ("sat_out", "0", "0")
    assert not [c for c in report.challenges if c.host == island.address]
    # Rank 0 stopped inside the first segment, and rank 1 stopped with it (it trained no epoch to the end).
    assert facts["steps"] and max(facts["steps"]) < sit_out_spec().train.segment_steps
    assert json.loads((tmp_path / "followed.json").read_text()) == 0
    assert {h.outcome for a, h in by_address.items() if a != island.address} == {"accepted"}
    assert report.slashed_total == "0" and report.agreed and facts["funds_conserved"]


# -- asked to stop while a pipelined epoch trains --------------------------------------------------


def _pipelined_spec() -> RunSpec:
    return simulation_spec(tiny("island-stop").with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}), validators=1, hosts=2,
    ).with_changes(phases={"pipelined": True})


def _until(net: LocalNetwork, done: threading.Event, rounds: int = 2000) -> None:
    """Tick the network (as ``LocalNetwork.run_epoch`` does) until ``done`` is set; a training under
    way is waited for a moment at a time, so a training held in its step callback holds nothing."""
    for _ in range(rounds):
        if done.is_set():
            return
        acted = [node.tick() for node in net.nodes]
        net.ledger.end_block()
        if any(acted):
            continue
        busy = [job for h in net.hosts if (job := h.training) is not None]
        if busy:
            wait(busy, timeout=0.2, return_when=FIRST_COMPLETED)
            continue
        info = net.ledger.epoch()
        older = [net.ledger.epoch(info.settling).phase_deadline] if info.settling is not None else []
        ahead = [d for d in (info.phase_deadline, *older) if d > net.ledger.height()]
        if ahead:
            net.ledger.wait_for_height(min(ahead))
    raise AssertionError("the training never reached the step the test stops it at")


def _stop_rank(rank: int, port: int, root: Path, cache_dir: Path) -> None:
    group, where = _join(rank, port)
    spec = _pipelined_spec()
    dataset = Dataset.load(spec.data, cache_dir)
    try:
        if rank > 0:
            done = follow_island(spec, dataset, root / "rank-1", group, where)
            (root / "followed.json").write_text(json.dumps(done))
            return
        island = IslandBehaviour(spec, group, where)
        roster = Roster(hosts=[island, host_behaviour("honest")], validators=[validator_behaviour("honest")])
        net = LocalNetwork(spec, root / "net", roster, dataset, validator_factory=ValidatorNode)
        host = net.hosts[0]
        steps, inside = [0], threading.Event()

        def held_in_epoch_2(_done: int, _loss: float) -> None:  # the training thread's step callback
            steps[0] += 1
            if steps[0] == 2 * spec.train.inner_steps + 3:  # epoch 2, its first segment done
                inside.set()
                host.stopping.wait(timeout=300)  # until the host is asked to stop

        host._on_step = held_in_epoch_2
        report = net.run_epoch(max_rounds=300)  # epoch 0 settles while epoch 1 trains
        _until(net, inside)  # epoch 1 settles while epoch 2 trains, up to the held step
        training = host.training
        # What `veriloco host run` does once its daemon stops: close the node, then stop the island.
        for node in net.nodes:
            node.close()
        sent = island_launch.stop(island, training, wait_s=120)
        store = host.epochs
        roots = [[store.read_record(e).commitment.checkpoint_root,
                  next(h.commitment.checkpoint_root for h in net.ledger.report(e).hosts
                       if h.address == host.address and h.commitment is not None)] for e in (0, 1)]
        _, progress = store.read_progress(2)
        (root / "facts.json").write_text(json.dumps({
            "under_way": training is not None, "sent": sent,
            "interrupted": training is not None and isinstance(training.exception(timeout=0), Interrupted),
            "outcome": next(h.outcome for h in report.hosts if h.address == host.address),
            "roots": roots,
            "leaves": [[c.leaf_hash() for c in store.read_leaves(spec, e)] == store.read_record(e).leaf_hashes
                       for e in (0, 1)],
            "epoch_2_leaves": {str(leaf): store.read_leaf(spec, 2, leaf).leaf_hash() == h
                               for leaf, (h, _) in progress.items()}}))
    finally:
        dist.destroy_process_group()


def test_an_island_stopped_mid_pipelined_epoch_exits_cleanly_and_keeps_what_it_committed(tmp_path,
                                                                                         cache_dir) -> None:
    _spawn(_stop_rank, tmp_path, cache_dir)  # raises if either rank raised
    facts = json.loads((tmp_path / "facts.json").read_text())
    # Stopped mid-epoch 2: its training ended at a step boundary (every rank agreeing) before rank 0
    # told rank 1 to leave; rank 1 left after epochs 0 and 1, the ones it trained to the end.
    assert facts["under_way"] and facts["sent"] and facts["interrupted"]
    assert json.loads((tmp_path / "followed.json").read_text()) == 2
    # Epochs 0 (accepted) and 1 as committed: each record's root is on chain, every leaf on disk
    # hashes as recorded.
    assert facts["outcome"] == "accepted"
    assert all(kept == posted for kept, posted in facts["roots"]) and all(facts["leaves"])
    # Epoch 2's finished segment is on disk as recorded: a restart resumes from it.
    assert facts["epoch_2_leaves"] and all(facts["epoch_2_leaves"].values())
