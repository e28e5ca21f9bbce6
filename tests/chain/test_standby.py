"""A standby revealer (issue 30, ``node/standby.py``): a second machine with a copy of the
participant's journal reveals the beacon secret of a primary that is down through ``reveal``, with
its own key that the participant named (``set_standby``) or with the participant's key.

The primary is a real :class:`node.participant.Participant` writing its journal (the secret is
durable before the join commits to it); the standby reads a copy of that folder. The named
standby's round trip runs on both backends (the devnet included: the contract's message); the
rest on the embedded chain.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from ledger_env import LedgerEnv

from chain.ledger import ContractError, is_unknown_query
from node.events import NodeEvent
from node.participant import Participant, journal_dir
from node.server import ServerThread
from node.standby import Standby, read_secret, reveal_from
from node.standby_handover import SecretCourier, create_standby_app, standby_limits
from node.standby_handover import standby_key as standby_key_of
from protocol.messages import BeaconReveal
from protocol.rules.beacon import beacon_commit

HOSTS = ["host1", "host2"]
VALIDATORS = ["validator1", "validator2"]


def start(env: LedgerEnv, tmp_path: Path, commit_primary: bool) -> tuple[Participant, int, dict[str, int]]:
    """Bond everyone; host2's primary joins epoch 0 with its journal's secret (host1 and the
    validators join with theirs), commits its training or not, then dies. Returns the primary, the
    funds in all and the members' net balances before the epoch."""
    env.bond_all([*HOSTS, *VALIDATORS])
    total = env.total_funds()
    before = {n: env.net_balance(n) for n in [*HOSTS, *VALIDATORS, "treasury"]}
    primary = Participant(env.ledger, env.key("host2"), env.spec, tmp_path / "primary", name="host2")
    env.join("host2", beacon=beacon_commit(primary.address, 0, primary.secret(0)).hex())
    for name in ["host1", *VALIDATORS]:
        env.join(name)
    env.play_epoch(HOSTS, VALIDATORS, commit=["host1", "host2"] if commit_primary else ["host1"],
                   stop_after="train")
    assert env.epoch(0).phase == "reveal"
    return primary, total, before


def copy_journal(primary: Participant, to: Path) -> Path:
    """What the operator's sync does: the primary's journal folder, copied to the standby."""
    shutil.copytree(journal_dir(primary.root, primary.run_id, primary.address), to)
    return to


def everyone_else_reveals(env: LedgerEnv) -> None:
    for name in ["host1", *VALIDATORS]:
        env.reveal(name, 0)


def row(env: LedgerEnv, name: str):
    return next(h for h in env.report(0).hosts if h.address == env.addr(name))


@pytest.fixture
def env(embedded_env: LedgerEnv) -> LedgerEnv:
    return embedded_env


def test_a_standby_reveals_for_a_dead_primary_which_pays_only_its_excused_absence(env, tmp_path) -> None:
    primary, total, before = start(env, tmp_path, commit_primary=False)
    events: list[NodeEvent] = []
    standby = Standby(env.ledger, env.key("host2"), env.spec, copy_journal(primary, tmp_path / "copy"),
                      grace=0.5, name="host2-standby", on_event=events.append)
    everyone_else_reveals(env)
    status = env.ledger.participant(primary.address)
    due = reveal_from(status, env.spec, 0.5)
    assert status.phase_deadline - env.spec.phases.reveal_blocks < due < status.phase_deadline
    # Within the primary's share of the window the standby waits.
    assert not standby.tick()
    assert not env.ledger.participant(primary.address).revealed
    env.wait_until(due)
    assert standby.tick()
    assert env.ledger.participant(primary.address).revealed
    assert [(e.epoch, e.refused) for e in events] == [(0, False)]
    assert env.epoch(0).phase == "verify"  # the last reveal closed the phase early
    # A restarted standby sends nothing more: the chain shows the reveal.
    restarted = Standby(env.ledger, env.key("host2"), env.spec, tmp_path / "copy", grace=0.5)
    assert not restarted.tick()
    env.play_epoch(HOSTS, VALIDATORS)
    host2 = row(env, "host2")
    assert (host2.outcome, host2.slashed, host2.revealed) == ("absent_excused", "0", True)
    assert env.net_balance("host2") == before["host2"]  # nothing lost: no slash, no fee on the reveal's stake
    assert env.total_funds() == total
    env.assert_books()


def test_a_standby_saves_the_reveal_of_a_primary_that_committed_but_not_its_unserved_work(env, tmp_path) -> None:
    # The primary committed its training, then died: the standby's reveal avoids the no-reveal
    # slash (70 % here), but the host's commitment stands, is challenged, and its artifacts are not
    # served: the validators find it unavailable, which the standby cannot help.
    primary, total, _ = start(env, tmp_path, commit_primary=True)
    standby = Standby(env.ledger, env.key("host2"), env.spec, copy_journal(primary, tmp_path / "copy"), grace=0.25)
    everyone_else_reveals(env)
    env.wait_until(reveal_from(env.ledger.participant(primary.address), env.spec, 0.25))
    assert standby.tick()
    env.play_epoch(HOSTS, VALIDATORS, vote=lambda _v, c: "unavailable" if c.host == env.addr("host2") else "pass")
    host2 = row(env, "host2")
    assert (host2.outcome, host2.revealed) == ("unavailable", True)
    assert int(host2.slashed) < int(env.spec.economics.slash_no_reveal_bps) * int(host2.stake) // 10_000
    assert row(env, "host1").outcome == "accepted"
    assert env.total_funds() == total
    env.assert_books()


@pytest.mark.parametrize("journal", ["empty", "damaged", "another participant's"])
def test_a_standby_without_the_secret_cannot_reveal_and_the_slash_applies(env, tmp_path, journal) -> None:
    primary, total, _ = start(env, tmp_path, commit_primary=False)
    copy = tmp_path / "copy"
    copy.mkdir()
    if journal == "damaged":
        (copy / "epoch-000000.json").write_text('{"secret": "not hex"}')
    elif journal == "another participant's":  # well formed, but not what host2 committed to
        (copy / "epoch-000000.json").write_text(json.dumps({"secret": env.secret("host1", 0).hex()}))
    events: list[NodeEvent] = []
    standby = Standby(env.ledger, env.key("host2"), env.spec, copy, grace=0.0, on_event=events.append)
    everyone_else_reveals(env)
    assert not standby.tick()
    assert not env.ledger.participant(primary.address).revealed
    if journal == "another participant's":  # sent, and refused by the chain's commitment check
        assert len(events) == 1 and events[0].refused and "does not match the beacon commitment" in events[0].detail
    else:
        assert events == []
    env.play_epoch(HOSTS, VALIDATORS, reveal=[])
    host2 = row(env, "host2")
    assert (host2.outcome, host2.revealed) == ("no_reveal", False)
    assert int(host2.slashed) == int(env.spec.economics.slash_no_reveal_bps) * int(host2.stake) // 10_000
    assert env.total_funds() == total
    env.assert_books()


def test_a_live_primary_reveals_first_and_the_standbys_late_attempt_changes_nothing(env, tmp_path) -> None:
    primary, _, _ = start(env, tmp_path, commit_primary=True)
    events: list[NodeEvent] = []
    standby = Standby(env.ledger, env.key("host2"), env.spec, copy_journal(primary, tmp_path / "copy"),
                      grace=0.0, on_event=events.append)
    stale = env.ledger.participant(primary.address)  # read by the standby before the primary's reveal
    env.reveal("host2", 0, secret=primary.secret(0))  # the primary, alive
    assert not standby.tick() and events == []  # the chain shows the reveal: nothing is sent
    # A standby racing on a stale read is refused by the chain and counts it as done.
    assert not standby.maybe_reveal(stale)
    assert len(events) == 1 and events[0].refused and "already revealed" in events[0].detail
    assert env.ledger.participant(primary.address).revealed
    everyone_else_reveals(env)
    env.play_epoch(HOSTS, VALIDATORS)
    assert row(env, "host2").outcome == "accepted"


def test_a_standby_validates_its_inputs(env, tmp_path) -> None:
    with pytest.raises(ValueError, match="grace"):
        Standby(env.ledger, env.key("host2"), env.spec, tmp_path, grace=1.0)
    with pytest.raises(ValueError, match="grace"):
        Standby(env.ledger, env.key("host2"), env.spec, tmp_path, grace=-0.1)
    with pytest.raises(ValueError, match="epoch"):
        read_secret(tmp_path, -1)
    (tmp_path / "epoch-000003.json").write_text(json.dumps({"secret": "AB" * 32}))  # upper case: not canonical
    (tmp_path / "epoch-000004.json").write_text(json.dumps({"secret": "ab" * 32, "extra": 1}))
    (tmp_path / "epoch-000005.json").write_text("[")
    (tmp_path / "epoch-000006.json").write_text(json.dumps({"secret": "ab" * 32}))
    assert [read_secret(tmp_path, e) for e in (2, 3, 4, 5)] == [None] * 4
    assert read_secret(tmp_path, 6) == bytes.fromhex("ab" * 32)


def test_a_named_standby_reveals_for_its_member_and_can_do_nothing_else(ledger_env, tmp_path) -> None:
    env = ledger_env
    env.bond_all([*HOSTS, *VALIDATORS])
    total = env.total_funds()
    outsider = env.addr("outsider")  # funded, no stake: host2's standby
    with pytest.raises(ContractError, match="is a member"):
        env.ledger.set_standby(env.key("host2"), env.addr("validator1"))
    assert env.ledger.standby(env.addr("host2")) is None
    env.ledger.set_standby(env.key("host2"), outsider)
    assert env.ledger.standby(env.addr("host2")) == outsider  # the contract's `standby` query
    assert env.ledger.backend.query({"standby": {"member": env.addr("host2")}}) == {
        "member": env.addr("host2"), "standby": outsider}
    with pytest.raises(ContractError, match=r"^standby: "):
        env.ledger.standby("inj1nope")
    # A contract without a query refuses it in the one form Ledger.standby falls back on (a code id
    # from before the `standby` query: tests/node/test_standby_handover.py).
    with pytest.raises(ContractError, match=r"^invalid query message: unknown variant `no_such_query`, expected one "
                                            r"of `config`, ") as unknown:
        env.ledger.backend.query({"no_such_query": {"member": env.addr("host2")}})
    assert is_unknown_query(unknown.value, "no_such_query") and not is_unknown_query(unknown.value, "standby")
    primary = Participant(env.ledger, env.key("host2"), env.spec, tmp_path / "primary", name="host2")
    env.join("host2", beacon=beacon_commit(primary.address, 0, primary.secret(0)).hex())
    for name in ["host1", *VALIDATORS]:
        env.join(name)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")  # both hosts commit; host2 then dies
    # The standby can do nothing else: no commit, no stake, no reveal for another member.
    host1_secret = BeaconReveal(epoch=0, secret=env.secret("host1", 0).hex())
    for sent in (lambda: env.commit("outsider", 0), lambda: env.unbond("outsider", 1),
                 lambda: env.ledger.reveal(env.key("outsider"), host1_secret, env.addr("host1"))):
        with pytest.raises(ContractError):
            sent()
    standby = Standby(env.ledger, env.key("outsider"), env.spec, copy_journal(primary, tmp_path / "copy"),
                      grace=0.0, participant=primary.address, name="host2-standby")
    everyone_else_reveals(env)
    assert standby.tick()
    assert env.ledger.participant(primary.address).revealed
    assert not standby.tick()  # done: nothing more is sent
    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    host2 = row(env, "host2")
    assert (host2.outcome, host2.revealed, host2.slashed) == ("pending", True, "0")
    assert env.total_funds() == total
    env.assert_books()


def test_a_standby_for_an_address_of_another_chain_is_refused(env, tmp_path) -> None:
    with pytest.raises(ValueError, match="not an address of this chain"):
        Standby(env.ledger, env.key("outsider"), env.spec, tmp_path, participant="cosmos1notanaddress")


# -- the hand-over over HTTP (node/standby_handover.py) -----------------------------------------


def handed_over(courier: SecretCourier, epoch: int) -> bool | None:
    end = time.monotonic() + 20
    while epoch not in courier.delivered and time.monotonic() < end:
        time.sleep(0.02)
    return courier.delivered.get(epoch)


def test_the_primary_hands_its_secret_over_http_dies_and_the_standby_reveals(env, tmp_path) -> None:
    # The standby's folder is its own (no copy of the primary's journal): the secret arrives sealed
    # over HTTP, signed by the member, and the reveal loop reads it as before.
    env.bond_all([*HOSTS, *VALIDATORS])
    member, standby_key = env.addr("host2"), env.key("outsider")
    env.ledger.set_standby(env.key("host2"), standby_key.address(env.ledger.prefix))
    total = env.total_funds()
    before = env.net_balance("host2")
    run_id = env.spec.run_id().hex()
    folder = tmp_path / "standby"
    app = create_standby_app(standby_key, member, run_id, folder, lambda: env.ledger.participant(member).epoch,
                             env.ledger.prefix)
    primary = Participant(env.ledger, env.key("host2"), env.spec, tmp_path / "primary", name="host2")
    with ServerThread(app, limits=standby_limits()) as server:
        key, address = standby_key_of(env.ledger, member, standby_key.public_key.hex())
        courier = SecretCourier.of(primary, server.url, key, address)  # as `host run --standby-url` builds it
        try:
            courier.offer(env.ledger.participant(member))  # no secret yet: nothing is sent
            env.join("host2", beacon=beacon_commit(member, 0, primary.secret(0)).hex())  # the secret is durable
            courier.offer(env.ledger.participant(member))
            assert handed_over(courier, 0) is True
        finally:
            courier.close()
    assert read_secret(folder, 0) == primary.secret(0)
    for name in ["host1", *VALIDATORS]:
        env.join(name)
    env.play_epoch(HOSTS, VALIDATORS, commit=["host1"], stop_after="train")  # host2's primary is dead
    standby = Standby(env.ledger, standby_key, env.spec, folder, grace=0.0, participant=member)
    everyone_else_reveals(env)
    assert standby.tick()
    env.play_epoch(HOSTS, VALIDATORS)
    host2 = row(env, "host2")
    assert (host2.outcome, host2.slashed, host2.revealed) == ("absent_excused", "0", True)
    assert env.net_balance("host2") == before
    assert env.total_funds() == total
    env.assert_books()


def test_a_standby_that_is_down_does_not_stop_the_primarys_epoch(env, tmp_path) -> None:
    primary, _, _ = start(env, tmp_path, commit_primary=True)
    member = primary.address
    key, address = standby_key_of(env.ledger, member, env.key("host2").public_key.hex())  # the member's own
    courier = SecretCourier(journal_dir(primary.root, primary.run_id, member), env.key("host2"),
                            env.spec.run_id().hex(), env.ledger.prefix, "http://127.0.0.1:9", key, address,
                            first_wait=0.01, max_wait=0.02)
    try:
        courier.offer(env.ledger.participant(member))  # returns at once; the courier's thread fails
        env.reveal("host2", 0, secret=primary.secret(0))  # the primary, alive, reveals meanwhile
        everyone_else_reveals(env)
        env.play_epoch(HOSTS, VALIDATORS)
        courier.offer(env.ledger.participant(member, 0))  # past the reveal: the courier gives up
        assert handed_over(courier, 0) is False
    finally:
        courier.close()
    assert row(env, "host2").outcome == "accepted"


def test_the_primary_hands_over_only_to_the_standby_the_member_named(env, tmp_path) -> None:
    env.bond_all([*HOSTS, *VALIDATORS])
    member = env.addr("host2")
    own = env.key("host2").public_key.hex()
    # No standby named: only the member's own key can reveal for it.
    assert standby_key_of(env.ledger, member, own)[1] == member
    with pytest.raises(ValueError, match="named no standby"):
        standby_key_of(env.ledger, member, env.key("outsider").public_key.hex())
    env.ledger.set_standby(env.key("host2"), env.addr("outsider"))
    assert standby_key_of(env.ledger, member, env.key("outsider").public_key.hex())[1] == env.addr("outsider")
    with pytest.raises(ValueError, match="named on chain"):
        standby_key_of(env.ledger, member, own)
    with pytest.raises(ValueError, match="compressed secp256k1 public key"):
        standby_key_of(env.ledger, member, "02" + "zz" * 32)
    assert env.ledger.standby(env.addr("host1")) is None
