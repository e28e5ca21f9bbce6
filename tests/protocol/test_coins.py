"""Cosmos coin notation: base units with the base denom, the display form with the display denom,
never a bare number."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.coins import CoinError, annotate, base_units, display, parse_amount
from protocol.injective import ONE_INJ


@pytest.mark.parametrize("text, expected", [
    ("20000000000000000000inj", 20 * ONE_INJ),   # Cosmos notation: base units
    ("1500inj", 1500),
    ("20INJ", 20 * ONE_INJ),                     # the display form: whole INJ
    ("0.5 INJ", ONE_INJ // 2),
    (" 1.000000000000000001INJ ", ONE_INJ + 1),
    ("0inj", 0),
])
def test_both_notations_read_as_base_units(text, expected) -> None:
    assert parse_amount(text, "inj") == expected


@pytest.mark.parametrize("text, message", [
    ("20", "has no denom: write 20INJ or 20000000000000000000inj"),   # ambiguous: refused, with both forms
    ("1.5", "has no denom"),
    ("0.5inj", "base unit and has no fractions"),
    ("20atom", "unknown denom 'atom'"),
    ("20Inj", "unknown denom 'Inj'"),
    ("-3INJ", "is not an amount"),
    ("1e5inj", "unknown denom 'e5inj'"),
    ("0.0000000000000000001INJ", "more than 18 decimals"),
    ("", "is not an amount"),
])
def test_anything_else_is_refused_with_the_forms_to_use(text, message) -> None:
    with pytest.raises(CoinError, match=message):
        parse_amount(text, "inj")


def test_a_denom_without_display_form_takes_base_units_only() -> None:
    assert parse_amount("1500stake", "stake") == 1500
    with pytest.raises(CoinError, match=r"write e\.g\. 1500stake"):
        parse_amount("1500", "stake")
    assert display(1500, "stake") == base_units(1500, "stake") == "1500stake"


@pytest.mark.parametrize("value, text", [
    (20 * ONE_INJ, "20INJ"), (ONE_INJ * 4 // 10, "0.4INJ"), (1, "0.000000000000000001INJ"), (0, "0INJ"),
    (7_700_000_000_000_000_001, "7.700000000000000001INJ"), (-ONE_INJ // 2, "-0.5INJ"),
])
def test_the_display_form_is_exact(value, text) -> None:
    assert display(value, "inj") == text


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_display_and_base_units_read_back_to_the_same_amount(value: int) -> None:
    assert parse_amount(display(value, "inj"), "inj") == value
    assert parse_amount(base_units(value, "inj"), "inj") == value


def test_annotate_adds_the_display_form_to_base_units_only() -> None:
    text = "unbond: cannot unbond 25000000000000000000inj, only 20000000000000000000inj is bonded"
    assert annotate(text, "inj") == ("unbond: cannot unbond 25000000000000000000inj (25INJ), "
                                     "only 20000000000000000000inj (20INJ) is bonded")
    # Addresses and other words that contain the denom are left alone.
    untouched = "inj1npvwllfr9dqr8erajqqr6s0vxnk2ak55re90dz has 5injx and 3 inj"
    assert annotate(untouched, "inj") == untouched
    assert annotate("funds: got 5inj,3uatom", "inj") == "funds: got 5inj (0.000000000000000005INJ),3uatom"
