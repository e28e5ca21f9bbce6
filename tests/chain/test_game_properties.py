"""Random mixtures of strategies play the settlement game on the real contract (``game_env``):
funds are conserved to the last unit after every epoch, the contract's books balance, every
epoch closes, and no honest party (honest host, auditor, honest validator) is ever slashed.

The trust assumption (``docs/contract.md``, "Trust assumption"): a decision against the truth
needs two liars voting the same way on one challenge. The mixtures hold at most one validator of
each lying kind that votes (``always_pass``, ``always_fail``, ``false_unavailable``) and any
number that do not (``silent``, ``copycat``); within that, no mixture may slash an honest party.
"""

from __future__ import annotations

import pytest
from game_env import HONEST, Game
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HOST_KINDS = st.sampled_from(["honest", "honest", "auditor", "lazy", "selective_serve", "selective_reveal", "withhold"])


@st.composite
def mixtures(draw) -> tuple[dict[str, str], dict[str, str], int]:
    hosts = draw(st.lists(HOST_KINDS, min_size=1, max_size=4))
    liars = draw(st.lists(st.sampled_from(["always_pass", "always_fail", "false_unavailable"]), unique=True,
                          max_size=3))
    quiet = draw(st.lists(st.sampled_from(["silent", "copycat"]), max_size=2))
    honest = draw(st.integers(min_value=1, max_value=3))
    validators = ["honest"] * honest + liars + quiet
    order = draw(st.permutations(validators))
    return ({f"host{i + 1}": s for i, s in enumerate(hosts)},
            {f"validator{i + 1}": s for i, s in enumerate(order)},
            draw(st.integers(min_value=0, max_value=2**16)))


def check(mixture: tuple[dict[str, str], dict[str, str], int], epochs: int) -> None:
    hosts, validators, seed = mixture
    game = Game(hosts, validators, seed=seed)
    for report in game.play(epochs):  # conservation and the books are checked after each epoch
        assert report.phase == "closed"
        for member in [*report.hosts, *report.validators]:
            name = game.env.name_of(member.address)
            if (hosts.get(name) or validators.get(name)) in HONEST:
                assert int(member.slashed) == 0, (report.epoch, name, member.outcome, hosts, validators)
    assert game.honest_slashed() == 0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixtures())
def test_random_strategy_mixtures_conserve_funds_and_never_slash_the_honest(mixture) -> None:
    check(mixture, epochs=2)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixtures())
def test_random_strategy_mixtures_conserve_funds_and_never_slash_the_honest_long(mixture) -> None:
    check(mixture, epochs=3)


def settled(game: Game) -> list[dict]:
    """Every epoch's report without heights (paged closes take more blocks), with the tallies."""
    return [r.model_dump(exclude={"phase_deadline", "started_at"}) for r in game.reports]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixtures(), st.sampled_from([1, 2, 3]))
def test_random_mixtures_settled_page_by_page_end_exactly_like_one_transaction(mixture, page) -> None:
    """Closing reveal and finalize in pages of 1–3 records (the books checked after every page by
    ``LedgerEnv.settle``) settle exactly what one transaction settles, epoch after epoch."""
    hosts, validators, seed = mixture
    one_shot = Game(hosts, validators, seed=seed)
    paged = Game(hosts, validators, seed=seed, settle_page=page)
    one_shot.play(2)
    paged.play(2)
    assert one_shot.env.pages == [] and paged.env.pages != []
    assert settled(paged) == settled(one_shot)
    assert paged.tallies == one_shot.tallies
    assert paged.env.accounting() == one_shot.env.accounting()
