"""Helpers for the verifier tests: one host's epoch served from disk, its challenges, tampering.

Test modules import what they use by name; the fixtures (``honest``) are in ``conftest.py``, and
the small spec, the dataset, thread settings and named parties come from the suite's
(``tests/conftest.py``, ``suite_env``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suite_env import HOST, VALIDATOR

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from protocol.views import Challenge
from trainer.artifacts import ArtifactSource, LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult
from trainer.outer import GlobalState


@dataclass
class Served:
    """One host's committed epoch and what it serves."""

    spec: RunSpec
    ctx: EpochContext
    theta: GlobalState
    result: EpochResult
    source: ArtifactSource
    behaviour: HostBehaviour

    def challenge(self, segment: int) -> Challenge:
        return Challenge.of(self.result.commitment, self.ctx.host, segment, "local", [VALIDATOR])


def serve_epoch(spec: RunSpec, dataset: Dataset, behaviour: HostBehaviour, root: Path, *, host: str = HOST,
                epoch: int = 0, theta: GlobalState | None = None, prev_seed: bytes | None = None) -> Served:
    """Let ``behaviour`` produce ``host``'s epoch under ``root`` and serve it from disk."""
    theta = theta if theta is not None else GlobalState.initial(spec)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, epoch, host, prev_seed if prev_seed is not None else genesis_seed(run_id))
    result = behaviour.train_epoch(spec, dataset, ctx, theta.params, root)
    source = behaviour.serve(LocalArtifacts(root, run_id, host))
    return Served(spec, ctx, theta, result, source, behaviour)


def leaves_of(served: Served):
    """The committed leaves of a served epoch, read back through its artifact source."""
    from trainer.checkpoint import decode_checkpoint

    return [decode_checkpoint(served.source.checkpoint(served.ctx.epoch, i), served.spec, i)
            for i in range(served.spec.train.segments + 1)]


def commit_leaves(served: Served, leaves, root: Path, payload=None) -> Served:
    """Commit ``leaves`` (and ``payload``) as ``served``'s host would, under another root, and serve them."""
    from verifier.adversaries import Honest
    from verifier.adversaries import commit_leaves as commit

    result = commit(served.spec, served.ctx, leaves, root, payload)
    return Served(served.spec, served.ctx, served.theta, result,
                  LocalArtifacts(root, served.spec.run_id(), served.ctx.host), Honest())


class Tampered(ArtifactSource):
    """Serves what ``inner`` serves, passed through the given rewrites ``(epoch, leaf, value) -> value``."""

    def __init__(self, inner: ArtifactSource, *, checkpoint=None, proof=None, delta=None, losses=None) -> None:
        self.inner = inner
        self.rewrite = {"checkpoint": checkpoint, "proof": proof, "delta": delta, "losses": losses}

    def _apply(self, kind, epoch, leaf, value):
        f = self.rewrite[kind]
        return f(epoch, leaf, value) if f else value

    def checkpoint(self, epoch, leaf):
        return self._apply("checkpoint", epoch, leaf, self.inner.checkpoint(epoch, leaf))

    def proof(self, epoch, leaf):
        return self._apply("proof", epoch, leaf, self.inner.proof(epoch, leaf))

    def delta(self, epoch):
        return self._apply("delta", epoch, None, self.inner.delta(epoch))

    def losses(self, epoch):
        return self._apply("losses", epoch, None, self.inner.losses(epoch))

    def global_state(self, model_hash):
        return self.inner.global_state(model_hash)
