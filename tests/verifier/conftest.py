"""Fixtures: the small run (16 steps, 4 segments of 4, batch 8), its dataset, an honest served epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.data import Dataset
from verifier.adversaries import Honest

from verifier_env import Served, serve_epoch, small_spec


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
def spec():
    return small_spec()


@pytest.fixture(scope="session")
def honest(spec, dataset, tmp_path_factory) -> Served:
    """An honest host's epoch 0, trained once per session (tests must not modify its files)."""
    return serve_epoch(spec, dataset, Honest(), tmp_path_factory.mktemp("honest"))


@pytest.fixture
def threads():
    """Set torch's thread count inside a test; restored afterwards."""
    old = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(old)
