"""The settlement game in the network ``veriloco simulate`` runs (real nodes, real replays, the real
contract on the embedded chain): each adversary of the catalogue plays against honest parties, and
the cheater pays, no honest party is ever slashed, θ advances and funds are conserved
(``docs/contract.md``, "Disputes", "Traps", "Withholding a reveal").

The spec is the simulation's (windows sized to the participants) on a short epoch of 4 segments.
Where the outcome would depend on which validators the seed assigns, the test sizes ``k``/``r`` so
that it does not (every segment challenged, or every validator but one on each challenge)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from node.participant import Participant
from protocol.rules.sampling import pickers
from protocol.views import EpochReport
from trainer.artifacts import ArtifactSource
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny
from verifier.adversaries import WithheldSource
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import arm_coalition, simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow

SEGMENTS = 4


def play(tmp_path: Path, load_dataset: Any, hosts: Sequence[str | None], validators: Sequence[str], epochs: int,
         **verification: Any) -> tuple[LocalNetwork, list[EpochReport]]:
    """Run ``epochs`` epochs of a network with these host and validator behaviours."""
    base = tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4})
    if verification:
        base = base.with_changes(verification=verification)
    spec = simulation_spec(base, validators=len(validators), hosts=len(hosts))
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(h) for h in hosts], validators=[validator_behaviour(v) for v in validators])
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset)  # each behaviour's node (node.adversaries)
    reports = [net.run_epoch(max_rounds=300) for _ in range(epochs)]
    assert net.total_funds() == net.initial_funds
    return net, reports


def play_armed(tmp_path: Path, load_dataset: Any, hosts: Sequence[str | None], validators: Sequence[str],
               epochs: int, cheaters: int, **verification: Any) -> tuple[LocalNetwork, list[EpochReport]]:
    """:func:`play` with the coalition armed as ``simulate`` arms it (its cheaters known to its
    colluders and withholders)."""
    base = tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4})
    if verification:
        base = base.with_changes(verification=verification)
    spec = simulation_spec(base, validators=len(validators), hosts=len(hosts))
    roster = Roster(hosts=[host_behaviour(h) for h in hosts], validators=[validator_behaviour(v) for v in validators])
    net = LocalNetwork(spec, tmp_path / "net", roster, load_dataset(spec.data))
    arm_coalition(net, cheaters)
    reports = [net.run_epoch(max_rounds=300) for _ in range(epochs)]
    assert net.total_funds() == net.initial_funds
    return net, reports


def honest_never_slashed(net: LocalNetwork, reports: list[EpochReport], hosts: Sequence[str | None],
                         validators: Sequence[str]) -> None:
    """No honest host and no honest validator was slashed in any epoch."""
    honest = {n.address for n, b in zip(net.hosts, hosts, strict=True) if b is None}
    honest |= {n.address for n, b in zip(net.validators, validators, strict=True) if b == "honest"}
    for report in reports:
        for member in [*report.hosts, *report.validators]:
            if member.address in honest:
                assert int(member.slashed) == 0, (report.epoch, net.names[member.address], member.outcome)


def outcomes(net: LocalNetwork, report: EpochReport) -> dict[str, str]:
    return {net.names[m.address]: m.outcome for m in [*report.hosts, *report.validators]}


def test_a_validator_that_always_fails_is_outvoted_in_disputes_and_training_goes_on(tmp_path, load_dataset,
                                                                                    monkeypatch) -> None:
    # `veriloco simulate --epochs 4 --hosts 3 --cheaters 0 --validators 3 --liars 1 --liar always_fail`.
    # Each host's pickers are 2 of the 4 equal validators, so the liar sits on none of an epoch's
    # challenges with probability (1/2)^3. The secrets are fixed (keyed by address and epoch, as in
    # the trap-reader test below), so the seeds and seats are the same on every run: the liar sits
    # on challenges in both epochs played (4 seats each), is outvoted in each, and epoch 1 trains
    # on the model epoch 0 agreed.
    monkeypatch.setattr(Participant, "secret", keyed_secret)
    hosts = [None, None, None]
    validators = ["honest", "honest", "honest", "always_fail"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 2)
    honest_never_slashed(net, reports, hosts, validators)
    liar = net.validators[3].address
    seated = 0
    for report in reports:
        assert report.agreed
        assert {h.outcome for h in report.hosts} == {"accepted"}
        (lie,) = [v for v in report.validators if v.address == liar]
        if lie.assigned:  # it sat on challenges: its fails went to the final vote, and it lost
            seated += 1
            assert any(c.rounds >= 1 for c in report.challenges)
            assert lie.outcome == "wrong" and int(lie.slashed) > 0
        else:
            assert int(lie.slashed) == 0
    assert seated == len(reports) == 2


def test_a_lazy_host_shielded_by_a_validator_that_always_passes_are_both_slashed(tmp_path, load_dataset,
                                                                                monkeypatch) -> None:
    # `... --cheaters 1 --adversary lazy:1 --validators 3 --liars 1 --liar always_pass`; every segment
    # challenged, 3 of 4 validators on each: the liar misses all 4 of the lazy host's challenges in
    # one epoch with probability (1/4)^4. The secrets are fixed (keyed by address and epoch), so the
    # seats are the same on every run: the liar sits on the lazy host's challenges in epoch 0, and
    # one epoch shows both slashed.
    monkeypatch.setattr(Participant, "secret", keyed_secret)
    hosts = [None, None, None, "lazy:1"]
    validators = ["honest", "honest", "honest", "always_pass"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 1, validators_r=3, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    for report in reports:
        seen = outcomes(net, report)
        assert seen["host-3 (lazy)"] == "invalid" and seen["validator-3 (always_pass)"] in ("wrong", "diligent")
        assert {seen[f"host-{i}"] for i in range(3)} == {"accepted"} and report.agreed
        assert int(report.to_catchers) > 0  # the honest validators that failed it share the catcher part
    assert any(outcomes(net, r)["validator-3 (always_pass)"] == "wrong" for r in reports)


def test_a_host_that_serves_one_validator_only_is_caught_through_the_leaves_it_served(tmp_path,
                                                                                     load_dataset) -> None:
    # Every segment challenged, so both pickers of each host sit on every one of its challenges. The
    # lazy host serves only the first validator that asks; that one keeps what it checked, and the
    # validators the host refuses read the same leaves from it (node.leaf_holding) and fail them too.
    hosts = [None, None, "selective_serve"]
    validators = ["honest", "honest", "honest"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 1, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    (report,) = reports
    seen = outcomes(net, report)
    assert seen["host-2 (selective_serve)"] == "invalid"
    assert int(report.hosts[[h.address for h in report.hosts].index(net.hosts[2].address)].slashed) > 0
    assert seen["host-0"] == seen["host-1"] == "accepted" and report.agreed
    # Nobody voted unavailable: every validator read every leaf, from the host or from a holder.
    assert {v.outcome for v in report.validators} == {"diligent"}
    cheater = net.hosts[2].address
    assert {v.outcome for c in report.challenges if c.host == cheater for v in c.votes} == {"fail"}
    assert int(report.to_catchers) > 0


class RefusesOne(HostBehaviour):
    """An honest host that serves every reader but one."""

    name = "refuses_one"

    def __init__(self, refused: str) -> None:
        self.refused = refused

    def serve_to(self, source: ArtifactSource, requester: str) -> ArtifactSource:
        return WithheldSource(source, "all") if requester == self.refused else source


def refusing_network(tmp_path: Path, load_dataset: Any, **verification: Any) -> tuple[LocalNetwork, str, list[str]]:
    """3 honest validators and 3 hosts on tiny (every segment challenged), the third host refusing
    the first of its epoch-0 pickers (which follow from the genesis seed and the equal stakes).
    Returns the network, that host's address and its pickers."""
    base = tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                               verification={"challenges_k": SEGMENTS - 1, **verification})
    spec = simulation_spec(base, validators=3, hosts=3)
    refusing = RefusesOne("")
    roster = Roster(hosts=[HostBehaviour(), HostBehaviour(), refusing],
                    validators=[validator_behaviour("honest") for _ in range(3)])
    net = LocalNetwork(spec, tmp_path / "net", roster, load_dataset(spec.data))
    host = net.hosts[2].address
    stakes = {v.address: 2 * int(spec.economics.min_validator_stake) for v in net.validators}
    chosen = pickers(bytes.fromhex(net.ledger.epoch().prev_seed), host, stakes, spec.verification.seats_cap)
    refusing.refused = chosen[0]
    return net, host, chosen


def test_a_host_that_refuses_one_honest_validator_alone_costs_that_validator_nothing(tmp_path,
                                                                                  load_dataset) -> None:
    # The issue-27 gap: an `unavailable` that the decision contradicts pays the unserved slash, so a
    # host that refused one honest validator alone used to make it pay. Now the refused validator reads
    # the leaves from the validators that checked them (its co-seats: every segment is challenged, so
    # both pickers sit on each challenge) and votes on them like everyone else.
    net, host, chosen = refusing_network(tmp_path, load_dataset)
    assert len(chosen) == 2
    report = net.run_epoch(max_rounds=300)
    assert net.total_funds() == net.initial_funds
    assert report.agreed
    assert {h.outcome for h in report.hosts} == {"accepted"}  # the host's outcome: it trained honestly
    assert all(int(m.slashed) == 0 for m in [*report.hosts, *report.validators]), outcomes(net, report)
    assert {v.outcome for v in report.validators} == {"diligent"}
    mine = [c for c in report.challenges if c.host == host]
    assert len(mine) == SEGMENTS
    for c in mine:  # nobody objected: nothing was unavailable to anyone
        if c.trap:  # the host's own trap (honest hosts trap by default): disputed and valid
            assert c.rounds == 1 and c.outcome == "fail"
            continue
        assert c.rounds == 0 and c.outcome == "pass"
        assert {v.validator for v in c.votes} == set(chosen) and {v.outcome for v in c.votes} == {"pass"}


def test_a_refused_sole_seat_re_votes_with_the_final_round_and_is_paid(tmp_path, load_dataset) -> None:
    # One picker per host (seats_cap 1): the refused validator is the only round-0 seat of every
    # challenge of the host, so no co-seat holds the leaves. It says `unavailable` (an objection),
    # the final voters read the host, and its re-vote reads them from those holders: it votes
    # `pass` with them and is paid like them (before: excused, unpaid).
    net, host, chosen = refusing_network(tmp_path, load_dataset, seats_cap=1)
    (seat,) = chosen
    report = net.run_epoch(max_rounds=300)
    assert net.total_funds() == net.initial_funds
    assert report.agreed
    assert {h.outcome for h in report.hosts} == {"accepted"}
    assert all(int(m.slashed) == 0 for m in [*report.hosts, *report.validators]), outcomes(net, report)
    assert {v.outcome for v in report.validators} == {"diligent"}, outcomes(net, report)
    assert len({int(v.reward) for v in report.validators}) == 1  # the refused seat paid like the others
    mine = [c for c in report.challenges if c.host == host]
    assert len(mine) == SEGMENTS
    for c in mine:  # it objected to every one: each went to the final vote, where it re-voted
        assert c.rounds == 1 and seat in c.objectors
        (its,) = [v for v in c.votes if v.validator == seat]
        assert its.round == 0 and its.outcome == ("fail" if c.trap else "pass") == c.outcome


def test_a_host_that_would_withhold_its_reveal_pays_at_least_the_invalid_slash(tmp_path, load_dataset) -> None:
    # Every segment is challenged, so its faked one is always hit: it withholds every time.
    hosts = [None, None, "selective_reveal"]
    validators = ["honest", "honest"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 1, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    (report,) = reports
    (cheater,) = [h for h in report.hosts if h.address == net.hosts[2].address]
    assert cheater.outcome == "no_reveal" and not cheater.revealed
    econ = net.spec.economics
    assert int(cheater.slashed) >= int(cheater.stake) * econ.slash_invalid_bps // 10_000 > 0
    assert cheater.address not in net.ledger.epoch(report.epoch).accepted
    assert report.agreed


@pytest.mark.parametrize("liar", ["silent", "copycat"])
def test_a_validator_that_does_not_replay_ends_silent_and_pays(tmp_path, load_dataset, liar) -> None:
    # A copycat commits another validator's commitment and later its opening: the commitment binds
    # the committer's address, so the copy never opens.
    hosts = [None, None]
    validators = ["honest", "honest", "honest", liar]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 1, validators_r=3)
    honest_never_slashed(net, reports, hosts, validators)
    (report,) = reports
    seen = outcomes(net, report)
    assert seen[f"validator-3 ({liar})"] == "silent"
    assert int(report.validators[[v.address for v in report.validators].index(net.validators[3].address)].slashed) > 0
    assert seen["host-0"] == seen["host-1"] == "accepted" and report.agreed


def test_an_auditors_traps_catch_a_validator_that_always_passes(tmp_path, load_dataset, monkeypatch) -> None:
    # The auditor traps every segment (auditor:4,1: four traps in every epoch) and every segment is
    # challenged (each picker picks all S − 1 before the last), so every challenge on it is a trap,
    # disputed and decided by every validator. A trap is a tiny perturbation inside the trap window:
    # it is decided `fail` at a distance in [tau, trap_max_distance], so it is valid and the auditor
    # stays accepted (nobody is marked `audit`); the always-pass liar's blind passes carry no replay
    # evidence, so it is wrong whenever it sits on the auditor. The secrets are fixed (keyed by
    # address and epoch), so the seats are the same on every run: the liar sits on the auditor's
    # traps in epoch 0, and one epoch shows it caught.
    monkeypatch.setattr(Participant, "secret", keyed_secret)
    hosts = [None, None, "auditor:4,1"]
    validators = ["honest", "honest", "honest", "always_pass"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 1, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    ver = net.spec.verification
    liar = net.validators[3].address
    for report in reports:
        seen = outcomes(net, report)
        (auditor,) = [h for h in report.hosts if h.address == net.hosts[2].address]
        assert auditor.outcome == "accepted" and int(auditor.slashed) == 0
        assert auditor.traps == list(range(SEGMENTS))
        assert auditor.address in net.ledger.epoch(report.epoch).accepted  # a valid trap's Δ is aggregated
        traps = [c for c in report.challenges if c.host == auditor.address]
        assert traps and all(c.trap and c.rounds >= 1 and c.outcome == "fail" for c in traps)
        for c in traps:  # the deciding distance lies in the trap window
            honest = [v for v in c.votes if v.validator != liar and v.outcome == "fail"]
            assert honest and all(ver.tau <= v.distance <= ver.trap_max_distance for v in honest)
        assert seen["host-0"] == seen["host-1"] == "accepted" and report.agreed
        sat = any(v.validator == liar for c in traps for v in c.votes)
        assert (seen["validator-3 (always_pass)"] == "wrong") == sat
    assert any(outcomes(net, r)["validator-3 (always_pass)"] == "wrong" for r in reports)


def keyed_secret(self: Participant, epoch: int) -> bytes:
    """A beacon secret fixed by the participant's address and the epoch, instead of a random one."""
    return hashlib.sha256(b"veriloco test beacon" + self.address.encode() + epoch.to_bytes(8, "big")).digest()


def test_every_honest_host_traps_by_default_and_a_trap_reader_is_caught(tmp_path, load_dataset,
                                                                       monkeypatch) -> None:
    # Issue 27: no auditor, the default trap_probability. Each honest host traps one segment with
    # probability 0.2 per epoch, drawn from its own key (with these simulation keys and this run:
    # host-2 in epoch 0, host-0 and host-1 in epoch 1, host-1 again in epoch 2; over 6 epochs
    # host-0 also in 5, host-1 in 4, host-2 in 5). Every segment is challenged, so every trap is.
    # Two trap readers (2/7 of the stake) replay only hosts that trapped last epoch and pass the
    # rest blind; each host's pickers are 3 of the 7 validators, so a reader picks for a host with
    # probability 1 − C(5,3)/C(7,3) = 5/7, and each trap after an epoch without one catches one
    # then. The secrets are fixed here (keyed by address and epoch), so the seeds, the pickers and
    # this test's outcome are the same on every run, and every reader that sat on a trap it did not
    # expect is asserted caught below. Three epochs hold both cases: traps no reader expected
    # (epochs 0 and 1) and one it did (host-1 in epoch 2, after its trap in epoch 1).
    monkeypatch.setattr(Participant, "secret", keyed_secret)
    hosts = [None, None, None]
    validators = ["honest"] * 5 + ["trap_reader"] * 2
    net, reports = play(tmp_path, load_dataset, hosts, validators, 3, challenges_k=SEGMENTS - 1)
    assert net.spec.verification.trap_probability == Decimal("0.2")
    assert "trap_probability" not in net.spec.canonical().decode()  # the contract never sees it
    honest_never_slashed(net, reports, hosts, validators)
    ver = net.spec.verification
    readers = {v.address for v in net.validators[5:]}
    trapped: dict[str, set[int]] = {n.address: set() for n in net.hosts}
    caught = on_traps = 0
    for report in reports:
        assert report.agreed
        rewards = set()
        by_address = {h.address: h for h in report.hosts}
        for node in net.hosts:
            host = by_address[node.address]
            drawn = list(node.trap_draw(report.epoch).segments)
            assert (host.traps or []) == drawn  # what it opened is what its secret drew
            # An honest trap costs nothing: accepted, aggregated, not slashed, paid like the others.
            assert host.outcome == "accepted" and int(host.slashed) == 0 and int(host.reward) > 0
            assert host.address in net.ledger.epoch(report.epoch).accepted
            rewards.add(int(host.reward))
            if drawn:
                trapped[host.address].add(report.epoch)
                (trap,) = [c for c in report.challenges if c.host == host.address and c.segment == drawn[0]]
                assert trap.trap and trap.rounds >= 1 and trap.outcome == "fail"
                honest = [v for v in trap.votes if v.validator not in readers and v.outcome == "fail"]
                assert honest and all(ver.tau <= v.distance <= ver.trap_max_distance for v in honest)
        assert len(rewards) == 1  # trappers and the others alike
        # A reader passes blind every seat of a host that did not trap the epoch before, but for a
        # final vote on a host that opened a trap this epoch (it replays that host then: an opened
        # trap, or its last segment disputed because a blind pass carried another probe gain); a
        # blind pass on a disputed challenge is `wrong`.
        recent = {h for h, epochs in trapped.items() if report.epoch - 1 in epochs}
        opened = {h for h, epochs in trapped.items() if report.epoch in epochs}
        blind = {v.validator for c in report.challenges if c.rounds and c.host not in recent
                 for v in c.votes if v.validator in readers and (v.round == 0 or c.host not in opened)}
        for lazy in [v for v in report.validators if v.address in readers]:
            assert (lazy.outcome == "wrong") == (lazy.address in blind), (report.epoch, lazy.outcome)
            if lazy.outcome == "wrong":
                caught += 1
                assert int(lazy.slashed) > 0
        # The traps themselves catch readers, not only the probe gain a blind pass guesses: a reader
        # sat in round 0 on a trap it did not expect (so it is `wrong`, above).
        on_traps += sum(1 for c in report.challenges if c.trap and c.host not in recent
                        for v in c.votes if v.validator in readers and v.round == 0)
    assert all(trapped.values()), trapped  # every honest host trapped: history tells none apart
    assert caught, [outcomes(net, r) for r in reports]
    assert on_traps, "no reader sat on a trap it did not expect"
    # ... and a trap the readers expected: a host trapped again the epoch after its last trap.
    assert any(e - 1 in epochs for epochs in trapped.values() for e in epochs), trapped


def test_colluders_fail_the_honest_and_shield_their_cheater_and_pay(tmp_path, load_dataset) -> None:
    # `veriloco simulate --hosts 2 --cheaters 1 --adversary lazy:1 --validators 3 --liars 2 --liar colluder`:
    # 2 of 5 equal stakes (40 %: above the 1/3 of the guarantee, below the 1/2 that decides), every
    # segment challenged. The colluders object to every seat of an honest host and pass the lazy host,
    # whose every segment is faked: every objection goes to the final vote of all five, where the
    # honest 60 % decide. The honest are never slashed; the colluders are wrong whenever they sat.
    hosts = [None, None, "lazy:1"]
    validators = ["honest", "honest", "honest", "colluder", "colluder"]
    net, reports = play_armed(tmp_path, load_dataset, hosts, validators, 1, cheaters=1, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    (report,) = reports
    seen = outcomes(net, report)
    assert seen["host-0"] == seen["host-1"] == "accepted" and report.agreed
    assert seen["host-2 (lazy)"] == "invalid"
    colluders = [v for v in report.validators if v.address in {n.address for n in net.validators[3:]}]
    assert colluders and all(v.outcome == "wrong" and int(v.slashed) > 0 and int(v.catcher_reward) == 0
                             for v in colluders if int(v.assigned) > 0)
    assert any(int(v.assigned) > 0 for v in colluders)


# -- issue 27's adversaries, fast: the behaviours' choices, and the game on the real contract ------------
#
# The games below are bench/settlement_game.py's (the committed wasm on the embedded chain, real
# messages, the verdicts forced from the ground truth instead of replays) at a coalition stake of
# 20 % (4 identities, or 12 sybils for 4 seats), for a few epochs each; the benchmark plays the same at
# 10 %, 20 % and 33 % − ε over 200 epochs.

def _challenge(host: str = "other", segment: int = 1, round_: int = 0, epoch: int = 3) -> Any:
    from protocol.views import Challenge
    from veriloco.network import sim_key

    return Challenge.model_construct(epoch=epoch, host=sim_key(host).address(), segment=segment, round=round_)


def _address(name: str) -> str:
    from veriloco.network import sim_key

    return sim_key(name).address()


def test_the_issue_27_adversaries_are_named_and_decide_as_documented() -> None:
    from verifier.adversaries.registry import VALIDATORS, make_validator_behaviour
    from verifier.adversaries.validators import TrapReader

    for name in ("colluder", "sybil", "withholder", "trap_reader", "dispute_copier", "unavailable"):
        assert name in VALIDATORS and make_validator_behaviour(name).name == name
    replayed: list[int] = []

    def replay() -> Any:
        replayed.append(1)
        from protocol.messages import Verdict

        return Verdict(epoch=3, host=_address("x"), segment=1, outcome="pass", distance=0, evidence="0" * 64)

    colluder = make_validator_behaviour("colluder")
    colluder.coalition = {_address("ours")}
    assert colluder.decide(_challenge("ours"), replay).outcome == "pass"
    assert colluder.decide(_challenge("theirs", round_=1), replay).outcome == "fail" and not replayed
    copier = make_validator_behaviour("dispute_copier")
    copier.decide(_challenge(), replay)
    assert replayed == [1]  # round 0: it replays
    assert copier.decide(_challenge(round_=1), replay).outcome == "fail" and replayed == [1]  # final: a guess
    assert make_validator_behaviour("unavailable").decide(_challenge(), replay).outcome == "unavailable"
    reader = TrapReader(memory=1)
    reader.observe(2, _address("trapper"), [4])
    assert reader.replays(_challenge("trapper", epoch=3)) and not reader.replays(_challenge("trapper", epoch=4))
    assert not reader.replays(_challenge("other")) and reader.decide(_challenge("other"), replay).outcome == "pass"
    reader.observe(3, _address("other"), [1])  # opened this epoch: public in the final round
    assert reader.replays(_challenge("other", segment=1, round_=1))
    withholder = make_validator_behaviour("withholder")
    withholder.coalition = {_address("ours")}

    from types import SimpleNamespace

    withholder.fakers = {_address("ours"): SimpleNamespace(faked={3: [2, 5]})}
    assert withholder.reveal_choice(3, {_address("ours"): [0, 5]}) == "withhold"
    assert withholder.reveal_choice(3, {_address("ours"): [0, 1]}) == "reveal"


def _game(scenario: str, epochs: int) -> dict[str, Any]:
    import sys

    bench = str(Path(__file__).resolve().parents[2] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import settlement_game

    result = settlement_game.run(scenario, "20%", epochs, seed=27, deadline_s=0)
    assert result["honest_slashed"] == 0 and result["honest_hosts_not_accepted"] == 0
    assert result["funds_conserved"] and result["agreed_epochs"] == result["epochs"] == epochs
    assert result["coalition"]["net"] < 0 and result["coalition"]["slashed"] > 0
    # An honest picker's own picks that hit a faked segment always catch the cheater; where the
    # coalition does not replay it (it shields it or passes it blind) nothing else does.
    assert result["cheater"]["missed_with_honest_hit"] == 0
    if scenario in ("colluder", "sybil", "withholder", "trap_reader"):
        assert result["cheater"]["caught_without_honest_hit"] == 0
    return result


def test_colluders_under_a_third_of_the_stake_are_outvoted_and_pay() -> None:
    r = _game("colluder", 2)
    assert r["coalition"]["outcomes"].get("wrong", 0) > 0 and r["disputed"] > 0


def test_sybil_seat_grabbers_cannot_push_out_a_larger_validator() -> None:
    r = _game("sybil", 2)
    assert r["identities"] == 12 and r["honest_validators_seated_min"] == 4  # 12 sybils, 4 seats left to them
    assert abs(r["coalition_share_measured"] - 0.2) < 0.01


def test_a_sybil_withholder_only_removes_its_own_picks_and_pays() -> None:
    r = _game("withholder", 4)
    assert r["withheld"] > 0 and r["coalition"]["outcomes"].get("no_reveal", 0) == r["withheld"]


def test_a_trap_reader_passing_blind_is_caught_on_the_traps_it_did_not_expect() -> None:
    r = _game("trap_reader", 4)
    assert r["trap_reader_blind"] > 0 and r["coalition"]["outcomes"].get("wrong", 0) > 0


def test_a_dispute_copier_sees_nothing_before_its_commit_and_guesses_wrong() -> None:
    r = _game("copier", 2)
    assert r["coalition"]["outcomes"].get("wrong", 0) > 0


def test_an_unavailable_spammer_is_unserved_on_every_seat() -> None:
    r = _game("unavailable", 2)
    outcomes = r["coalition"]["outcomes"]
    assert outcomes.get("unserved", 0) > 0 and set(outcomes) <= {"unserved", "idle"}


def test_holders_first_halves_what_an_honest_host_uploads(tmp_path, load_dataset) -> None:
    # bench/leaf_uploads.py's network (S = 4, every segment challenged, both pickers of each host on
    # every challenge), every byte each party serves counted: asking the host first, each host sends
    # every challenge's leaves to both seats; asking holders first, the second seat reads them from
    # the first, so each host sends them once and the validators serve the rest.
    import sys

    bench = str(Path(__file__).resolve().parents[2] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import leaf_uploads

    dataset = load_dataset(leaf_uploads.tiny().data)
    before = leaf_uploads.run(tmp_path / "host-first", dataset, False, 1, holders_first=False)
    after = leaf_uploads.run(tmp_path / "holders-first", dataset, False, 1, holders_first=True)
    for result in (before, after):
        assert result["slashed"] == 0 and result["outcomes"] == [["accepted"]]
    sent_before, sent_after = before["sent"], after["sent"]
    assert isinstance(sent_before, dict) and isinstance(sent_after, dict)
    for host in ("host-0", "host-1", "host-2"):
        assert 0 < sent_after[host] <= 0.55 * sent_before[host], (host, sent_before, sent_after)
    assert not any(who.startswith("validator") for who in sent_before)  # host first: no holder served
    assert sum(v for who, v in sent_after.items() if who.startswith("validator")) > 0


def test_a_gain_copier_copies_an_opened_gain_and_without_the_dispute_windows_gain_is_wrong(
        tmp_path, load_dataset) -> None:
    # Issue 28's gain dispute on real nodes: an `always_pass` seat opens a guessed gain (0: it holds
    # no Δ) beside the honest seats' gain, so the last segment is a gain dispute. Every deciding vote
    # carries the main gain and the gain on the host's dispute windows, which nobody opened: the
    # honest voters (round-0 seats re-voting, final voters) compute both and decide the main one; the
    # `gain_copier`, which copies the main gain most seats opened and has no dispute-window gain to
    # copy, is `wrong`. 6 validators of equal stake: 3 round-0 seats per host, the 2 liars a third.
    hosts = [None, None]
    validators = ["honest", "honest", "honest", "honest", "always_pass", "gain_copier"]
    net, (report,) = play(tmp_path, load_dataset, hosts, validators, 1)
    disputes = [c for c in report.challenges if c.segment == SEGMENTS - 1 and c.rounds == 1]
    assert disputes, "always_pass sat on no last segment beside an honest seat"
    for c in disputes:
        votes = {net.names[v.validator]: v for v in c.votes}
        honest = {(v.gain_micro, v.dispute_gain_micro) for n, v in votes.items() if "(" not in n}
        assert c.outcome == "pass" and len(honest) == 1 and next(iter(honest))[0] == c.gain_micro, (c, votes)
        copier = votes["validator-5 (gain_copier)"]
        # The main gain copied is the decided one; the dispute windows' it could not copy.
        assert copier.gain_micro == c.gain_micro and copier.dispute_gain_micro != next(iter(honest))[1]
    seen = outcomes(net, report)
    assert seen["validator-5 (gain_copier)"] == "wrong" and seen["validator-4 (always_pass)"] == "wrong"
    assert {seen[f"validator-{i}"] for i in range(4)} == {"diligent"}
    assert {seen[f"host-{i}"] for i in range(2)} == {"accepted"}
    honest_never_slashed(net, [report], hosts, validators)
    assert net.validators[5].behaviour.copied > 0


def test_a_gain_liar_that_re_votes_honestly_is_wrong_and_the_final_voters_only_probe(tmp_path, load_dataset) -> None:
    # Issue 28's H1 on real nodes: a `gain_liar` seat replays, passes and opens its computed gain plus
    # 1,000 µnats, so its host's last segment is a gain dispute; it re-votes honestly (both gains
    # computed). Its round-0 gain is judged against the decided one: `wrong`, slashed. Every seat's
    # pass agrees in all but the gain, so the final voters answer with the probe alone, no replay.
    hosts = [None, None]
    validators = ["honest", "honest", "honest", "honest", "honest", "gain_liar"]
    net, (report,) = play(tmp_path, load_dataset, hosts, validators, 1, challenges_k=0)
    disputes = [c for c in report.challenges if c.segment == SEGMENTS - 1 and c.rounds == 1]
    assert disputes, "the gain_liar sat on no last segment"
    liar = net.validators[5]
    for c in disputes:
        votes = {net.names[v.validator]: v for v in c.votes}
        assert c.outcome == "pass" and {v.gain_micro for v in votes.values()} == {c.gain_micro}, (c, votes)
        assert votes["validator-5 (gain_liar)"].round0_gain_micro == c.gain_micro + 1_000
    seen = outcomes(net, report)
    assert seen["validator-5 (gain_liar)"] == "wrong"
    assert int(next(v for v in report.validators if v.address == liar.address).slashed) > 0
    assert {seen[f"validator-{i}"] for i in range(5)} == {"diligent"}
    assert {seen[f"host-{i}"] for i in range(2)} == {"accepted"}
    honest_never_slashed(net, [report], hosts, validators)
    # Each final vote on a dispute was answered with the probe alone (no replay of that segment).
    finals = [net.validators[i] for i in range(5)
              if any(v.round == 1 and v.validator == net.validators[i].address for c in disputes for v in c.votes)]
    assert finals and all(v.probe_only == sum(
        1 for c in disputes for x in c.votes if x.round == 1 and x.validator == v.address) for v in finals)
