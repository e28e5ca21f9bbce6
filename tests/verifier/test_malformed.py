"""Whatever a host serves — truncated, padded, mis-shaped, non-finite, unproven, inconsistent — the
verdict has a reason (never a crash): ``unavailable`` when what was served is not the committed
artifact (malformed bytes, a proof that does not verify, losses or a Δ off their digests: that
reader was not served), ``fail`` when the committed artifacts themselves do not hold up. Every
honest reader that is served sees the same committed bytes, so honest ``pass``/``fail`` votes
agree; a host cannot get one honest validator outvoted by serving it garbage."""

from __future__ import annotations

import logging

import pytest
import torch
from suite_env import small_spec
from verifier_env import Tampered, commit_leaves, leaves_of, serve_epoch

from protocol.messages import Verdict
from protocol.rules.losses import MICRO
from protocol.rules.merkle import MerkleProof
from trainer.artifacts import ArtifactUnavailable
from trainer.checkpoint import Checkpoint
from trainer.delta import decode_delta, encode_delta, quantize
from trainer.epoch_store import EpochStore
from trainer.inner import start_checkpoint
from trainer.outer import GlobalState
from trainer.step import epoch_rng_key
from trainer.tensorfile import encode_tensors
from verifier.adversaries import Withhold, clone_state
from verifier.replay import check_challenge

LAST = 3  # the small run's last segment


def check(spec, dataset, served, segment, source=None):
    report = check_challenge(spec, dataset, served.challenge(segment), source or served.source, served.theta,
                             served.ctx.prev_epoch_seed)
    Verdict.model_validate(report.verdict.model_dump(mode="json"))  # always a postable verdict
    return report


def only(leaf_index, f):
    """A checkpoint rewrite that touches one leaf."""
    return lambda epoch, leaf, data: f(data) if leaf == leaf_index else data


def _reencode(data: bytes, spec, leaf: int, change) -> bytes:
    from safetensors.torch import load

    tensors = load(data)
    change(tensors)
    return encode_tensors(tensors, {"format": "veriloco/checkpoint-1"})


def _nan(tensors):
    tensors["param/head.weight"][0, 0] = float("nan")


def _inf(tensors):
    tensors["adam.exp_avg_sq/tok.weight"][3, 3] = float("inf")


def _small_model_leaf(data):
    other = small_spec(model={"params": {"n_layer": 1, "n_head": 4, "d_model": 32, "block_size": 64}})
    return start_checkpoint(other, GlobalState.initial(other).params, 0).encode()


def _huge_header(data):
    return (10**9).to_bytes(8, "little") + data[8:]


CHECKPOINT_GARBAGE = {
    "truncated": (lambda d: d[:-100], "truncated"),
    "truncated inside the header": (lambda d: d[:40], "truncated"),
    "empty": (lambda d: b"", "truncated"),
    "oversized": (lambda d: d + bytes(16), "oversized"),
    "random bytes": (lambda d: bytes(range(256)) * 8, "header"),
    "header too large": (_huge_header, "header"),
    "another model's shapes": (_small_model_leaf, "shape"),
    "NaN parameter": (lambda d: _reencode(d, None, 1, _nan), "NaN or Inf"),
    "Inf moment": (lambda d: _reencode(d, None, 1, _inf), "NaN or Inf"),
    "not bytes": (lambda d: d.hex(), "not bytes"),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINT_GARBAGE))
@pytest.mark.parametrize("which", ["start", "end"])
def test_garbage_leaves_are_unserved(spec, dataset, honest, case, which) -> None:
    rewrite, words = CHECKPOINT_GARBAGE[case]
    leaf = 1 if which == "start" else 2
    report = check(spec, dataset, honest, 1, Tampered(honest.source, checkpoint=only(leaf, rewrite)))
    assert (report.outcome, report.check) == ("unavailable", "leaf"), report.reason
    assert words in report.reason and f"leaf {leaf}" in report.reason
    assert report.verdict.distance == 0  # nothing was replayed (an unavailable verdict measures no distance)


def test_a_leaf_served_for_another_index_is_unserved(spec, dataset, honest) -> None:
    swap = lambda epoch, leaf, data: honest.source.checkpoint(epoch, leaf + 1) if leaf == 1 else data  # noqa: E731 (a one-line stand-in, named where it is used)
    report = check(spec, dataset, honest, 1, Tampered(honest.source, checkpoint=swap))
    assert (report.outcome, report.check) == ("unavailable", "leaf") and "step 8" in report.reason


def test_a_leaf_of_another_host_fails_the_proof_unserved(spec, dataset, honest, tmp_path) -> None:
    from suite_env import VICTIM

    from verifier.adversaries import Honest

    other = serve_epoch(spec, dataset, Honest(), tmp_path, host=VICTIM)
    swap = lambda epoch, leaf, data: other.source.checkpoint(epoch, leaf)  # noqa: E731 (a one-line stand-in, named where it is used)
    report = check(spec, dataset, honest, 1, Tampered(honest.source, checkpoint=swap))
    assert (report.outcome, report.check) == ("unavailable", "leaf") and "not under the committed root" in report.reason


def _forged(proof: MerkleProof) -> MerkleProof:
    siblings = list(proof.siblings)
    siblings[0] = ("0" if siblings[0][0] != "0" else "1") + siblings[0][1:]
    return proof.model_copy(update={"siblings": siblings})


PROOF_GARBAGE = {
    "forged sibling": (_forged, "not under the committed root"),
    "proof of another leaf": (lambda p: p.model_copy(update={"index": p.index + 1}), "proof of leaf"),
    "proof for another tree size": (lambda p: p.model_copy(update={"leaf_count": 8}), "8 leaves"),
    "too few siblings": (lambda p: p.model_copy(update={"siblings": p.siblings[:-1]}), "not under"),
    "extra sibling": (lambda p: p.model_copy(update={"siblings": [*p.siblings, "ab" * 32]}), "not under"),
    "a dict that is no proof": (lambda p: {"index": "x"}, "malformed Merkle proof"),
    "a string": (lambda p: "proof", "malformed Merkle proof"),
    "valid as JSON": (lambda p: p.model_dump(mode="json"), None),  # a dict of a real proof is accepted
}


@pytest.mark.parametrize("case", sorted(PROOF_GARBAGE))
def test_bad_proofs_are_unserved(spec, dataset, honest, case) -> None:
    rewrite, words = PROOF_GARBAGE[case]
    source = Tampered(honest.source, proof=lambda epoch, leaf, p: rewrite(p) if leaf == 2 else p)
    report = check(spec, dataset, honest, 1, source)
    if words is None:
        assert report.outcome == "pass", report.reason
        return
    assert (report.outcome, report.check) == ("unavailable", "leaf"), report.reason
    assert words in report.reason


def test_a_proof_swapped_between_leaves_is_unserved(spec, dataset, honest) -> None:
    swap = lambda epoch, leaf, p: honest.source.proof(epoch, 2 if leaf == 1 else 1)  # noqa: E731 (a one-line stand-in, named where it is used)
    report = check(spec, dataset, honest, 1, Tampered(honest.source, proof=swap))
    assert (report.outcome, report.check) == ("unavailable", "leaf") and "proof of leaf 2" in report.reason


def _changed(losses, i, by=1):
    out = list(losses)
    out[i] += by
    return out


LOSS_GARBAGE = {
    "one loss changed": (lambda losses: _changed(losses, 5), "do not hash"),
    "one missing": (lambda losses: losses[:-1], "not 16"),
    "floats": (lambda losses: [x / 1e6 for x in losses], "not 16"),
    "booleans": (lambda losses: [True] * 16, "not 16"),
    "too large": (lambda losses: [2**70] * 16, "not 16"),
    "a string": (lambda losses: "1,2,3", "str"),
    "None": (lambda losses: None, "NoneType"),
}


@pytest.mark.parametrize("case", sorted(LOSS_GARBAGE))
def test_bad_losses_are_unserved(spec, dataset, honest, case) -> None:
    rewrite, words = LOSS_GARBAGE[case]
    report = check(spec, dataset, honest, 2, Tampered(honest.source, losses=lambda e, _, losses: rewrite(losses)))
    assert (report.outcome, report.check) == ("unavailable", "losses") and words in report.reason, report.reason


def test_committed_losses_that_disagree_with_the_leaves_fail(spec, dataset, honest, tmp_path) -> None:
    # The host commits (and serves) a loss list that hashes right but is not what leaf 2 recorded.
    served = commit_leaves(honest, leaves_of(honest), tmp_path)
    store = EpochStore(tmp_path, spec.run_id(), served.ctx.host)
    changed = _changed(store.read_record(0).losses_micro, 6, by=-50_000)
    record = store.recommit(spec, 0, losses=[x / MICRO for x in changed])
    assert record.losses_micro == changed == served.source.losses(0)  # served as recommitted; leaves keep theirs
    challenge = served.challenge(1).model_copy(update={"loss_digest": record.commitment.loss_digest})
    report = check_challenge(spec, dataset, challenge, served.source, served.theta, served.ctx.prev_epoch_seed)
    assert (report.outcome, report.check) == ("fail", "losses") and "leaf 2 records" in report.reason
    # ... and segment 2 fails too, through its start leaf.
    challenge = challenge.model_copy(update={"segment": 2})
    report = check_challenge(spec, dataset, challenge, served.source, served.theta, served.ctx.prev_epoch_seed)
    assert (report.outcome, report.check) == ("fail", "losses")


def test_a_leaf_0_that_is_not_theta_e_fails_segment_0(spec, dataset, tmp_path) -> None:
    from verifier.adversaries import Honest

    theta = GlobalState.initial(spec)
    other = GlobalState({n: t * 1.01 for n, t in theta.params.items()}, theta.momentum)
    served = serve_epoch(spec, dataset, Honest(), tmp_path, theta=other)
    served.theta = theta  # what the chain agreed on
    report = check(spec, dataset, served, 0)
    assert (report.outcome, report.check) == ("fail", "start")
    assert check(spec, dataset, served, 1).outcome == "pass"  # later segments are honest work from its start


def test_leaves_with_another_epochs_rng_key_fail(spec, dataset, honest, tmp_path) -> None:
    key = epoch_rng_key(spec.train.seed, 5)
    leaves = [Checkpoint(clone_state(leaf.state, rng_key=key), leaf.losses, leaf.micro_batches)
              for leaf in leaves_of(honest)]
    served = commit_leaves(honest, leaves, tmp_path)
    report = check(spec, dataset, served, 1)
    assert (report.outcome, report.check) == ("fail", "leaf") and "RNG key" in report.reason


def test_a_changed_micro_batch_split_fails(spec, dataset, honest, tmp_path) -> None:
    leaves = leaves_of(honest)
    leaves[2] = Checkpoint(leaves[2].state, leaves[2].losses, 2)
    served = commit_leaves(honest, leaves, tmp_path)
    report = check(spec, dataset, served, 1)
    assert (report.outcome, report.check) == ("fail", "leaf") and "micro-batches" in report.reason


def test_negative_second_moments_fail(spec, dataset, honest, tmp_path) -> None:
    leaves = leaves_of(honest)
    v = {n: t.clone() for n, t in leaves[1].state.exp_avg_sq.items()}
    v["ln_f.bias"][0] = -1e-3
    leaves[1] = Checkpoint(clone_state(leaves[1].state, exp_avg_sq=v), leaves[1].losses, 1)
    served = commit_leaves(honest, leaves, tmp_path)
    report = check(spec, dataset, served, 1)
    assert (report.outcome, report.check) == ("fail", "leaf") and "negative" in report.reason


def _scale_nan(data, spec):
    payload = decode_delta(data, spec)
    payload["scale/ln_f.bias"][0] = float("nan")
    return encode_tensors(payload, {"format": "veriloco/delta-1", "scheme": "int8", "block_size": "64"})


DELTA_GARBAGE = {
    "truncated": (lambda d, s: d[:-10], "malformed"),
    "oversized": (lambda d, s: d + bytes(8), "malformed"),
    "NaN scale": (_scale_nan, "malformed"),
    "not bytes": (lambda d, s: None, "not bytes"),
    "another valid Δ": (lambda d, s: encode_delta(quantize(
        {n: torch.zeros(t.shape) for n, t in GlobalState.initial(s).params.items()}, s.quantization),
        s.quantization), "hashes to"),
}


@pytest.mark.parametrize("case", sorted(DELTA_GARBAGE))
def test_bad_deltas_are_unserved_in_the_last_segment(spec, dataset, honest, case) -> None:
    rewrite, words = DELTA_GARBAGE[case]
    report = check(spec, dataset, honest, LAST, Tampered(honest.source, delta=lambda e, _, d: rewrite(d, spec)))
    kind = "leaf" if words == "not bytes" else "delta"
    assert (report.outcome, report.check) == ("unavailable", kind) and words in report.reason, report.reason
    assert check(spec, dataset, honest, 1, Tampered(honest.source, delta=lambda e, _, d: rewrite(d, spec))).outcome \
        == "pass"  # only the last segment looks at Δ


def test_a_loose_scale_fails_even_if_values_are_close(spec, dataset, honest, tmp_path) -> None:
    # Doubling every scale and halving q keeps dequantized values near Δ, but scales are not max|Δ|/127.
    leaves = leaves_of(honest)
    payload = dict(honest.result.payload)
    for name in list(payload):
        if name.startswith("q/"):
            payload[name] = torch.round(payload[name].float() / 2).to(torch.int8)
        else:
            payload[name] = payload[name] * 2
    served = commit_leaves(honest, leaves, tmp_path, payload)
    report = check(spec, dataset, served, LAST)
    assert (report.outcome, report.check) == ("fail", "delta")
    assert report.measurements["delta_relative_error"] < 0.02  # close, and still refused


@pytest.mark.parametrize("what", ["all", "checkpoints", "proofs", "delta", "losses"])
def test_withholding_is_unavailable(spec, dataset, honest, what) -> None:
    source = Withhold(what).serve(honest.source)
    for g in range(spec.train.segments):
        report = check(spec, dataset, honest, g, source)
        expected = "pass" if what == "delta" and g != LAST else "unavailable"
        assert report.outcome == expected, report.reason
        if expected == "unavailable":
            assert report.check == "fetch" and report.verdict.distance == 0 and "withheld" in report.reason


def test_a_source_that_raises_anything_is_unavailable(spec, dataset, honest) -> None:
    def boom(epoch, leaf, data):
        raise ConnectionResetError("peer went away")

    report = check(spec, dataset, honest, 1, Tampered(honest.source, checkpoint=boom))
    assert (report.outcome, report.check) == ("unavailable", "fetch") and "ConnectionResetError" in report.reason

    class Missing(Tampered):
        def losses(self, epoch):
            raise ArtifactUnavailable("timed out")

    assert check(spec, dataset, honest, 1, Missing(honest.source)).outcome == "unavailable"


def test_the_validators_own_fault_is_no_verdict(spec, dataset, honest, monkeypatch, caplog) -> None:
    """A bug or an exhausted machine in the validator says nothing about the host: no verdict at all."""
    import verifier.replay as replay

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(replay, "replay_segment", broken)
    with caplog.at_level(logging.ERROR, logger="veriloco.verifier"), pytest.raises(replay.ReplayFault,
                                                                                     match="kernel exploded"):
        check(spec, dataset, honest, 1)
    assert "unexpected error" in caplog.text

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(replay, "replay_segment", exhausted)
    with pytest.raises(replay.ReplayFault, match="MemoryError"):
        check(spec, dataset, honest, 1)


def test_a_diverging_replay_is_a_fail(spec, dataset, honest, tmp_path) -> None:
    # Finite but absurd weights (1e30) make the replayed loss non-finite: the trainer raises, we fail.
    # Leaf 2 is leaf 1 after c steps of weight decay alone, within the update bound of segment 1,
    # so that it is the replay that meets the absurd weights.
    leaves = leaves_of(honest)
    params = {n: torch.full_like(t, 1e30) for n, t in leaves[1].state.params.items()}
    leaves[1] = Checkpoint(clone_state(leaves[1].state, params=params), leaves[1].losses, 1)
    decay = (1 - float(spec.train.lr) * float(spec.train.weight_decay)) ** spec.train.segment_steps
    decayed = {n: t * decay if t.dim() >= 2 else t.clone() for n, t in params.items()}
    leaves[2] = Checkpoint(clone_state(leaves[2].state, params=decayed), leaves[2].losses, 1)
    served = commit_leaves(honest, leaves, tmp_path)
    report = check(spec, dataset, served, 1)
    assert report.outcome == "fail" and report.check == "replay", report.reason
    assert check(spec, dataset, served, 0).check == "bound"  # from honest weights to 1e30 in c steps


@pytest.mark.parametrize("scheme", ["none", "int4"])
def test_the_delta_check_under_other_quantization_schemes(dataset, tmp_path, scheme) -> None:
    from verifier.adversaries import Honest, ScaledDelta

    spec = small_spec(quantization={"scheme": scheme})
    honest = serve_epoch(spec, dataset, Honest(), tmp_path / "honest")
    report = check(spec, dataset, honest, LAST)
    assert report.outcome == "pass", report.reason
    assert report.measurements["delta_violations"] == 0
    assert report.measurements["delta_relative_error"] < (1e-6 if scheme == "none" else 0.15)
    scaled = serve_epoch(spec, dataset, ScaledDelta(1.01), tmp_path / "scaled")
    report = check(spec, dataset, scaled, LAST)
    assert (report.outcome, report.check) == ("fail", "delta"), report.reason


def test_random_corruption_never_raises(spec, dataset, honest) -> None:
    # Any byte of a served leaf flipped: never an exception or a pass; the bytes are not the committed
    # leaf, so the host did not serve it (unavailable, which slashes nobody on one reader's word).
    import random

    rng = random.Random(5)
    original = honest.source.checkpoint(0, 2)
    positions = [rng.randrange(len(original)) for _ in range(40)] + list(range(16)) + [len(original) - 1]
    for pos in positions:
        data = bytearray(original)
        data[pos] ^= 1 << rng.randrange(8)
        flipped = only(2, lambda d, data=data: bytes(data))
        report = check(spec, dataset, honest, 1, Tampered(honest.source, checkpoint=flipped))
        assert (report.outcome, report.check) == ("unavailable", "leaf"), (pos, report.reason)
