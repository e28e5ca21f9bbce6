"""A validator keeps the Δ of a last segment it read whole and found to hash to the commitment, byte
for byte, written to disk as it arrives (never held whole in memory); a stream that broke off, or a
replay that ended ``unavailable``, keeps nothing (``node.leaf_holding.Keeping``, ``node.content.intake``)."""

from __future__ import annotations

from collections.abc import Iterable

from verifier_env import serve_epoch

from node.leaf_holding import Keeping
from trainer.artifacts import held_delta_path
from verifier.adversaries import Honest
from verifier.replay import check_challenge


def test_a_passed_delta_is_kept_exactly_and_written_as_it_arrives(spec, dataset, tmp_path) -> None:
    served = serve_epoch(spec, dataset, Honest(), tmp_path / "host")
    challenge = served.challenge(spec.train.segments - 1)
    kept = held_delta_path(tmp_path / "val", spec.run_id(), challenge.delta_hash)
    sizes: list[int] = []

    class Watching(Keeping):
        def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
            for piece in super().delta_chunks(epoch):
                sizes.append(sum(p.stat().st_size for p in kept.parent.iterdir()))  # on disk as it arrives
                yield piece

    with Watching(served.source, challenge, tmp_path / "val", spec.run_id()) as keeping:
        report = check_challenge(spec, dataset, challenge, keeping, served.theta, served.ctx.prev_epoch_seed)
        assert report.outcome == "pass" and not kept.exists()  # not the Δ's file before it is kept
        assert "Δ" in keeping.settle(report)
    assert kept.read_bytes() == served.source.delta(0)
    assert sizes and sizes == sorted(sizes) and sizes[0] > 0  # each piece on disk before the reader saw it
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # nothing else left behind


def test_a_broken_stream_keeps_nothing(spec, dataset, tmp_path) -> None:
    served = serve_epoch(spec, dataset, Honest(), tmp_path / "host")
    challenge = served.challenge(spec.train.segments - 1)
    kept = held_delta_path(tmp_path / "val", spec.run_id(), challenge.delta_hash)
    with Keeping(served.source, challenge, tmp_path / "val", spec.run_id()) as keeping:
        stream = iter(keeping.delta_chunks(0))
        next(stream)
        stream.close()  # the reader stopped part-way and nothing was settled: nothing of it is kept
    assert not kept.exists()
    assert not kept.parent.exists() or not any(kept.parent.iterdir())
