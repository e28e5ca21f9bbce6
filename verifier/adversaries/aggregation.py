"""Attacks on the robust outer aggregation: a Δ steered against what the honest hosts send.

ALIE and IPM as published assume a Byzantine worker can send any vector. Here Δ must be
``θ_e − θ_S`` of the committed last leaf, and the last segment is always replayed, so the free
form of both (what ``alie`` and ``ipm`` commit) is caught like any forged Δ. What they can still
do is reach the same Δ through faked segments (detected at the rate of ``lazy``) or inside the
replay tolerance τ (a relative error of at most τ per segment): that residual is what robust
aggregation must absorb (``protocol.tensors.aggregation``; measured in ``bench/aggregation_attacks.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource
from trainer.delta import decode_delta, dequantize
from trainer.inner import EpochContext
from trainer.model import parameter_shapes
from verifier.adversaries.forged import HonestThenRecommit


def peer_delta(spec: RunSpec, source: ArtifactSource, epoch: int) -> dict[str, torch.Tensor]:
    """The float Δ a peer serves for ``epoch`` (dequantized)."""
    payload = decode_delta(source.delta(epoch), spec)
    return dequantize(payload, parameter_shapes(spec), spec.quantization)


class IPM(HonestThenRecommit):
    """Inner-product manipulation (Xie et al. 2020): commits −ε × its honest Δ (a proxy for the mean)."""

    name = "ipm"
    PARAMS = ("epsilon",)

    def __init__(self, epsilon: float = 0.5, seed: int = 0) -> None:
        super().__init__(seed)
        self.epsilon = float(epsilon)

    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: -self.epsilon * t for n, t in honest.items()}


class ALIE(HonestThenRecommit):
    """A little is enough (Baruch et al. 2019): commits mean − z·std of its peers' Δs."""

    name = "alie"
    PARAMS = ("z",)

    def __init__(self, z: float = 1.0, peers: Sequence[ArtifactSource] = (), seed: int = 0) -> None:
        super().__init__(seed)
        if not peers:
            raise ValueError("alie needs the artifact sources of its peers (peers=...)")
        self.z, self.peers = float(z), list(peers)

    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        deltas = [peer_delta(spec, p, ctx.epoch) for p in self.peers] + [honest]
        out = {}
        for n in honest:
            stack = torch.stack([d[n] for d in deltas])
            out[n] = stack.mean(0) - self.z * stack.std(0, unbiased=False)
        return out
