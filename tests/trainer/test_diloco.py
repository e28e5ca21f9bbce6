"""The chain-free DiLoCo simulation: modes agree where they must, communication is counted exactly."""

from __future__ import annotations

import pytest
import torch
from suite_env import small_spec

from trainer.delta import payload_bytes, quantize
from trainer.diloco import simulate
from trainer.model import parameter_shapes


def test_one_worker_one_round_of_plain_averaging_is_single_training(dataset) -> None:
    spec = small_spec(quantization={"scheme": "none"}, outer={"lr": "1", "momentum": "0"})
    diloco = simulate(spec, dataset, "diloco", workers=1, steps=16, evals=1, eval_windows=128)
    single = simulate(spec, dataset, "single", workers=1, steps=16, evals=1, eval_windows=128)
    # θ_0 − (θ_0 − θ_H) is θ_H up to one float32 rounding
    assert diloco.val_loss == pytest.approx(single.val_loss, abs=1e-5)
    assert diloco.quant_error == 0.0 and diloco.bytes_sent == single.bytes_sent + 4 * sum(
        s.numel() for s in parameter_shapes(spec).values())


def test_equal_compute_and_bytes(dataset) -> None:
    spec = small_spec(train={"inner_steps": 8, "segment_steps": 8})
    params = sum(s.numel() for s in parameter_shapes(spec).values())
    payload = payload_bytes(quantize({n: torch.zeros(s) for n, s in parameter_shapes(spec).items()},
                                     spec.quantization))
    runs = {m: simulate(spec, dataset, m, workers=2, steps=16, evals=2, eval_windows=128)
            for m in ("diloco", "ddp", "single")}
    assert [p for p, _ in runs["diloco"].curve] == [p for p, _ in runs["ddp"].curve] == [16, 32]
    assert runs["ddp"].bytes_sent == 2 * 16 * 4 * params
    assert runs["diloco"].bytes_sent == 2 * 2 * payload  # 2 rounds, 2 workers
    assert runs["single"].bytes_sent == 0
    assert 0 < runs["diloco"].quant_error < 0.01
    for r in runs.values():
        assert r.curve[-1][1] < r.curve[0][1] < 5.0


def test_kept_inner_state_changes_only_later_rounds(dataset) -> None:
    spec = small_spec(train={"inner_steps": 8, "segment_steps": 8})
    runs = {(state, t): simulate(spec, dataset, "diloco", workers=1, steps=t, evals=1, eval_windows=64,
                                 inner_state=state)
            for state in ("fresh", "kept") for t in (8, 16)}
    assert runs["fresh", 8].val_loss == runs["kept", 8].val_loss  # one round: nothing to carry yet
    assert runs["fresh", 16].val_loss != runs["kept", 16].val_loss


def test_bad_arguments(dataset) -> None:
    with pytest.raises(ValueError, match="multiple of inner_steps"):
        simulate(small_spec(), dataset, "diloco", workers=2, steps=20)
    with pytest.raises(ValueError, match="unknown mode"):
        simulate(small_spec(), dataset, "gossip", workers=2, steps=16)
    with pytest.raises(ValueError, match="inner_state"):
        simulate(small_spec(), dataset, "diloco", workers=2, steps=16, inner_state="shared")


def test_pipelined_schedules_against_the_synchronous_one(dataset) -> None:
    # Pipelined epochs (issue 30). Delayed: a round's aggregate enters the model two rounds on, the
    # last one when training ends (so one round is synchronous DiLoCo exactly). Optimistic: with no
    # cheater it IS synchronous DiLoCo; with one, its start states differ but the settled model
    # never takes the rejected Δ. Every schedule sends the same bytes.
    spec = small_spec(train={"inner_steps": 8, "segment_steps": 8})

    def run(schedule, t, cheaters=0):
        return simulate(spec, dataset, "diloco", workers=3, steps=t, evals=1, eval_windows=64,
                        schedule=schedule, cheaters=cheaters)

    sync = {t: run("synchronous", t) for t in (8, 16)}
    assert run("delayed", 8).val_loss == sync[8].val_loss
    delayed = run("delayed", 16)
    assert delayed.val_loss != sync[16].val_loss and delayed.bytes_sent == sync[16].bytes_sent
    assert run("optimistic", 16).val_loss == sync[16].val_loss
    excluded = run("synchronous", 16, cheaters=1)
    optimistic = run("optimistic", 16, cheaters=1)
    assert optimistic.val_loss != excluded.val_loss  # round 1 started from a model with the flipped Δ
    assert run("optimistic", 8, cheaters=1).val_loss == run("synchronous", 8, cheaters=1).val_loss
    with pytest.raises(ValueError, match="schedule"):
        run("eager", 16)
    with pytest.raises(ValueError, match="cheaters"):
        run("synchronous", 16, cheaters=3)


def test_a_forged_delta_is_bounded_in_the_simulation_as_the_proposers_bound_it() -> None:
    # The simulation aggregates through the proposers' path (node/host.py: the peer bound and the
    # small-tensor clip over the accepted Δs with the segments each covers, then the rule weighted
    # by them): the same bits, whole epochs being equal weights.
    from protocol.tensors.aggregation import aggregate
    from trainer.diloco import proposers_aggregate
    from verifier.measure import PEER_POOL_COORDINATES, within_peer_bound

    spec = small_spec(aggregation={"rule": "mean"})
    gen = torch.Generator().manual_seed(3)
    shapes = parameter_shapes(spec)
    common = {n: 1e-2 * torch.randn(tuple(s), generator=gen) for n, s in shapes.items()}
    honest = {f"worker-{k}": {n: t + 2e-3 * torch.randn(t.shape, generator=gen) for n, t in common.items()}
              for k in range(1, 4)}
    matrix = max(shapes, key=lambda n: shapes[n].numel())
    small = min(n for n, s in shapes.items() if s.numel() < PEER_POOL_COORDINATES)

    def proposer(deltas):
        segments = dict.fromkeys(deltas, spec.train.segments)
        kept = within_peer_bound(deltas, segments=segments).kept
        return aggregate(spec.aggregation, kept, {h: segments[h] for h in kept})

    # A matrix at 3×: left out, so the aggregate is the honest Δs' alone.
    scaled = {**honest, "worker-0": {**honest["worker-1"], matrix: 3 * honest["worker-1"][matrix]}}
    # A small tensor at 2.5×, hidden in the pool: kept, and clipped to 1.5× its median.
    hidden = {**honest, "worker-0": {**honest["worker-1"], small: 2.5 * honest["worker-1"][small]}}
    for deltas, left_out in ((scaled, True), (hidden, False)):
        got = proposers_aggregate(spec, deltas)
        want = proposer(deltas)
        assert all(torch.equal(got[n], want[n]) for n in shapes)
        raw = aggregate(spec.aggregation, deltas)
        if left_out:
            alone = aggregate(spec.aggregation, honest)
            assert all(torch.equal(got[n], alone[n]) for n in shapes)
        else:  # only the clipped tensor differs from the plain mean, and it is smaller
            assert [n for n in shapes if not torch.equal(got[n], raw[n])] == [small]
            assert float(got[small].norm()) < float(raw[small].norm())


def test_an_optimistic_start_leaves_out_a_delta_beyond_the_peer_bound(dataset) -> None:
    # A cheater whose Δ is 3× its honest size: the proposers' peer bound leaves it out of the
    # optimistic start too, so the run is synchronous DiLoCo without it (a sign-flipped Δ, of honest
    # size, does reach the start: test_pipelined_schedules_against_the_synchronous_one).
    spec = small_spec(train={"inner_steps": 8, "segment_steps": 8})

    def run(schedule):
        return simulate(spec, dataset, "diloco", workers=3, steps=16, evals=1, eval_windows=64,
                        schedule=schedule, cheaters=1, cheat="scaled")

    assert run("optimistic").val_loss == run("synchronous").val_loss
    with pytest.raises(ValueError, match="cheat"):
        simulate(spec, dataset, "diloco", workers=3, steps=16, cheaters=1, cheat="noise")


def test_a_pipelined_topk2_worker_carries_its_residual_from_two_rounds_back(dataset) -> None:
    # trainer.delta.carried_from: round 1 of a synchronous run goes on from round 0's residual, of a
    # pipelined run (the optimistic schedule) from zeros; round 0 is the same in both. A dense scheme
    # carries none: the optimistic schedule without cheaters is the synchronous one bit for bit.
    spec = small_spec(train={"inner_steps": 4, "segment_steps": 4}, outer={"lr": "1", "momentum": "0"},
                      quantization={"scheme": "topk2", "block_size": 1024})

    def loss(schedule, rounds, s=spec):
        return simulate(s, dataset, "diloco", workers=1, steps=4 * rounds, evals=1, eval_windows=64,
                        schedule=schedule).val_loss

    assert loss("synchronous", 1) == loss("optimistic", 1)
    assert loss("synchronous", 2) != loss("optimistic", 2)
    dense = spec.with_changes(quantization={"scheme": "int8", "block_size": 64})
    assert loss("synchronous", 2, dense) == loss("optimistic", 2, dense)


def test_the_simulation_decays_the_carried_residual_by_the_specs_beta(dataset, monkeypatch) -> None:
    # quantization.error_decay reaches the simulated workers through the hosts' one encoder, with the
    # residual the round before left (undecayed: the encoder decays it). Every β is its own run id
    # (other windows), so the losses alone cannot show it: the encoder's inputs are recorded.
    from trainer import diloco
    from trainer.delta import encode_pseudo_gradient

    seen = []

    def recorded(delta, quant, residual=None):
        payload, left = encode_pseudo_gradient(delta, quant, residual)
        seen.append((quant.error_decay, residual, left))
        return payload, left

    monkeypatch.setattr(diloco, "encode_pseudo_gradient", recorded)
    spec = small_spec(train={"inner_steps": 4, "segment_steps": 4}, outer={"lr": "1", "momentum": "0"},
                      quantization={"scheme": "topk2", "block_size": 1024, "error_decay": "0.9"})
    simulate(spec, dataset, "diloco", workers=1, steps=8, evals=1, eval_windows=64)
    (beta0, carried0, left0), (beta1, carried1, _) = seen
    assert str(beta0) == str(beta1) == "0.9"
    assert carried0 is None and carried1 is left0  # round 1 goes on from round 0's r', as a host does
