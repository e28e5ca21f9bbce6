"""A validator keeps the Δ of a last segment it passed, byte for byte, written to disk as it arrives
(never held whole in memory); a Δ it failed, or one whose stream broke off, is not kept
(``node.validator``, ``node.content.intake``)."""

from __future__ import annotations

from verifier_env import serve_epoch

from node.content import intake
from node.validator import _DeltaTee
from trainer.artifacts import held_delta_path
from verifier.adversaries import Honest, make_adversary
from verifier.replay import check_challenge


def test_a_passed_delta_is_kept_exactly_and_written_as_it_arrives(spec, dataset, tmp_path) -> None:
    served = serve_epoch(spec, dataset, Honest(), tmp_path / "host")
    kept = held_delta_path(tmp_path / "val", spec.run_id(), served.result.commitment.delta_hash)
    sizes = []

    class Watching(_DeltaTee):
        def delta_chunks(self, epoch):
            for piece in super().delta_chunks(epoch):
                sizes.append(sum(p.stat().st_size for p in kept.parent.iterdir()))  # on disk as it arrives
                yield piece

    with intake(kept) as box:
        report = check_challenge(spec, dataset, served.challenge(spec.train.segments - 1),
                                 Watching(served.source, box), served.theta, served.ctx.prev_epoch_seed)
        assert report.outcome == "pass" and not kept.exists()  # not the Δ's file before it is kept
        box.keep()
    assert kept.read_bytes() == served.source.delta(0)
    assert sizes and sizes == sorted(sizes) and sizes[0] > 0  # each piece on disk before the reader saw it
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # nothing else left behind


def test_a_failed_delta_is_not_kept_and_a_broken_stream_keeps_nothing(spec, dataset, tmp_path) -> None:
    served = serve_epoch(spec, dataset, make_adversary("noise"), tmp_path / "host")
    kept = held_delta_path(tmp_path / "val", spec.run_id(), served.result.commitment.delta_hash)
    with intake(kept) as box:
        report = check_challenge(spec, dataset, served.challenge(spec.train.segments - 1),
                                 _DeltaTee(served.source, box), served.theta, served.ctx.prev_epoch_seed)
        assert report.outcome == "fail"  # a validator keeps only what passed (node.validator)
    assert not kept.exists()
    with intake(kept) as box:
        stream = _DeltaTee(served.source, box).delta_chunks(0)
        next(stream)
        stream.close()  # the reader stopped part-way: nothing of this stream is kept
        box.keep()
    assert not kept.exists() and not any(kept.parent.iterdir())
