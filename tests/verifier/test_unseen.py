"""What no replay sees: every leaf chain starts at θ_e (checked by the last segment's validators every
epoch), and a host that fakes only segments nobody challenged is caught exactly when one is drawn."""

from __future__ import annotations

import math

import pytest
from verifier_env import Tampered, serve_epoch

from trainer.artifacts import ArtifactUnavailable
from verifier.adversaries import Honest, Jump, ShiftedStart, make_adversary
from verifier.adversaries.unseen import jump_size
from verifier.replay import check_challenge


def verdicts(spec, dataset, served, source=None):
    return {g: check_challenge(spec, dataset, served.challenge(g), source or served.source, served.theta,
                               served.ctx.prev_epoch_seed) for g in range(spec.train.segments)}


@pytest.fixture(scope="module")
def shifted(spec, dataset, tmp_path_factory):
    return serve_epoch(spec, dataset, ShiftedStart(1.0), tmp_path_factory.mktemp("shifted"))


def test_a_host_that_trains_from_another_start_fails_whichever_segments_are_challenged(spec, dataset,
                                                                                          shifted) -> None:
    reports = verdicts(spec, dataset, shifted)
    last = spec.train.segments - 1
    for g, report in reports.items():
        if g in (0, last):  # segment 0 compares the whole leaf; the last segment its hash under the root
            assert (report.outcome, report.check) == ("fail", "start"), (g, report.reason)
        else:  # honest training from the shifted leaf: the replay alone sees nothing
            assert report.outcome == "pass", (g, report.reason)
    assert "leaf 0 is not the agreed θ_e" in reports[last].reason
    # The last segment is challenged in every epoch, so every draw of k others catches it.
    assert make_adversary("shifted_start").expected_detection(spec, 2) == 1.0


def test_the_last_segment_reads_leaf_zeros_proof_not_leaf_zero(spec, dataset, honest) -> None:
    def no_leaf_zero(epoch, leaf, value):
        if leaf == 0:
            raise ArtifactUnavailable("leaf 0 is not read when its hash is θ_e's")
        return value

    last = spec.train.segments - 1
    report = check_challenge(spec, dataset, honest.challenge(last), Tampered(honest.source, checkpoint=no_leaf_zero),
                             honest.theta, honest.ctx.prev_epoch_seed)
    assert report.outcome == "pass", report.reason
    assert report.measurements["leaf0_checked"] is True and "leaf0_hash" not in report.measurements
    assert report.measurements["leaf0_expected_hash"] == honest.result.leaf_hashes[0].hex()


def test_a_bad_proof_of_leaf_zero_is_decided_by_leaf_zero(spec, dataset, honest, shifted) -> None:
    last = spec.train.segments - 1
    other = honest.source.proof(0, 1)

    def wrong(epoch, leaf, value):
        return other if leaf == 0 else value

    # An honest leaf 0 with a proof that is not its own: the host did not serve it.
    report = check_challenge(spec, dataset, honest.challenge(last), Tampered(honest.source, proof=wrong),
                             honest.theta, honest.ctx.prev_epoch_seed)
    assert (report.outcome, report.check) == ("unavailable", "leaf"), report.reason
    # A shifted leaf 0 that its host then withholds: not served (slashed as unavailable).
    def withheld(epoch, leaf, value):
        if leaf == 0:
            raise ArtifactUnavailable("withheld")
        return value

    report = check_challenge(spec, dataset, shifted.challenge(last), Tampered(shifted.source, checkpoint=withheld),
                             shifted.theta, shifted.ctx.prev_epoch_seed)
    assert (report.outcome, report.check) == ("unavailable", "fetch"), report.reason


@pytest.mark.parametrize("text", ["jump:1,1.4", "jump:2,1.4,random", "jump:1"])
def test_a_jump_fails_only_the_segments_it_faked(spec, dataset, tmp_path, text) -> None:
    adversary = make_adversary(text)
    served = serve_epoch(spec, dataset, adversary, tmp_path)
    faked = adversary.faked[0]
    segments = spec.train.segments
    assert faked == list(range(segments - 1 - len(faked), segments - 1)) and faked
    for g, report in verdicts(spec, dataset, served).items():
        if g in faked:
            assert report.outcome == "fail" and report.check in {"distance", "bound"}, (g, report.reason)
        else:  # the last segment too: honest steps from the displaced leaf, an exact Δ
            assert report.outcome == "pass", (g, report.reason)
    n, m = segments - 1, len(faked)
    assert adversary.expected_detection(spec, 2) == pytest.approx(1 - math.comb(n - m, 2) / math.comb(n, 2))


def test_a_jump_sized_by_ratio_commits_that_ratio(spec, dataset, tmp_path) -> None:
    from trainer.delta import dequantize
    from trainer.model import parameter_shapes

    adversary = Jump(1, 1.4)
    served = serve_epoch(spec, dataset, adversary, tmp_path)
    forged = dequantize(served.result.payload, parameter_shapes(spec), spec.quantization)
    honest = adversary.honest_delta[0]
    ratios = [float(forged[n].norm() / honest[n].norm()) for n in honest if float(honest[n].norm()) > 0]
    # within the ratio in every tensor, and near it (the shift's scale is bisected a few times)
    assert 1.1 < max(ratios) <= 1.4 * 1.01
    # its recorded movements: the faked segment moved more than its honest self, and the true rows
    # cover the committed Δ (the triangle inequality) while its honest rows need not
    from verifier.measure import triangle_slack

    honest_rows, committed_rows = adversary.movements[0]
    (faked,) = adversary.faked[0]
    assert sum(committed_rows[faked].values()) > sum(honest_rows[faked].values())
    sizes = {n: t.numel() for n, t in forged.items()}
    assert min(triangle_slack(committed_rows, forged, sizes).values()) > 0.99  # Δ quantized: half a step


def test_jump_size_solves_for_the_ratio() -> None:
    import torch

    delta = torch.tensor([3.0, 4.0])
    unit = torch.tensor([0.6, -0.8])
    alpha = jump_size(delta, unit, 2.0)
    assert float((delta - alpha * unit).norm()) == pytest.approx(10.0)
    assert jump_size(delta, unit, 1.0) == pytest.approx(2 * float((delta * unit).sum()) if (delta * unit).sum() > 0
                                                        else 0.0, abs=1e-9)


def test_an_honest_host_passes_the_leaf_zero_check_at_any_split(spec, dataset, tmp_path) -> None:
    # The expected leaf 0 is computed with the host's micro-batch split (from its last leaf).
    from trainer.artifacts import LocalArtifacts
    from trainer.inner import run_epoch

    served = serve_epoch(spec, dataset, Honest(), tmp_path / "one")
    root = tmp_path / "two"
    result = run_epoch(spec, dataset, served.ctx, served.theta.params, root, micro_batches=2)
    assert result is not None
    source = LocalArtifacts(root, spec.run_id(), served.ctx.host)
    served = type(served)(spec, served.ctx, served.theta, result, source, Honest())
    last = spec.train.segments - 1
    report = check_challenge(spec, dataset, served.challenge(last), source, served.theta, served.ctx.prev_epoch_seed)
    assert report.outcome == "pass" and report.measurements["leaf0_checked"] is True, report.reason


def test_stronger_jump_directions_move_along_the_gradient_and_where_the_bound_leaves_room(spec, dataset,
                                                                                          tmp_path) -> None:
    # `gradient` displaces θ along ∇ of the validation loss itself (the first-order strongest move
    # under a per-tensor L2 bound), `ascent` along its sign; `matrices` only the tensors the peer
    # bound compares one by one, leaving the pooled and clipped small ones honest.
    import torch

    from trainer.delta import dequantize
    from trainer.model import parameter_shapes
    from trainer.outer import GlobalState
    from verifier.adversaries.unseen import validation_gradient
    from verifier.measure import PEER_POOL_COORDINATES

    grad = validation_gradient(spec, dataset, GlobalState.initial(spec).params)
    large = [n for n in grad if grad[n].numel() >= PEER_POOL_COORDINATES]
    moved = {}
    for i, direction in enumerate(("ascent", "gradient", "matrices")):
        adversary = Jump(1, 1.4, direction)
        served = serve_epoch(spec, dataset, adversary, tmp_path / str(i))
        forged = dequantize(served.result.payload, parameter_shapes(spec), spec.quantization)
        honest = adversary.honest_delta[0]
        moved[direction] = {n: honest[n] - forged[n] for n in honest}

    def alignment(direction: str) -> float:  # mean cosine of the matrices' displacement with ∇
        d = moved[direction]
        return sum(float((d[n] * grad[n]).sum() / (d[n].norm() * grad[n].norm())) for n in large) / len(large)

    def small_share(direction: str) -> float:  # the small tensors' share of the squared displacement
        d = moved[direction]
        total = sum(float(t.pow(2).sum()) for t in d.values())
        return sum(float(d[n].pow(2).sum()) for n in d if n not in large) / total

    assert alignment("gradient") > alignment("ascent") + 0.1
    assert small_share("matrices") < small_share("gradient") / 4
    # aim "first": the first epoch's direction every epoch, so the pushes add up; "each": its own
    first, each = Jump(1, 1.4, "gradient", "first"), Jump(1, 1.4, "gradient")
    ctx = served.ctx
    theta0 = GlobalState.initial(spec).params
    theta1 = {n: t - moved["gradient"][n] for n, t in theta0.items()}
    assert all(torch.equal(a, b) for a, b in zip(first._direction(spec, dataset, ctx, theta0).values(),
                                                 first._direction(spec, dataset, ctx, theta1).values(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(each._direction(spec, dataset, ctx, theta0).values(),
                                                     each._direction(spec, dataset, ctx, theta1).values(), strict=True))
    with pytest.raises(ValueError, match="aim"):
        make_adversary("jump:1,1.4,gradient,last")
