"""Fixtures of the verifier tests (the spec, dataset and threads are the suite's, in tests/conftest.py)."""

from __future__ import annotations

import pytest
from verifier_env import Served, serve_epoch


@pytest.fixture(scope="session")
def honest(spec, dataset, tmp_path_factory: pytest.TempPathFactory) -> Served:
    """An honest host's epoch 0 (tests must not modify its files)."""
    from verifier.adversaries import Honest

    return serve_epoch(spec, dataset, Honest(), tmp_path_factory.mktemp("honest"))
