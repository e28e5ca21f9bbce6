"""Helpers and fixtures for the verifier tests: a small run, hosts, epochs served from disk, challenges.

The fixtures live here rather than in a ``conftest.py``: test modules elsewhere import their own
``conftest`` by that name, and a second module called ``conftest`` on ``sys.path`` would shadow
theirs when both directories are collected in one session. Test modules import what they use::

    from verifier_env import cache_dir, dataset, honest, one_thread, spec, threads  # noqa: F401
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from protocol.keys import encode_address
from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from protocol.views import Challenge
from trainer.artifacts import ArtifactSource, LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult
from trainer.outer import GlobalState
from trainer.presets import tiny


def address(i: int) -> str:
    """A valid bech32 address, distinct for every ``i``."""
    return encode_address(i.to_bytes(20, "big"))


HOST = address(1)
VICTIM = address(2)
VALIDATOR = address(99)


def small_spec(**changes) -> RunSpec:
    """The tiny preset with a short epoch (16 steps, 4 segments of 4) and batch 8."""
    spec = tiny().with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8})
    return spec.with_changes(**changes) if changes else spec


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


# --------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Replays are exact at equal thread counts; one thread is also the fast choice on a busy 2-core
    machine. Tests about other thread counts set them with ``threads``."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dataset-cache")


@pytest.fixture(scope="session")
def dataset(cache_dir) -> Dataset:
    return Dataset.load(small_spec().data, cache_dir)


@pytest.fixture(scope="session")
def spec() -> RunSpec:
    return small_spec()


@pytest.fixture(scope="session")
def honest(one_thread, spec, dataset, tmp_path_factory) -> Served:
    """An honest host's epoch 0 (tests must not modify its files)."""
    from verifier.adversaries import Honest

    return serve_epoch(spec, dataset, Honest(), tmp_path_factory.mktemp("honest"))


@pytest.fixture
def threads():
    """Set torch's thread count inside a test; restored afterwards."""
    old = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(old)
