"""Shared fixtures: a small version of the tiny preset, its dataset (cached per session), an epoch context."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.inner import EpochContext


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dataset-cache")


@pytest.fixture(scope="session")
def dataset(cache_dir) -> Dataset:
    return Dataset.load(small_spec().data, cache_dir)


@pytest.fixture
def spec() -> RunSpec:
    return small_spec()


@pytest.fixture
def ctx(spec) -> EpochContext:
    run_id = spec.run_id()
    return EpochContext(run_id, 0, HOST, genesis_seed(run_id))


@pytest.fixture
def threads():
    """Set torch's thread count inside a test; restored afterwards."""
    old = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(old)
