"""Every honest host traps (issue 27, ``trainer.trap``): the draw is a secret function of the host's
own secret, the run and the epoch at the spec's ``trap_probability``; the trapped segment's leaf is
perturbed inside the trap window and stored in full, training goes on from it, a sparse epoch
recomputes around it, and the spec field is omitted from the canonical JSON at its default."""

from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal

import pytest
from suite_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from protocol.rules.encoding import EncodingError, canonical_json
from protocol.rules.spec import RunSpec
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, run_epoch
from trainer.outer import GlobalState
from trainer.recompute import LeafRecomputer
from trainer.trap import Traps, draw
from verifier.measure import EPSILON, compare, param_floor

RUN = hashlib.sha256(b"run").digest()


def test_the_draw_is_a_function_of_the_hosts_secret_at_the_spec_probability() -> None:
    secret, other = b"s" * 32, b"t" * 32
    draws = [draw(secret, RUN, e, 4, 0.2, 1.0) for e in range(4000)]
    assert draws == [draw(secret, RUN, e, 4, 0.2, 1.0) for e in range(4000)]  # deterministic
    trapped = [d.segments for d in draws if d.segments]
    assert abs(len(trapped) / 4000 - 0.2) < 0.025  # 4 standard deviations
    assert {s for (s,) in trapped} == {0, 1, 2, 3}
    # Another secret (or run) draws independently: knowing one host's traps says nothing of another's.
    others = [bool(draw(other, RUN, e, 4, 0.2, 1.0).segments) for e in range(4000)]
    both = sum(a and bool(d.segments) for a, d in zip(others, draws, strict=True)) / 4000
    assert abs(both - 0.04) < 0.015
    assert not any(draw(secret, RUN, e, 4, 0.0, 1.0).segments for e in range(200))
    assert all(len(draw(secret, RUN, e, 4, 1.0, 1.0).segments) == 1 for e in range(200))


def test_the_field_is_omitted_at_its_default_and_a_spelled_out_default_is_refused() -> None:
    spec = small_spec()
    assert spec.verification.trap_probability == Decimal("0.2")
    data = json.loads(spec.canonical())
    assert "trap_probability" not in data["verification"]  # run ids from before the field are unchanged
    data["verification"]["trap_probability"] = "0.2"
    with pytest.raises(EncodingError, match="default-omitted"):
        RunSpec.from_canonical(canonical_json(data))
    other = spec.with_changes(verification={"trap_probability": "0.05"})
    assert json.loads(other.canonical())["verification"]["trap_probability"] == "0.05"
    assert RunSpec.from_canonical(other.canonical()) == other and other.run_id() != spec.run_id()
    with pytest.raises(ValueError, match="trap_probability"):
        spec.with_changes(verification={"trap_probability": "1.5"})


def test_a_trap_is_perturbed_inside_the_window_stored_and_trained_on_from(tmp_path, dataset) -> None:
    # 8 segments, K = 4 (leaves 0, 4, 7, 8 stored): a trap on segment 1 stores leaf 2 in full.
    spec = small_spec(train={"inner_steps": 16, "segment_steps": 2})
    ctx = EpochContext(spec.run_id(), 0, HOST, genesis_seed(spec.run_id()))
    theta = GlobalState.initial(spec).params
    floor = max(param_floor(spec.train, spec.train.segment_steps), EPSILON)
    honest = run_epoch(spec, dataset, ctx, theta, tmp_path / "honest", full_leaf_every=4)
    trapped = run_epoch(spec, dataset, ctx, theta, tmp_path / "trap", full_leaf_every=4,
                        traps=Traps((1,), 7, floor))
    assert honest is not None and trapped is not None
    assert trapped.leaf_hashes[:2] == honest.leaf_hashes[:2]
    assert all(a != b for a, b in zip(trapped.leaf_hashes[2:], honest.leaf_hashes[2:], strict=True))
    store = EpochStore(tmp_path / "trap", ctx.run_id, HOST)
    assert store.leaves_on_disk(0) == [0, 2, 4, 7, 8]
    # The honest replay of the trap segment fails at a distance inside [tau, trap_max_distance].
    recomputer = LeafRecomputer(spec, dataset, store)
    start, leaf = recomputer.materialize(0, 1), store.read_leaf(spec, 0, 2)
    replayed = replay_segment(spec, dataset, ctx, start)
    distance = compare(replayed.state, leaf.state, start.state, spec.train, replayed.losses, leaf.losses).distance
    ver = spec.verification
    assert float(ver.tau) < distance < float(ver.trap_max_distance)
    assert math.isclose(math.log(distance), math.log(math.sqrt(float(ver.tau) * float(ver.trap_max_distance))),
                        abs_tol=0.7)
    # The next segment trains on from the perturbed leaf: its honest replay passes, and a leaf
    # that was not stored is recomputed from the stored trap leaf to the committed hash.
    after = replay_segment(spec, dataset, ctx, leaf)
    assert after.leaf_hash() == trapped.leaf_hashes[3]
    assert recomputer.materialize(0, 3).leaf_hash() == trapped.leaf_hashes[3]
    # A rerun (a restart) sets the same trap: the same commitment.
    again = run_epoch(spec, dataset, ctx, theta, tmp_path / "again", full_leaf_every=4, traps=Traps((1,), 7, floor))
    assert again is not None and again.commitment == trapped.commitment
