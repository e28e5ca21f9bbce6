"""The one inner step: bitwise replayable in the same and in a fresh process; accumulation; RNG."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from suite_env import small_spec

from trainer.inner import replay_segment, start_checkpoint
from trainer.outer import GlobalState
from trainer.step import Stepper, TrainState, micro_seed


def _start(spec, key_epoch: int = 0):
    return start_checkpoint(spec, GlobalState.initial(spec).params, key_epoch)


def _rel(a: TrainState, b: TrainState) -> float:
    num = sum(float(((a.params[n].double() - b.params[n].double()) ** 2).sum()) for n in a.params)
    den = sum(float((b.params[n].double() ** 2).sum()) for n in b.params)
    return math.sqrt(num / den)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_replay_in_the_same_process_is_bitwise_equal(spec, dataset, ctx, device) -> None:
    # Two steppers (fresh allocations, fresh kernels' workspaces) on one device compute the same bits:
    # what lets a validator on the host's compute profile replay at τ far below any cheat.
    a = replay_segment(spec, dataset, ctx, _start(spec), stepper=Stepper(spec, device=device))
    b = replay_segment(spec, dataset, ctx, _start(spec), stepper=Stepper(spec, device=device))
    assert a.leaf_hash() == b.leaf_hash()
    two = start_checkpoint(spec, GlobalState.initial(spec).params, 0, micro_batches=2)  # accumulation too
    assert (replay_segment(spec, dataset, ctx, two, stepper=Stepper(spec, device=device)).leaf_hash()
            == replay_segment(spec, dataset, ctx, two, stepper=Stepper(spec, device=device)).leaf_hash())
    assert a.state.step == spec.train.segment_steps and len(a.losses) == spec.train.segment_steps
    assert not torch.equal(a.state.params["tok.weight"], _start(spec).state.params["tok.weight"])


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "cpu"])  # on the CPU: tests/verifier/test_muon.py
def test_a_muon_replay_on_the_gpu_is_bitwise_equal(dataset, ctx, device) -> None:
    # Muon's Newton–Schulz runs in bfloat16 on the device: its replays must still agree bit for bit,
    # with accumulation too, and differ from AdamW's segment (Muon did step the matrices).
    muon = small_spec(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8, "inner_optimizer": "muon"})
    ends = []
    for micro in (1, 2):
        start = start_checkpoint(muon, GlobalState.initial(muon).params, 0, micro_batches=micro)
        a, b = (replay_segment(muon, dataset, ctx, start, stepper=Stepper(muon, device=device)) for _ in range(2))
        assert a.leaf_hash() == b.leaf_hash()
        ends.append(a)
    adamw = small_spec()
    plain = replay_segment(adamw, dataset, ctx, _start(adamw), stepper=Stepper(adamw, device=device))
    name = "blocks.0.mlp.fc.weight"
    assert not torch.equal(ends[0].state.params[name], plain.state.params[name])


CHILD = """
import sys
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, replay_segment, start_checkpoint
from trainer.outer import GlobalState
configure(threads=1)
spec = RunSpec.from_canonical(sys.argv[1])
ctx = EpochContext(bytes.fromhex(sys.argv[2]), 0, sys.argv[3], bytes.fromhex(sys.argv[4]))
dataset = Dataset.load(spec.data, __import__("pathlib").Path(sys.argv[5]))
start = start_checkpoint(spec, GlobalState.initial(spec).params, 0)
print(replay_segment(spec, dataset, ctx, start).leaf_hash().hex())
"""


def test_replay_in_a_fresh_process_is_bitwise_equal(spec, dataset, ctx, cache_dir, threads) -> None:
    threads(1)
    here = replay_segment(spec, dataset, ctx, _start(spec)).leaf_hash().hex()
    out = subprocess.run([sys.executable, "-c", CHILD, spec.canonical().decode(), ctx.run_id.hex(), ctx.host,
                          ctx.prev_epoch_seed.hex(), str(cache_dir)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


def test_load_export_round_trip_and_misfit_state(spec) -> None:
    stepper = Stepper(spec)
    state = _start(spec).state
    state.step, state.exp_avg["tok.weight"] = 7, torch.full_like(state.exp_avg["tok.weight"], 0.5)
    stepper.load(state)
    out = stepper.export()
    assert out.step == 7 and out.rng_key == state.rng_key
    assert all(torch.equal(out.params[n], state.params[n]) and torch.equal(out.exp_avg[n], state.exp_avg[n])
               for n in state.params)
    del state.params["head.weight"]
    with pytest.raises(ValueError, match="does not fit the model"):
        stepper.load(state)


def test_gradient_accumulation_matches_one_big_batch_within_float_error(spec, dataset, ctx) -> None:
    start = _start(spec)
    one = replay_segment(spec, dataset, ctx, start)
    start.micro_batches = 4
    four = replay_segment(spec, dataset, ctx, start)
    assert four.micro_batches == 4
    assert 0 < _rel(four.state, one.state) < 1e-5  # same maths, another summation order
    assert torch.allclose(four.losses, one.losses, rtol=1e-6)
    with pytest.raises(ValueError, match="equal micro-batches"):
        x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, 0, 8)
        Stepper(spec).step(x, y, micro_batches=3)


def test_randomness_comes_from_the_committed_key_only(dataset, ctx) -> None:
    spec = small_spec(model={"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64,
                                        "dropout": "0.2"}})
    torch.manual_seed(1)
    a = replay_segment(spec, dataset, ctx, _start(spec))
    torch.manual_seed(2)  # the global RNG state does not leak into the step
    b = replay_segment(spec, dataset, ctx, _start(spec))
    assert a.leaf_hash() == b.leaf_hash()
    other_key = replay_segment(spec, dataset, ctx, _start(spec, key_epoch=1))
    assert not torch.equal(other_key.state.params["tok.weight"], a.state.params["tok.weight"])
    assert len({micro_seed(5, s, m) for s in range(8) for m in range(8)}) == 64


def test_threads_training_at_once_each_draw_their_own_masks(dataset, ctx) -> None:
    """A pipelined host trains on one thread while another recomputes a challenged leaf, and a
    simulation replays beside its hosts' trainings: with dropout, each segment still draws the
    masks of its own committed key, and a model built meanwhile still starts at θ_0."""
    from concurrent.futures import ThreadPoolExecutor

    from trainer.model import build_model

    spec = small_spec(model={"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64,
                                        "dropout": "0.2"}})
    theta_0 = GlobalState.initial(spec).params

    def segment(key_epoch: int) -> str:
        return replay_segment(spec, dataset, ctx, _start(spec, key_epoch)).leaf_hash()

    def built() -> bool:
        return all(torch.equal(p, theta_0[n]) for n, p in build_model(spec).state_dict().items() if n in theta_0)

    alone = [segment(0), segment(1)]
    with ThreadPoolExecutor(3) as pool:
        runs = [pool.submit(segment, k) for k in (0, 1, 0, 1)]
        builds = [pool.submit(built) for _ in range(20)]
        assert [r.result() for r in runs] == alone * 2
        assert all(b.result() for b in builds)


def test_a_diverged_step_raises(spec, dataset, ctx) -> None:
    stepper = Stepper(spec)
    state = _start(spec).state
    state.params["ln_f.weight"] = torch.full_like(state.params["ln_f.weight"], float("nan"))
    stepper.load(state)
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, 0, 8)
    with pytest.raises(ValueError, match="not finite at inner step 0"):
        stepper.step(x, y)


def test_the_step_runs_on_the_device_it_is_given(spec, dataset, ctx) -> None:
    # load() takes and export() returns CPU tensors wherever the step computes: a stepper on an
    # explicit device replays like the default one.
    on_cpu = Stepper(spec, device="cpu")
    assert on_cpu.device == torch.device("cpu") and all(p.device.type == "cpu" for p in on_cpu.named.values())
    a = replay_segment(spec, dataset, ctx, _start(spec), stepper=on_cpu)
    assert a.leaf_hash() == replay_segment(spec, dataset, ctx, _start(spec)).leaf_hash()
    for bad, message in (("meta", "only cpu and cuda"), ("nonsense", "unknown device")):
        with pytest.raises(ValueError, match=message):
            Stepper(spec, device=bad)
    if torch.cuda.is_available():
        on_gpu = Stepper(spec, device="cuda")
        b = replay_segment(spec, dataset, ctx, _start(spec), stepper=on_gpu)
        assert all(t.device.type == "cpu" for t in b.state.params.values())
    else:
        with pytest.raises(ValueError, match="no CUDA device"):
            Stepper(spec, device="cuda")
