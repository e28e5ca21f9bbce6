"""A validator refuses, at start, a run it could not vote in: one whose validation split cannot hold
the probe's windows and a gain dispute's as many again (``trainer.probe.check_probe_windows``;
docs/verification.md, "The probe"). Else every honest vote on a gain dispute would fail to compute,
the class would be silent and the dispute unresolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from node.validator import ValidatorNode
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.data import Dataset
from trainer.presets import tiny


def no_peers(endpoint: str) -> ArtifactSource:
    raise ArtifactUnavailable(f"no peers here: {endpoint}")


def test_a_validator_refuses_probe_windows_its_split_cannot_hold_twice(tmp_path: Path, dataset: Dataset) -> None:
    operator, validator = PrivateKey(b"\x31" * 32), PrivateKey(b"\x32" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, validator)})
    ledger = deploy_embedded(chain, operator, tiny(), "00" * 32, operator.address())
    # A corpus with a small validation split (tiny's own holds far more than MAX_PROBE_WINDOWS twice).
    span = 100
    dataset = Dataset(dataset.train, dataset.val[: dataset.seq_len + span], dataset.seq_len, dataset.hash)
    fits = tiny().with_changes(verification={"probe_windows": span // 2})
    ValidatorNode(ledger, validator, fits, dataset, tmp_path / "fits", no_peers)
    too_many = tiny().with_changes(verification={"probe_windows": span // 2 + 1})
    with pytest.raises(ValueError, match=rf"probe_windows = {span // 2 + 1} needs .* lower probe_windows to at "
                                         rf"most {span // 2}"):
        ValidatorNode(ledger, validator, too_many, dataset, tmp_path / "too_many", no_peers)
