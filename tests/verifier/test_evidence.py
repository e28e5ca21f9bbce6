"""A verdict's evidence holds what only a replay produces (the replay witness), equal bit for bit
among honest replays of one compute profile — at any thread count, in a fresh process — and
different for another replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trainer.checkpoint import decode_checkpoint
from trainer.inner import EpochContext
from verifier.replay import _evidence, check_challenge, replay_segment

FRESH = """
import json, sys
from suite_env import small_spec
from protocol.views import Challenge
from trainer.artifacts import LocalArtifacts
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.outer import GlobalState
from verifier.replay import check_challenge
configure(int(sys.argv[3]))
spec = small_spec()
args = json.loads(sys.argv[1])
source = LocalArtifacts(__import__("pathlib").Path(args["root"]), spec.run_id(), args["host"])
out = []
for c in args["challenges"]:
    challenge = Challenge.model_validate(c)
    report = check_challenge(spec, Dataset.load(spec.data, __import__("pathlib").Path(sys.argv[2])), challenge, source,
                             GlobalState.initial(spec), bytes.fromhex(args["seed"]))
    out.append([report.outcome, report.verdict.evidence, report.measurements.get("replay_witness")])
print(json.dumps(out))
"""


def _reports(spec, dataset, honest):
    return [check_challenge(spec, dataset, honest.challenge(g), honest.source, honest.theta,
                            honest.ctx.prev_epoch_seed) for g in range(spec.train.segments)]


def test_a_pass_carries_the_replay_witness_equal_at_every_thread_count(spec, dataset, honest, threads) -> None:
    found = []
    for n in (1, 2):
        threads(n)
        found.append([(r.outcome, r.verdict.evidence, r.measurements["replay_witness"])
                      for r in _reports(spec, dataset, honest)])
    assert found[0] == found[1]
    assert all(outcome == "pass" for outcome, _, _ in found[0])
    witnesses = {w for _, _, w in found[0]}
    assert len(witnesses) == spec.train.segments  # one per segment
    leaf_hashes = {h.hex() for h in honest.result.leaf_hashes}
    assert not witnesses & leaf_hashes  # not a leaf: nothing the host committed


def test_the_evidence_is_the_same_in_a_fresh_process(spec, dataset, honest, cache_dir, tmp_path) -> None:
    here = [(r.outcome, r.verdict.evidence, r.measurements["replay_witness"]) for r in _reports(spec, dataset, honest)]
    root = Path(honest.source.root) if hasattr(honest.source, "root") else None
    assert root is not None
    args = {"root": str(root), "host": honest.ctx.host, "seed": honest.ctx.prev_epoch_seed.hex(),
            "challenges": [honest.challenge(g).model_dump(mode="json") for g in range(spec.train.segments)]}
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent), *sys.path])}
    for n in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", FRESH, json.dumps(args), str(cache_dir), n], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert [tuple(x) for x in json.loads(done.stdout)] == here


def test_the_evidence_of_a_pass_needs_the_witness(spec, dataset, honest) -> None:
    # A validator that fetched and hashed everything but did not replay has every other measurement
    # (a bitwise pass's replayed hash is leaf g + 1's); without the witness its evidence differs.
    report = check_challenge(spec, dataset, honest.challenge(1), honest.source, honest.theta,
                             honest.ctx.prev_epoch_seed)
    lazy = {k: v for k, v in report.measurements.items() if k != "replay_witness"}
    assert _evidence(honest.challenge(1), "pass", "ok", lazy) != report.verdict.evidence
    assert _evidence(honest.challenge(1), "pass", "ok", report.measurements) == report.verdict.evidence
    # Floats (reductions whose last bits may follow the thread count) are not part of it.
    noisy = {**report.measurements, "update_norm": report.measurements["update_norm"] * (1 + 2 ** -50)}
    assert _evidence(honest.challenge(1), "pass", "ok", noisy) == report.verdict.evidence


def test_the_witness_follows_the_data_the_lr_and_the_start(spec, dataset, honest) -> None:
    start = decode_checkpoint(honest.source.checkpoint(0, 1), spec, 1)
    ctx = honest.ctx
    base = replay_segment(spec, dataset, ctx, start)[1]
    assert replay_segment(spec, dataset, ctx, start)[1] == base
    other_data = EpochContext(ctx.run_id, ctx.epoch, ctx.host, bytes(32))
    assert replay_segment(spec, dataset, other_data, start)[1] != base
    other_lr = spec.with_changes(train={"lr": str(float(spec.train.lr) * 1.001)})
    assert replay_segment(other_lr, dataset, ctx, start)[1] != base
    later = decode_checkpoint(honest.source.checkpoint(0, 2), spec, 2)
    assert replay_segment(spec, dataset, ctx, later)[1] != base


def test_a_replay_fail_carries_the_witness_too(spec, dataset, honest) -> None:
    report = check_challenge(spec, dataset, honest.challenge(1), honest.source, honest.theta, bytes(32))
    assert (report.outcome, report.check) == ("fail", "distance")
    assert len(report.measurements["replay_witness"]) == 64
