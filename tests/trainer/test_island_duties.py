"""An island host does a one-process host's duties with the one-process bits: it sets the traps its
node drew from the host's secret and declares them, it ends an epoch early at the same segment on
every rank (a partial epoch), it carries a topk2 error-feedback residual across epochs, it steps
Muon on whole matrices gathered one at a time, and each rank may accumulate several micro-batches a
step (M = k·N).

One two-rank island (FSDP2 over gloo, torchrun's environment set by hand) trains every case once
for the module; each test compares with one process accumulating the same two micro-batches."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from suite_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.behaviour import HostEpoch
from trainer.data import Dataset
from trainer.epoch_store import EpochStore
from trainer.inner import ResidualUnavailable, replay_segment, run_epoch
from trainer.island import IslandBehaviour, IslandOrder, follow_island, join_island
from trainer.outer import GlobalState
from trainer.recompute import LeafRecomputer
from trainer.step import rank_rows
from trainer.trap import Traps, draw
from verifier.measure import EPSILON, compare, param_floor

pytestmark = pytest.mark.slow  # one two-process island for the module (about 20 s on a busy 2-core machine)

PARTIAL_AT = 3  # the deadline stop ends the trapped epoch after 3 of its 4 segments
ACCUMULATE = 2  # micro-batches a rank accumulates a step in the "accumulate" case: M = 4 on 2 ranks


def muon_spec() -> RunSpec:
    return small_spec(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8, "inner_optimizer": "muon"})


def topk2_spec() -> RunSpec:
    return small_spec(quantization={"scheme": "topk2", "block_size": 1024})


def honest_traps(spec: RunSpec) -> Traps:
    # A host secret whose epoch-0 draw (at probability 1) traps segment 1: drawn by trainer.trap.draw,
    # the function HostNode.trap_draw calls with the host's own secret.
    floor = max(param_floor(spec.train, spec.train.segment_steps), EPSILON)
    for n in range(100):
        traps = draw(bytes([n]) * 32, spec.run_id(), 0, spec.train.segments, 1.0, floor)
        if traps.segments == (1,):
            return traps
    raise AssertionError("no secret among 100 draws segment 1")


def _epoch(spec: RunSpec, epoch: int, **setup: object) -> HostEpoch:
    run_id = spec.run_id()
    seed = genesis_seed(run_id) if epoch == 0 else bytes(range(32))
    return HostEpoch(run_id, epoch, HOST, seed, full_leaf_every=2, **setup)  # type: ignore[arg-type]


def _rank(rank: int, port: int, roots: dict[str, Path], cache_dir: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    group, where = join_island("cpu", threads=1)
    try:
        for name, spec in (("trap", small_spec()), ("topk2", topk2_spec()), ("accumulate", small_spec()),
                           ("muon", muon_spec())):
            dataset = Dataset.load(spec.data, cache_dir)
            if rank > 0:
                follow_island(spec, dataset, roots[name], group, where)
                continue
            behaviour = IslandBehaviour(spec, group, where, accumulate=ACCUMULATE if name == "accumulate" else 1)
            theta = GlobalState.initial(spec).params
            if name in ("accumulate", "muon"):
                behaviour.train_epoch(spec, dataset, _epoch(spec, 0), theta, roots[name])
            elif name == "trap":
                ctx = _epoch(spec, 0, traps=honest_traps(spec), stop=lambda done: done >= PARTIAL_AT)
                behaviour.train_epoch(spec, dataset, ctx, theta, roots[name])
                (roots[name] / "declared.json").write_text(json.dumps(behaviour.traps(0)))
            else:
                # Epoch 1 carrying a residual epoch 0 never left: refused before any rank trains.
                try:
                    behaviour.train_epoch(spec, dataset, _epoch(spec, 1, carry_residual=True), theta, roots[name])
                except ResidualUnavailable as exc:
                    (roots[name] / "refused.txt").write_text(str(exc))
                behaviour.train_epoch(spec, dataset, _epoch(spec, 0), theta, roots[name])
                behaviour.train_epoch(spec, dataset, _epoch(spec, 1, carry_residual=True), theta, roots[name])
            behaviour.stop()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def island(cache_dir: Path, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The island's work roots, one per case, trained once by one two-rank island."""
    base = tmp_path_factory.mktemp("island")
    roots = {name: base / name for name in ("trap", "topk2", "accumulate", "muon")}
    for root in roots.values():
        root.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, roots, cache_dir), nprocs=2, join=True)
    return roots


def _same_files(a: EpochStore, b: EpochStore, epoch: int) -> None:
    assert a.leaves_on_disk(epoch) == b.leaves_on_disk(epoch)
    for leaf in a.leaves_on_disk(epoch):
        assert a.leaf_path(epoch, leaf).read_bytes() == b.leaf_path(epoch, leaf).read_bytes(), leaf


def test_an_island_traps_stops_early_and_commits_what_one_process_does(island, dataset, tmp_path) -> None:
    spec = small_spec()
    ctx = _epoch(spec, 0)
    traps = honest_traps(spec)
    mine = EpochStore(island["trap"], ctx.run_id, HOST)
    record = mine.read_record(0)
    # All ranks stopped after the same segment: a partial epoch of 3 of 4 segments.
    assert record.commitment.segments == PARTIAL_AT < spec.train.segments
    # The trap the host's secret drew is declared (its node opens it after the verdicts).
    assert json.loads((island["trap"] / "declared.json").read_text()) == [1]

    one = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path, micro_batches=2,
                    full_leaf_every=2, traps=traps, stop=lambda done: done >= PARTIAL_AT)
    assert one is not None
    assert one.commitment == record.commitment and one.leaf_hashes == record.leaf_hashes
    # The trap's end leaf (2) and the partial epoch's last (3) are stored in full, as by one process.
    single = EpochStore(tmp_path, ctx.run_id, HOST)
    assert {2, PARTIAL_AT} <= set(mine.leaves_on_disk(0))
    _same_files(mine, single, 0)

    # What a validator finds: segment 1 replays to a distance inside the trap window (a trap, so
    # the host is not slashed for it once it opens it), and the others replay to the committed bits.
    recomputer = LeafRecomputer(spec, dataset, mine)
    start, leaf = recomputer.materialize(0, 1), mine.read_leaf(spec, 0, 2)
    replayed = replay_segment(spec, dataset, ctx, start)
    distance = compare(replayed.state, leaf.state, start.state, spec.train, replayed.losses, leaf.losses).distance
    assert float(spec.verification.tau) < distance < float(spec.verification.trap_max_distance)
    for i in (0, 2):
        assert replay_segment(spec, dataset, ctx, recomputer.materialize(0, i)).leaf_hash() == record.leaf_hashes[i + 1]


def test_an_island_accumulating_micro_batches_commits_what_one_process_with_m_does(island, dataset, spec,
                                                                                    tmp_path) -> None:
    ctx = _epoch(spec, 0)
    mine = EpochStore(island["accumulate"], ctx.run_id, HOST)
    record = mine.read_record(0)
    m = 2 * ACCUMULATE
    one = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path, micro_batches=m, full_leaf_every=2)
    assert one is not None and one.commitment == record.commitment and one.leaf_hashes == record.leaf_hashes
    _same_files(mine, EpochStore(tmp_path, ctx.run_id, HOST), 0)
    assert mine.read_leaf(spec, 0, 0).micro_batches == m
    # Not the island of one micro-batch a rank (M = 2): the leaves record which M to replay with.
    two = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path / "two", micro_batches=2)
    assert two is not None and two.leaf_hashes[1] != record.leaf_hashes[1]
    # A validator replays the island's segment in one process with the leaf's M, to the committed bits.
    assert replay_segment(spec, dataset, ctx, mine.read_leaf(spec, 0, 2)).leaf_hash() == record.leaf_hashes[3]


def test_a_muon_island_gathers_each_matrix_and_commits_what_one_process_does(island, dataset, tmp_path) -> None:
    spec = muon_spec()
    ctx = _epoch(spec, 0)
    mine = EpochStore(island["muon"], ctx.run_id, HOST)
    record = mine.read_record(0)
    one = run_epoch(spec, dataset, ctx, GlobalState.initial(spec).params, tmp_path, micro_batches=2, full_leaf_every=2)
    assert one is not None and one.commitment == record.commitment and one.leaf_hashes == record.leaf_hashes
    _same_files(mine, EpochStore(tmp_path, ctx.run_id, HOST), 0)
    # The leaves carry Muon's momentum of a hidden matrix (gathered from the shards), not AdamW's moments.
    end = mine.read_leaf(spec, 0, spec.train.segments).state
    assert end.exp_avg["blocks.0.mlp.fc.weight"].abs().sum() > 0
    assert end.exp_avg_sq["blocks.0.mlp.fc.weight"].abs().sum() == 0


def test_accumulation_needs_a_power_of_two_island() -> None:
    assert rank_rows(8, 1, 2, 4).tolist() == [2, 3, 6, 7]  # micro-batches 1 and 3 of 4
    assert rank_rows(8, 1, 2) == slice(4, 8)
    with pytest.raises(ValueError, match="power-of-two"):
        rank_rows(12, 0, 3, 6)
    with pytest.raises(ValueError, match="divisible"):
        rank_rows(6, 0, 2, 4)
    with pytest.raises(ValueError, match="multiple"):
        rank_rows(8, 0, 2, 3)


def test_a_topk2_island_carries_the_residual_one_process_carries(island, dataset, tmp_path) -> None:
    spec = topk2_spec()
    theta = GlobalState.initial(spec).params
    # Rank 0 refused the epoch whose residual it did not have before ordering the others to train.
    assert "epoch 0 was accepted" in (island["topk2"] / "refused.txt").read_text()
    mine = EpochStore(island["topk2"], spec.run_id(), HOST)
    single = EpochStore(tmp_path, spec.run_id(), HOST)
    for epoch in (0, 1):
        ctx = _epoch(spec, epoch)
        one = run_epoch(spec, dataset, ctx, theta, tmp_path, micro_batches=2, full_leaf_every=2,
                        carry_residual=epoch == 1)
        assert one is not None
        assert one.commitment == mine.read_record(epoch).commitment, epoch
        # Leaf S holds the residual the Δ started from; the residual left is the next epoch's start.
        _same_files(mine, single, epoch)
        assert mine.residual_path(epoch).read_bytes() == single.residual_path(epoch).read_bytes()
    # Epoch 1 started from epoch 0's residual, not zeros: its Δ differs from a fresh epoch 1's.
    fresh = run_epoch(spec, dataset, _epoch(spec, 1), theta, tmp_path / "fresh", micro_batches=2)
    assert fresh is not None and fresh.commitment.delta_hash != mine.read_record(1).commitment.delta_hash


@pytest.mark.parametrize("field", ['"trap_seed": -1', '"trap_floor": NaN', '"trap_segments": [' + "0," * 64 + '0]',
                                   '"partial": "sometimes"'])
def test_a_malformed_island_order_is_refused(field: str) -> None:
    with pytest.raises(ValueError):
        IslandOrder.model_validate_json('{"kind": "epoch", ' + field + "}")
