"""The settlement game in the network ``veriloco simulate`` runs (real nodes, real replays, the real
contract on the embedded chain): each adversary of the catalogue plays against honest parties, and
the cheater pays, no honest party is ever slashed, θ advances and funds are conserved
(``docs/contract.md``, "Disputes", "Traps", "Withholding a reveal").

The spec is the simulation's (windows sized to the participants) on a short epoch of 4 segments.
Where the outcome would depend on which validators the seed assigns, the test sizes ``k``/``r`` so
that it does not (every segment challenged, or every validator but one on each challenge)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from protocol.views import EpochReport
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
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


def test_a_validator_that_always_fails_is_outvoted_in_disputes_and_training_goes_on(tmp_path, load_dataset) -> None:
    # `veriloco simulate --epochs 3 --hosts 3 --cheaters 0 --validators 3 --liars 1 --liar always_fail`,
    # with every validator but one on each challenge so that the liar sits on some in every epoch.
    hosts = [None, None, None]
    validators = ["honest", "honest", "honest", "always_fail"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 2, validators_r=3)
    honest_never_slashed(net, reports, hosts, validators)
    liar = net.validators[3].address
    for report in reports:
        assert report.agreed
        assert {h.outcome for h in report.hosts} == {"accepted"}
        assert any(c.rounds >= 1 for c in report.challenges)  # its fails went to disputes
        (lie,) = [v for v in report.validators if v.address == liar]
        assert lie.outcome == "wrong" and int(lie.slashed) > 0


def test_a_lazy_host_shielded_by_a_validator_that_always_passes_are_both_slashed(tmp_path, load_dataset) -> None:
    # `... --cheaters 1 --adversary lazy:1 --validators 3 --liars 1 --liar always_pass`; every segment
    # challenged, 3 of 4 validators on each: the liar misses all 4 of the lazy host's challenges in
    # one epoch with probability (1/4)^4, in both epochs (1/4)^8.
    hosts = [None, None, None, "lazy:1"]
    validators = ["honest", "honest", "honest", "always_pass"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 2, validators_r=3, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    for report in reports:
        seen = outcomes(net, report)
        assert seen["host-3 (lazy)"] == "invalid" and seen["validator-3 (always_pass)"] in ("wrong", "diligent")
        assert {seen[f"host-{i}"] for i in range(3)} == {"accepted"} and report.agreed
        assert int(report.to_catchers) > 0  # the honest validators that failed it share the catcher part
    assert any(outcomes(net, r)["validator-3 (always_pass)"] == "wrong" for r in reports)


def test_a_host_that_serves_one_validator_only_is_slashed_as_unavailable(tmp_path, load_dataset) -> None:
    hosts = [None, None, "selective_serve"]
    validators = ["honest", "honest", "honest"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 1)
    honest_never_slashed(net, reports, hosts, validators)
    (report,) = reports
    seen = outcomes(net, report)
    assert seen["host-2 (selective_serve)"] == "unavailable"
    assert int(report.hosts[[h.address for h in report.hosts].index(net.hosts[2].address)].slashed) > 0
    assert seen["host-0"] == seen["host-1"] == "accepted" and report.agreed
    # The validators it refused voted unavailable: not slashed, not paid.
    assert "unserved" in {v.outcome for v in report.validators}


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


def test_an_auditors_traps_catch_a_validator_that_always_passes(tmp_path, load_dataset) -> None:
    # The auditor traps every segment and every segment is challenged, so every challenge on it is a
    # trap; 3 of 4 validators sit on each: the liar misses all 4 in both epochs with probability
    # (1/4)^8.
    hosts = [None, None, "auditor:4"]
    validators = ["honest", "honest", "honest", "always_pass"]
    net, reports = play(tmp_path, load_dataset, hosts, validators, 2, validators_r=3, challenges_k=SEGMENTS - 1)
    honest_never_slashed(net, reports, hosts, validators)
    for report in reports:
        seen = outcomes(net, report)
        (auditor,) = [h for h in report.hosts if h.address == net.hosts[2].address]
        assert auditor.outcome == "audit" and int(auditor.slashed) == 0
        assert auditor.traps == list(range(SEGMENTS))
        assert auditor.address not in net.ledger.epoch(report.epoch).accepted  # a trap never helps a Δ in
        assert seen["host-0"] == seen["host-1"] == "accepted" and report.agreed
        # Caught whenever it sat on a trap, and then the auditor takes the catcher share.
        caught = seen["validator-3 (always_pass)"] == "wrong"
        assert caught == (int(auditor.catcher_reward) > 0)
    assert any(outcomes(net, r)["validator-3 (always_pass)"] == "wrong" for r in reports)
