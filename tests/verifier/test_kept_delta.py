"""A validator keeps the Δ of a last segment it passed, byte for byte, without holding more than a
few MiB of it in memory; a Δ it failed, or one whose stream broke off, is not kept."""

from __future__ import annotations

import pytest
from verifier_env import serve_epoch

from node.validator import _Keeping
from trainer.artifacts import held_delta_path, keep_delta
from verifier.adversaries import Honest, make_adversary
from verifier.replay import check_challenge


@pytest.fixture
def small_spool(monkeypatch):
    monkeypatch.setattr(_Keeping, "SPOOL_BYTES", 4096)  # the test's Δ (tens of kB) goes to disk


def test_a_passed_delta_is_kept_exactly_through_a_file_spool(spec, dataset, tmp_path, small_spool) -> None:
    served = serve_epoch(spec, dataset, Honest(), tmp_path / "host")
    source = _Keeping(served.source)
    report = check_challenge(spec, dataset, served.challenge(spec.train.segments - 1), source, served.theta,
                             served.ctx.prev_epoch_seed)
    assert report.outcome == "pass" and source.kept is not None
    assert source.kept._rolled  # beyond SPOOL_BYTES: on disk, not in memory
    keep_delta(tmp_path / "val", spec.run_id(), served.result.commitment.delta_hash, source.kept)
    kept = held_delta_path(tmp_path / "val", spec.run_id(), served.result.commitment.delta_hash)
    assert kept.read_bytes() == served.source.delta(0)
    source.release()
    assert source.kept is None


def test_a_failed_delta_is_not_kept_and_a_broken_stream_keeps_nothing(spec, dataset, tmp_path, small_spool) -> None:
    served = serve_epoch(spec, dataset, make_adversary("noise"), tmp_path / "host")
    source = _Keeping(served.source)
    report = check_challenge(spec, dataset, served.challenge(spec.train.segments - 1), source, served.theta,
                             served.ctx.prev_epoch_seed)
    assert report.outcome == "fail"  # a validator keeps only what passed (node.validator)
    stream = source.delta_chunks(0)
    next(stream)
    stream.close()  # the reader stopped part-way: nothing of this stream is kept
    assert source.kept is None
