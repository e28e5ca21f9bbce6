"""What a daemon says while it follows the chain: each phase as it begins, and what a stuck phase waits for;
and what following it costs: one chain read per tick for the loop."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import ContractBackend, Ledger, LedgerError
from chain.metered import MeteredBackend
from node.daemon import Daemon, PhaseWatch, join_wait
from node.validator import ValidatorNode
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.views import EpochInfo, Member, ParticipantStatus
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
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


def bonded(address: str, role: str, stake: int, endpoint: str = "http://127.0.0.1:8101") -> Member:
    return Member(address=address, role=role, endpoint=endpoint, bonded=str(stake))


def test_a_host_slashed_below_its_minimum_is_told_it_is_the_one_missing() -> None:
    # Issue 29: a host slashed to half its stake was told the epoch needed "1 more host" — itself.
    spec = tiny()  # min_host_stake 10INJ
    members = [bonded(ALICE, "host", 5 * 10**18), bonded(VAL, "validator", 5 * 10**18)]
    text = join_wait(info("join", [], [VAL]), spec, members, me=(ALICE, "host"))
    assert text == (
        f"0 of 1 hosts joined, 1 of 1 validators — the epoch cannot start without 1 more host: this host ({ALICE}) "
        "cannot join, it has 5INJ (5000000000000000000inj) bonded, below the host minimum of 10INJ "
        "(10000000000000000000inj) — bond 5INJ (5000000000000000000inj) more: "
        "veriloco host bond 5INJ --endpoint http://127.0.0.1:8101")
    # Unbonded entirely (or never bonded): the whole minimum, and no endpoint to keep.
    gone = join_wait(info("join", [], [VAL]), spec, members[1:], me=(ALICE, "host"))
    assert "it has 0INJ (0inj) bonded" in gone and gone.endswith("veriloco host bond 10INJ")
    # The validator daemon of the same run is not told about itself: it names who is bonded and idle.
    other = join_wait(info("join", [], [VAL]), spec, [*members, bonded(BOB, "host", 10**19)], me=(VAL, "validator"))
    assert other.endswith(f"without 1 more host (bonded but not joined: {BOB} (host run))")
    # Nobody else has the minimum bonded (the slashed host does not count): how to add a host.
    assert join_wait(info("join", [], [VAL]), spec, members, me=(VAL, "validator")).endswith(
        "1 more host (no other host has the minimum bonded: veriloco host bond, then host run)")


def test_a_join_line_names_at_most_a_few_idle_members() -> None:
    spec = tiny().with_changes(phases={"min_hosts": 3, "min_validators": 1})
    idle = [bonded(PrivateKey(bytes([40 + i]) * 32).address(), "host", 10**19) for i in range(8)]
    text = join_wait(info("join", [], [VAL]), spec, idle, me=(VAL, "validator"))
    named = ", ".join(m.address for m in idle[:5])
    assert text.endswith(f"without 3 more hosts (bonded but not joined: {named} and 3 more (host run))")


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


def status(phase: str, *, epoch: int = 0, deadline: int = 40) -> ParticipantStatus:
    return ParticipantStatus(epoch=epoch, phase=phase, phase_deadline=deadline, model_hash=HASH, prev_seed=HASH,
                             address=VAL, joined=True, role="validator")


def test_the_watch_follows_the_nodes_status_and_reads_the_epoch_only_for_a_due_count() -> None:
    epochs: list[int] = []
    heights: list[int] = []

    def read_epoch(number: int) -> EpochInfo:
        epochs.append(number)
        return info("join", [], [VAL], epoch=number)

    def read_height() -> int:
        heights.append(1)
        return 33

    quiet = PhaseWatch(tiny(), "val", every=3600.0)
    assert quiet.observe(status("join"), read_epoch, read_height) == "val epoch 0 phase join (deadline height 40)"
    assert quiet.observe(status("join"), read_epoch, read_height) is None
    assert quiet.observe(status("reveal", deadline=70), read_epoch, read_height) == \
        "val epoch 0 phase reveal (deadline height 70)"
    assert epochs == [] and heights == []  # a new phase or nothing due: no read of its own

    chatty = PhaseWatch(tiny(), "val", every=0.0)
    chatty.observe(status("join", epoch=3), read_epoch, read_height)
    line = chatty.observe(status("join", epoch=3), read_epoch, read_height) or ""
    assert "0 of 1 hosts joined, 1 of 1 validators" in line and epochs == [3] and heights == []
    chatty.observe(status("reveal", epoch=3, deadline=70), read_epoch, read_height)
    assert (chatty.observe(status("reveal", epoch=3, deadline=70), read_epoch, read_height) or "").endswith(
        ": it closes at height 70 (now 33)")
    assert epochs == [3] and heights == [1]  # no counts to give: the height, not the epoch

    def down(*_: object) -> EpochInfo:
        raise LedgerError("node unreachable")

    # A chain that does not answer costs the line its details, never the tick.
    assert (chatty.observe(status("reveal", epoch=3, deadline=70), down, down) or "").endswith(
        ": it closes at height 70")
    chatty.observe(status("train", epoch=3, deadline=90), down, down)
    assert (chatty.observe(status("train", epoch=3, deadline=90), down, down) or "").endswith(
        ": it closes at height 90")


class CountingBackend(MeteredBackend):
    """A transparent backend that counts what it is asked: each smart query by its name, and heights."""

    def __init__(self, inner: ContractBackend) -> None:
        super().__init__(inner)
        self.reads: Counter[str] = Counter()

    def query(self, msg: dict[str, Any]) -> Any:
        self.reads[next(iter(msg))] += 1
        return super().query(msg)

    def height(self) -> int:
        self.reads["height"] += 1
        return super().height()

    def raw(self, key: bytes) -> bytes | None:
        self.reads["raw"] += 1
        return super().raw(key)


@pytest.fixture
def counted(tmp_path, dataset) -> tuple[CountingBackend, ValidatorNode]:
    """A bonded validator on a fresh embedded chain (a run of at least one host, which never comes),
    reading the chain through a :class:`CountingBackend`."""
    spec = tiny()
    operator, validator = PrivateKey(b"\x21" * 32), PrivateKey(b"\x22" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, validator)})
    ledger = deploy_embedded(chain, operator, spec, HASH, operator.address())
    ledger.bond(validator, "validator", "http://127.0.0.1:1", int(spec.economics.min_validator_stake))
    backend = CountingBackend(ledger.backend)

    def no_peers(endpoint: str) -> ArtifactSource:
        raise ArtifactUnavailable(f"no peers here: {endpoint}")

    node = ValidatorNode(Ledger(backend), validator, spec, dataset, tmp_path, no_peers, name="val")
    return backend, node


def test_a_daemon_tick_reads_the_chain_once_for_its_loop(counted) -> None:
    backend, node = counted
    daemon = Daemon(node, node.ledger, poll=0.0)
    daemon.watch.every = 3600.0
    assert daemon.step()  # joins epoch 0 (reading its membership on the way)
    assert backend.reads["member"] == 1

    backend.reads.clear()
    for _ in range(5):
        assert not daemon.step()  # joined; waiting for a host
    # Steady state: the status the loop and the node share, plus the height the node's
    # maybe_advance reads (ParticipantStatus does not carry the chain's height).
    assert backend.reads == {"participant": 5, "height": 5}

    backend.reads.clear()
    daemon.watch.every = 0.0
    assert not daemon.step()  # a "waiting" line is due: the epoch is read for its counts,
    # and the members (one page) to name who is missing
    assert backend.reads == {"participant": 1, "height": 1, "epoch": 1, "members": 1}


def test_a_daemon_at_its_last_epoch_stops_before_the_node_acts(counted, caplog) -> None:
    backend, node = counted
    daemon = Daemon(node, node.ledger, poll=0.0, max_epochs=0)
    with caplog.at_level(logging.INFO, logger="node.daemon"):
        assert not daemon.step()
    assert daemon._stop.is_set() and "val reached epoch 0; stopping" in caplog.text
    assert backend.reads == {"participant": 1}  # read once, and did not join
    assert not node.status().joined
