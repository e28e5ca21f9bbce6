"""Why an epoch left θ unchanged, as reports, summaries and CSV rows say it (pure, on built reports)."""

from __future__ import annotations

import hashlib

import pytest
from rich.console import Console

from protocol.keys import PrivateKey
from protocol.messages import ModelProposal
from protocol.rules.spec import PhaseSpec
from protocol.views import (
    ChallengeReport,
    EpochReport,
    HostReport,
    ReportPage,
    ValidatorCounts,
    ValidatorPart,
    ValidatorReport,
    Vote,
    assemble_report,
    validator_weights,
)
from veriloco.report import (
    MEMBER_COLUMNS,
    OUTCOME_COLOUR,
    OUTCOME_STYLE,
    challenge_cell,
    epoch_rows,
    member_rows,
    report_tables,
    summary_line,
    unchanged_reason,
)

A, B, C = (PrivateKey(hashlib.sha256(n).digest()).address() for n in (b"a", b"b", b"c"))
THETA, ONE, TWO = (hashlib.sha256(n).hexdigest() for n in (b"theta", b"one", b"two"))


def host(address: str, stake: int, outcome: str = "accepted", proposes: str | None = None) -> HostReport:
    proposal = None if proposes is None else ModelProposal(epoch=3, model_hash=proposes, val_loss_micro=2_000_000)
    return HostReport(address=address, stake=str(stake), revealed=True, outcome=outcome, proposal=proposal)


def report(hosts: list[HostReport], agreed: bool | None = False, abandoned: bool = False,
           phase: str = "closed") -> EpochReport:
    return EpochReport(run_id=THETA, epoch=3, phase=phase, started_at=1, model_hash=THETA, agreed=agreed,
                       abandoned=abandoned, hosts=hosts, validators=[], challenges=[])


def test_an_agreed_or_open_epoch_has_no_reason() -> None:
    assert unchanged_reason(report([host(A, 10, proposes=ONE)], agreed=True)) is None
    assert unchanged_reason(report([host(A, 10)], agreed=None, phase="train")) is None


def test_an_abandoned_epoch_says_who_joined_and_what_the_run_needs() -> None:
    phases = PhaseSpec(min_hosts=2, min_validators=1, max_join_extensions=3)
    reason = unchanged_reason(report([host(A, 10, outcome="pending")], abandoned=True), phases)
    assert reason == ("abandoned: only 1 host(s) and 0 validator(s) joined before the join phase ran out of "
                      "extensions (the run needs 2 hosts and 1 validator; 3 extensions)")


def test_nobody_accepted_names_the_outcomes() -> None:
    reason = unchanged_reason(report([host(A, 10, "invalid"), host(B, 10, "invalid"), host(C, 10, "absent")]))
    assert reason == "no host was accepted (1 absent, 2 invalid)"


def test_hosts_that_sat_out_are_named_in_the_reason_and_the_summary() -> None:
    sat = report([host(A, 10, "sat_out"), host(B, 10, "sat_out")])
    assert unchanged_reason(sat) == "no host was accepted (2 sat_out)"
    assert "sat_out" in summary_line(sat)


def test_accepted_hosts_that_proposed_nothing() -> None:
    assert unchanged_reason(report([host(A, 10), host(B, 10, "invalid")])) == (
        "none of the 1 accepted host(s) proposed θ_4 (their logs say why: a Δ no holder served, a model out "
        "of bounds)")


def test_a_split_vote_gives_each_hash_its_share_of_the_accepted_stake() -> None:
    split = report([host(A, 50, proposes=ONE), host(B, 30, proposes=TWO), host(C, 20)])
    reason = unchanged_reason(split)
    assert reason == (f"no θ_4 was backed by more than 2/3 of the accepted stake ({ONE[:12]}… 50 %, "
                      f"{TWO[:12]}… 30 %, no proposal 20 %)")
    assert summary_line(split).endswith(f"θ unchanged ({reason})")
    assert epoch_rows([split], "inj")[0]["unchanged_reason"] == reason


def test_a_challenge_shows_its_objections_and_both_rounds_and_validators_their_unserved() -> None:
    """The game of issue 27 as an operator reads it: no `audit` outcome; a disputed challenge shows
    how many round-0 seats objected and the final vote; a validator its objections and `unserved`."""
    assert "audit" not in OUTCOME_STYLE and "audit" not in OUTCOME_COLOUR
    disputed = ChallengeReport(host=A, segment=1, rounds=1, objectors=[B], outcome="pass", votes=[
        Vote(validator=B, round=0, outcome="unavailable"), Vote(validator=C, round=1, outcome="pass")])
    quiet = ChallengeReport(host=A, segment=0, outcome="pass", votes=[Vote(validator=C, round=0, outcome="pass")])
    assert challenge_cell(disputed) == "1:pass!1[?|✓]"
    assert challenge_cell(quiet) == "0:pass[✓]"
    validators = [ValidatorReport(address=B, stake="10", revealed=True, assigned=2, voted=2, unavailable=1,
                                  unserved=1, outcome="unserved", slashed="5"),
                  ValidatorReport(address=C, stake="10", revealed=True, assigned=2, voted=2, outcome="diligent")]
    r = report([host(A, 10, proposes=ONE)], agreed=True).model_copy(
        update={"validators": validators, "challenges": [disputed, quiet]})
    console = Console(width=240, record=True)
    console.print(report_tables(r, "inj"))
    text = console.export_text()
    assert "unserved" in text and "objected" in text and "1:pass!1[?|✓]" in text
    rows = [row for row in member_rows([r], "inj") if row["role"] == "validator"]
    assert {"unavailable", "unserved"} <= set(MEMBER_COLUMNS)
    assert [(row["unavailable"], row["unserved"], row["outcome"]) for row in rows] == [
        (1, 1, "unserved"), (0, 0, "diligent")]


def test_a_validator_weighed_below_its_stake_shows_both_and_the_draw_uses_the_weight() -> None:
    """Issue 27: a validator that a slash of the epoch before reached after it joined weighs what it
    kept at risk (contract 0.3.5): the table shows both, the picker draw's recomputation the weight."""
    ten, eight = str(10 * 10**18), str(8 * 10**18)
    validators = [ValidatorReport(address=B, stake=ten, weight=eight, revealed=True, outcome="diligent"),
                  ValidatorReport(address=C, stake=ten, revealed=True, outcome="diligent")]
    assert validator_weights(validators) == {B: 8 * 10**18, C: 10 * 10**18}
    r = report([host(A, 10, proposes=ONE)], agreed=True).model_copy(update={"validators": validators})
    console = Console(width=240, record=True)
    console.print(report_tables(r, "inj"))
    text = console.export_text()
    assert text.count("(weighs") == 1 and "10INJ (weighs 8INJ)" in text, text
    # The CSV rows carry both, the weight equal to the stake where nothing cut it.
    assert [(row["stake"], row["weight"]) for row in member_rows([r], "inj") if row["role"] == "validator"] == [
        (ten, 8 * 10**18), (ten, 10 * 10**18)]


def test_a_host_weighed_below_its_stake_shows_both_and_the_split_vote_counts_the_weight() -> None:
    """Issue 27: a host that a slash of the epoch before reached after it joined votes with what it
    kept at risk (contract 0.3.6): the table shows both, the split vote's shares use the weight."""
    inj = 10**18
    capped = host(A, 50 * inj, proposes=ONE).model_copy(update={"weight": str(10 * inj)})
    split = report([capped, host(B, 30 * inj, proposes=TWO), host(C, 20 * inj)])
    assert unchanged_reason(split) == (f"no θ_4 was backed by more than 2/3 of the accepted stake "
                                       f"({TWO[:12]}… 50 %, {ONE[:12]}… 17 %, no proposal 33 %)")
    console = Console(width=240, record=True)
    console.print(report_tables(split, "inj"))
    text = console.export_text()
    assert text.count("(weighs") == 1 and "50INJ (weighs 10INJ)" in text, text
    assert [row["weight"] for row in member_rows([split], "inj")] == [10 * inj, 30 * inj, 20 * inj]


def page(hosts: list[HostReport], validators: list[ValidatorPart], challenges: list[ChallengeReport],
         counts: list[ValidatorCounts], next: str | None, phase: str = "closed") -> ReportPage:
    return ReportPage(run_id=THETA, epoch=3, phase=phase, started_at=1, model_hash=THETA, agreed=True,
                      hosts=hosts, validators=validators, challenges=challenges, counts=counts, next=next)


def test_report_pages_assemble_to_one_report_with_each_validators_counts_summed() -> None:
    """What `Ledger.report` returns from the contract's pages: the shape of the unpaged report."""
    a_challenge = ChallengeReport(host=A, segment=0, outcome="pass", votes=[
        Vote(validator=B, round=0, outcome="pass"), Vote(validator=C, round=1, outcome="fail")])
    c_challenge = ChallengeReport(host=C, segment=1, outcome="pass", votes=[Vote(validator=B, round=0)])
    pages = [page([host(A, 10)], [ValidatorPart(address=B, stake="5", revealed=True, outcome="wrong")], [a_challenge],
                  [ValidatorCounts(validator=B, assigned=1, committed=1, voted=1),
                   ValidatorCounts(validator=C, assigned=1, committed=1, voted=1, against=1)], next=B),
             page([host(C, 20)], [], [c_challenge], [ValidatorCounts(validator=B, assigned=1, committed=1)], next=None)]
    whole = assemble_report(pages)
    assert whole == EpochReport(
        run_id=THETA, epoch=3, phase="closed", started_at=1, model_hash=THETA, agreed=True,
        hosts=[host(A, 10), host(C, 20)], challenges=[a_challenge, c_challenge],
        validators=[ValidatorReport(address=B, stake="5", revealed=True, outcome="wrong", assigned=2, committed=2,
                                    voted=1)])
    # One page is the whole report; C's counts name no validator of the epoch and are dropped.
    only = page([host(A, 10)], [], [a_challenge], pages[0].counts, next=None)
    assert assemble_report([only]).validators == []


def test_report_pages_that_do_not_fit_together_are_refused() -> None:
    first = page([host(A, 10)], [], [], [], next=A)
    last = page([host(B, 10)], [], [], [], next=None)
    with pytest.raises(ValueError, match="at least one page"):
        assemble_report([])
    with pytest.raises(ValueError, match="page 1 shows another state of epoch 3"):
        assemble_report([first, page([host(B, 10)], [], [], [], next=None, phase="propose")])
    with pytest.raises(ValueError, match="page 0 of 2 ends"):
        assemble_report([last, last])
    with pytest.raises(ValueError, match="page 1 of 2 goes on"):
        assemble_report([first, first])
    with pytest.raises(ValueError, match="listed twice"):
        assemble_report([first, page([host(A, 10)], [], [], [], next=None)])
    assert [h.address for h in assemble_report([first, last]).hosts] == [A, B]
