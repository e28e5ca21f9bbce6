"""The delayed seed (``verification.delay_squarings``, docs/contract.md "The delayed seed") on a
live contract: the close of ``reveal`` stops at phase ``delay``, which nothing but a valid VDF
output over the epoch seed ends (not its deadline, not a wrong output, not another epoch's); the
output's seed then picks each host's ``k`` segments for all of its pickers, exactly as
``protocol.rules.sampling`` derives them, and the epoch settles as any other with the books
balanced. Both backends (the devnet runs the same wasm through injectived)."""

from __future__ import annotations

import pytest
from ledger_env import EMBEDDED_ONLY, VALIDATOR_STAKE, make_spec

from chain.ledger import ContractError
from node.participant import Participant
from protocol.messages import DelayedSeedOutput
from protocol.rules import vdf
from protocol.rules.sampling import challenge_seats, pickers
from protocol.views import validator_weights

HOSTS = ["host1", "host2", "host3"]
VALIDATORS = ["validator1", "validator2", "validator3"]
SQUARINGS = 2_000


def test_the_delay_phase_ends_only_with_a_valid_output_whose_seed_picks_for_every_picker(make_ledger_env) -> None:
    spec = make_spec(train={"inner_steps": 16, "segment_steps": 2},
                     verification={"challenges_k": 2, "delay_squarings": SQUARINGS},
                     phases={"verify_blocks": 150, "verdict_reveal_blocks": 150})
    env = make_ledger_env(spec)
    env.bond_all(HOSTS)
    for i, v in enumerate(VALIDATORS):  # unequal stakes: the draw is by stake
        env.bond(v, VALIDATOR_STAKE * (i + 1))
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    for name in [*HOSTS, *VALIDATORS]:
        env.reveal(name, 0)
    env.settle()
    info = env.epoch(0)
    assert info.phase == "delay" and info.delayed_seed is None and info.closing is None
    assert env.challenges("validator1", 0) == []

    # Its deadline passing closes nothing.
    env.wait_past_deadline(0)
    with pytest.raises(ContractError, match="nothing is due"):
        env.advance()
    assert env.epoch(0).phase == "delay"

    good = env.delayed_seed_output(0)
    y = vdf.decode(good.output)
    other = DelayedSeedOutput(epoch=0, output=vdf.encode(vdf.normalize(y + 1)), proof=good.proof)
    with pytest.raises(ContractError, match="the proof does not show"):
        env.ledger.delayed_seed(env.key("funder"), other)
    with pytest.raises(ContractError, match="epoch 1"):
        env.ledger.delayed_seed(env.key("funder"), good.model_copy(update={"epoch": 1}))
    not_canonical = good.model_copy(update={"output": vdf.encode(vdf.MODULUS - y)})
    with pytest.raises(ContractError, match="512 lowercase hex"):
        env.ledger.delayed_seed(env.key("funder"), not_canonical)

    # Anyone posts the one valid output (here the funder, a member of nothing).
    env.ledger.delayed_seed(env.key("funder"), good)
    env.settle()
    info = env.epoch(0)
    assert info.phase == "verify"
    delayed = vdf.delayed_seed(y)
    assert info.delayed_seed == delayed.hex()

    # Each host's k picks from the delayed seed and its last segment, every picker on each.
    joined = validator_weights(env.report(0).validators)
    want = {}
    for host in HOSTS:
        address = env.addr(host)
        chosen = pickers(bytes.fromhex(info.prev_seed), address, joined, spec.verification.seats_cap)
        seats = challenge_seats(dict.fromkeys(chosen, delayed), address, spec.train.segments,
                                spec.verification.challenges_k)
        assert len(seats) == spec.verification.challenges_k + 1
        assert all(v == sorted(chosen) for v in seats.values())
        want.update({(address, g): v for g, v in seats.items()})
    got = {(c.host, c.segment): [v.validator for v in c.votes if v.round == 0] for c in env.report(0).challenges}
    assert got == want

    env.play_epoch(HOSTS, VALIDATORS)
    report = env.report(0)
    assert all(h.outcome == "accepted" for h in report.hosts)
    assert env.epoch(1).phase == "join"
    env.assert_books()


@EMBEDDED_ONLY
def test_nodes_wait_in_delay_but_advance_the_assignment_pages_that_follow_its_output(make_ledger_env,
                                                                                       tmp_path) -> None:
    """A node never sends ``advance`` into ``delay`` while it waits (only the output ends it), but
    once the output is posted the assignment runs under that phase's name, page by page: nodes must
    advance those pages, or a run of more participants than a page stalls there."""
    spec = make_spec(train={"inner_steps": 16, "segment_steps": 2},
                     verification={"challenges_k": 2, "delay_squarings": 64})
    env = make_ledger_env(spec, settle_page=2)  # 6 participants: three pages of assignment
    env.bond_all([*HOSTS, *VALIDATORS])
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    for name in [*HOSTS, *VALIDATORS]:
        env.reveal(name, 0)
    env.settle()
    node = Participant(env.ledger, env.key("host1"), spec, tmp_path)
    node.role = "host"
    env.wait_past_deadline(0)
    status = env.ledger.participant(env.addr("host1"), 0)
    assert status.phase == "delay" and env.height() >= status.phase_deadline
    assert not node.maybe_advance(status)  # past its deadline, and still nothing to send
    env.ledger.delayed_seed(env.key("funder"), env.delayed_seed_output(0))
    assert env.epoch(0).phase == "delay" and env.epoch(0).closing == "assign"
    sent = 0
    while (status := env.ledger.participant(env.addr("host1"), 0)).phase == "delay":
        assert node.maybe_advance(status), "a page of the assignment was not advanced"
        sent += 1
        assert sent < 10
    assert sent >= 1 and env.epoch(0).phase == "verify"


@EMBEDDED_ONLY
def test_with_a_fallback_window_nodes_close_delay_and_each_picker_picks_for_itself(make_ledger_env,
                                                                                   tmp_path) -> None:
    """``verification.delay_blocks``: past that window without an output the nodes close ``delay``
    as any due phase, and the challenges are each picker's own (what a run without the option draws):
    every evaluator down no longer holds the epoch."""
    spec = make_spec(train={"inner_steps": 16, "segment_steps": 2},
                     verification={"challenges_k": 2, "delay_squarings": 64, "delay_blocks": 20})
    env = make_ledger_env(spec)
    env.bond_all([*HOSTS, *VALIDATORS])
    revealing = [*HOSTS, *VALIDATORS]
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    for name in revealing:
        env.reveal(name, 0)
    env.settle()
    node = Participant(env.ledger, env.key("host1"), spec, tmp_path)
    node.role = "host"
    status = env.ledger.participant(env.addr("host1"), 0)
    assert status.phase == "delay" and not node.maybe_advance(status)  # within its window
    env.wait_past_deadline(0)
    assert node.maybe_advance(env.ledger.participant(env.addr("host1"), 0))
    env.settle()
    info = env.epoch(0)
    assert info.phase == "verify" and info.delayed_seed is None
    joined = validator_weights(env.report(0).validators)
    want = {}
    for host in HOSTS:
        address = env.addr(host)
        chosen = pickers(bytes.fromhex(info.prev_seed), address, joined, spec.verification.seats_cap)
        secrets = {p: env.secret(env.name_of(p), 0) for p in chosen}
        want.update({(address, g): v for g, v in challenge_seats(secrets, address, spec.train.segments,
                                                                 spec.verification.challenges_k).items()})
    got = {(c.host, c.segment): [v.validator for v in c.votes if v.round == 0] for c in env.report(0).challenges}
    assert got == want
    env.play_epoch(HOSTS, VALIDATORS)
    assert all(h.outcome == "accepted" for h in env.report(0).hosts)
    env.assert_books()
