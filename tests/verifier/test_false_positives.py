"""No false positives: honest segments pass, replayed bit for bit, whatever thread count the host and
the validator use, through files, across epochs, and when the host is a 2-process island replayed in
one process."""

from __future__ import annotations

import pytest
from suite_env import HOST
from verifier_env import Served, serve_epoch

from protocol.rules.beacon import genesis_seed
from trainer.artifacts import LocalArtifacts
from trainer.delta import dequantize
from trainer.inner import EpochContext
from trainer.island import spawn_island
from trainer.model import parameter_shapes
from trainer.outer import GlobalState, outer_step
from verifier.adversaries import Honest
from verifier.replay import check_challenge


def _check_all(spec, dataset, served) -> None:
    for g in range(spec.train.segments):
        report = check_challenge(spec, dataset, served.challenge(g), served.source, served.theta,
                                 served.ctx.prev_epoch_seed)
        assert report.outcome == "pass", report.reason
        # A pass is not enough: within one compute profile the replay is exact (docs/verification.md).
        assert report.measurements["bitwise"] is True and report.measurements["distance"] == 0, report.reason


def test_a_one_thread_host_passes_a_two_thread_validator(spec, dataset, honest, threads) -> None:
    threads(2)
    _check_all(spec, dataset, honest)


@pytest.mark.slow
def test_thread_counts_across_epochs(spec, dataset, tmp_path, threads) -> None:
    # Three epochs of an honest host at 2 threads (the model trains, θ moves), each replayed at 1 and 2.
    theta, prev = GlobalState.initial(spec), genesis_seed(spec.run_id())
    for epoch in range(3):
        threads(2)
        served = serve_epoch(spec, dataset, Honest(), tmp_path, epoch=epoch, theta=theta, prev_seed=prev)
        for validator_threads in (1, 2):
            threads(validator_threads)
            _check_all(spec, dataset, served)
        delta = dequantize(served.result.payload, parameter_shapes(spec), spec.quantization)
        theta, prev = outer_step(theta, delta, spec.outer), bytes([epoch + 1]) * 32


@pytest.mark.slow
def test_two_process_island_passes_in_one_process(spec, dataset, cache_dir, tmp_path, threads) -> None:
    theta = GlobalState.initial(spec)
    ctx = EpochContext(spec.run_id(), 0, HOST, genesis_seed(spec.run_id()))
    record = spawn_island(2, spec, ctx, theta, tmp_path, threads=1, cache_dir=cache_dir)
    from trainer.inner import EpochResult

    result = EpochResult(record.commitment, record.leaf_hashes, [], {}, None)
    served = Served(spec, ctx, theta, result, LocalArtifacts(tmp_path, spec.run_id(), HOST), Honest())
    for validator_threads in (1, 2):
        threads(validator_threads)
        _check_all(spec, dataset, served)
