"""Agreement on the next model: hosts that compute θ_{e+1} on their own get the same global-state hash.

Two separate processes, at different torch thread counts, each read θ_e and the accepted Δs as they
travel (quantized payloads in safetensors, decoded and dequantized), in different arrival orders,
then aggregate with every rule and apply the outer Nesterov step. The hashes they would propose
must be equal, rule by rule (and differ between rules, so the comparison means something) — and so
must the proposers' whole path: the peer bound, which leaves the outlier out and clips a small
tensor forged at 2.5× its peers' median (``verifier.measure.within_peer_bound``), then the default rule.

Run as a script, this file is the worker process: ``python test_agreement.py DIR THREADS ORDER_SEED``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import torch

from protocol.rules.spec import AggregationSpec, RunSpec
from protocol.tensors.aggregation import RULES, aggregate
from trainer.delta import decode_delta, dequantize, encode_delta, quantize
from trainer.model import parameter_shapes
from trainer.outer import GlobalState, load_global, outer_step
from verifier.measure import PEER_POOL_COORDINATES, within_peer_bound

HOSTS = [f"inj1host{i:02d}" for i in range(6)]


def next_hashes(directory: Path, order_seed: int) -> dict[str, str]:
    """θ_{e+1} hash per rule from the files in ``directory``, reading the Δs in a shuffled order."""
    spec = RunSpec.from_canonical((directory / "spec.json").read_bytes())
    theta = load_global(directory / "theta.safetensors", spec)
    shapes = parameter_shapes(spec)
    arrival = sorted(HOSTS)
    random.Random(order_seed).shuffle(arrival)
    deltas = {}
    for host in arrival:
        payload = decode_delta((directory / f"{host}.safetensors").read_bytes(), spec, what=f"Δ of {host}")
        deltas[host] = dequantize(payload, shapes, spec.quantization)
    out = {}
    for rule in sorted(RULES):
        agg = spec.aggregation.model_copy(update={"rule": rule})
        out[rule] = outer_step(theta, aggregate(agg, deltas), spec.outer).hash().hex()
    bound = within_peer_bound(deltas)
    out["peer_bound"] = outer_step(theta, aggregate(spec.aggregation, bound.kept), spec.outer).hash().hex()
    out["_clipped"] = json.dumps(bound.clipped, sort_keys=True)
    out["_left_out"] = ",".join(sorted(bound.left_out))
    out["_arrival"] = ",".join(arrival)
    out["_threads"] = str(torch.get_num_threads())
    return out


def write_inputs(spec: RunSpec, directory: Path) -> None:
    """θ_e (trained-looking: one outer step taken, so the momentum is not zero) and six quantized Δs."""
    gen = torch.Generator().manual_seed(7)
    shapes = parameter_shapes(spec)
    theta = GlobalState.initial(spec)
    theta = outer_step(theta, {n: 1e-3 * torch.randn(tuple(s), generator=gen) for n, s in shapes.items()}, spec.outer)
    theta.save(directory / "theta.safetensors")
    (directory / "spec.json").write_bytes(spec.canonical())
    common = {n: 1e-2 * torch.randn(tuple(s), generator=gen) for n, s in shapes.items()}
    for i, host in enumerate(HOSTS):
        if i == len(HOSTS) - 1:  # one outlier, so the robust rules differ from the mean
            delta = {n: -10 * t for n, t in common.items()}
        else:
            delta = {n: t + 5e-3 * torch.randn(t.shape, generator=gen) for n, t in common.items()}
        if i == len(HOSTS) - 2:  # one small tensor forged at 2.5×, hidden in the pool of small ones
            small = min(n for n, t in delta.items() if t.numel() < PEER_POOL_COORDINATES)
            delta[small] = 2.5 * delta[small]
        payload = quantize(delta, spec.quantization)
        (directory / f"{host}.safetensors").write_bytes(encode_delta(payload, spec.quantization))


def _worker(directory: Path, threads: int, order_seed: int) -> dict[str, str]:
    out = subprocess.run([sys.executable, __file__, str(directory), str(threads), str(order_seed)],
                         check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_two_processes_agree_on_the_next_state_for_every_rule(spec, tmp_path) -> None:
    write_inputs(spec, tmp_path)
    a = _worker(tmp_path, 1, 1)
    b = _worker(tmp_path, 2, 2)
    assert a["_arrival"] != b["_arrival"] and (a["_threads"], b["_threads"]) == ("1", "2")
    for rule in [*RULES, "peer_bound", "_clipped"]:
        assert a[rule] == b[rule], f"{rule}: the two hosts would propose different hashes"
    # The proposers' path did leave the outlier out and clip the forged small tensor (only it).
    assert a["_left_out"] == HOSTS[-1]
    clipped = json.loads(a["_clipped"])
    assert list(clipped) == [HOSTS[-2]] and len(clipped[HOSTS[-2]]) == 1
    assert a["peer_bound"] not in {a[rule] for rule in RULES}
    # The same in this process, with yet another order.
    here = next_hashes(tmp_path, 3)
    assert all(here[rule] == a[rule] for rule in [*RULES, "peer_bound"])
    # The rules do differ on these inputs (one outlier), so equal hashes are not a coincidence.
    assert len({a[rule] for rule in RULES}) >= 5


def test_aggregate_of_a_permutation_is_bitwise_equal_under_threads(spec, threads) -> None:
    # In one process, too: the aggregation result (not only its hash) is the same tensor bits.
    shapes = parameter_shapes(spec)
    gen = torch.Generator().manual_seed(3)
    deltas = {h: {n: torch.randn(tuple(s), generator=gen) for n, s in shapes.items()} for h in HOSTS}
    for rule in RULES:
        agg = AggregationSpec(rule=rule)
        threads(1)
        first = aggregate(agg, deltas)
        threads(2)
        second = aggregate(agg, dict(reversed(list(deltas.items()))))
        assert all(torch.equal(first[n], second[n]) for n in first), rule


if __name__ == "__main__":
    torch.set_num_threads(int(sys.argv[2]))
    print(json.dumps(next_hashes(Path(sys.argv[1]), int(sys.argv[3]))))
