"""What a daemon says while it follows the chain: each phase as it begins, and what a stuck phase waits for."""

from __future__ import annotations

import logging

import pytest

from node.daemon import PhaseWatch, join_wait
from protocol.keys import PrivateKey
from protocol.views import EpochInfo
from trainer.presets import tiny

HASH = "00" * 32
ALICE, BOB, VAL = (PrivateKey(bytes([i]) * 32).address() for i in (1, 2, 3))


def info(phase: str, hosts: list[str], validators: list[str], *, epoch: int = 0, committed: list[str] | None = None,
         deadline: int = 40) -> EpochInfo:
    return EpochInfo(epoch=epoch, phase=phase, phase_deadline=deadline, started_at=1, model_hash=HASH, prev_seed=HASH,
                     hosts=hosts, validators=validators, committed=committed or [])


def test_join_says_who_is_missing_and_how_to_add_them() -> None:
    spec = tiny()  # at least 1 host and 1 validator
    assert join_wait(info("join", [ALICE], []), spec) == (
        "1 of 1 hosts joined, 0 of 1 validators — the epoch cannot start without 1 more validator "
        "(veriloco validator bond, then validator run)")
    two = spec.with_changes(phases={"min_hosts": 2, "min_validators": 2})
    text = join_wait(info("join", [], []), two)
    assert "without 2 more hosts (veriloco host bond, then host run) and 2 more validators" in text
    assert "minimums met; the phase closes at height 40" in join_wait(info("join", [ALICE], [VAL]), spec)


def test_a_phase_is_logged_once_and_a_long_wait_every_so_often(caplog: pytest.LogCaptureFixture) -> None:
    watch = PhaseWatch(tiny(), "alice", every=0.0)
    with caplog.at_level(logging.INFO, logger="node.daemon"):
        assert watch.observe(info("join", [ALICE], [])) == "alice epoch 0 phase join (deadline height 40)"
        waiting = watch.observe(info("join", [ALICE], []))
        assert waiting is not None and waiting.startswith("alice waiting in join of epoch 0 for ")
        assert waiting.endswith("0 of 1 validators — the epoch cannot start without 1 more validator "
                                "(veriloco validator bond, then validator run)")
        assert watch.observe(info("train", [ALICE, BOB], [VAL], deadline=90)) == \
            "alice epoch 0 phase train (deadline height 90)"
        assert "1 of 2 hosts committed" in (watch.observe(info("train", [ALICE, BOB], [VAL], committed=[BOB])) or "")
    assert caplog.records[0].getMessage() == "alice epoch 0 phase join (deadline height 40)"
    quiet = PhaseWatch(tiny(), "alice", every=3600.0)
    quiet.observe(info("join", [ALICE], []))
    assert quiet.observe(info("join", [ALICE], [])) is None  # not yet due
